"""`make gpu-lease` (scripts/gpu_lease.py, dnnroofline.tools.lease): a plan's groups in
priority order within a budget, packed after each, a group past its deadline cut."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml
from workflow_helpers import ROOT, TINY, TINY_POINTS, TINY_RUNS, run_env, write_config

from dnnroofline.errors import InputError
from dnnroofline.tools import lease

SCRIPT = ROOT / "scripts" / "gpu_lease.py"


def gpu_lease(*args, timeout=300):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env=run_env(),
        timeout=timeout,
    )


def write_plan(path: Path, groups) -> Path:
    path.write_text(yaml.safe_dump(groups, sort_keys=False))
    return path


def archive_names(out: Path) -> set[str]:
    with tarfile.open(out / lease.ARCHIVE) as tar:
        return set(tar.getnames())


@pytest.fixture
def tiny(tmp_path):
    """A workdir with the tiny CPU study's config; (workdir, config path)."""
    workdir = tmp_path / "work"
    return workdir, write_config(workdir, TINY)


# ---------------------------------------------------------------- the plan


def test_placeholders_expand_over_the_tiny_studys_points_and_runs(tiny):
    workdir, config = tiny
    spec = importlib.util.spec_from_file_location("gpu_lease", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    matrix = script.study_matrix([str(config)], workdir)
    assert matrix.envs == ("local",) and matrix.runs == (1, 2)
    group = lease.Group("runs", ("results/{env}/runs/{point}_run{run}.json", "measure"))
    targets = lease.expand_group(group, matrix)
    assert len(targets) == TINY_RUNS + 1 and targets[-1] == "measure"
    assert targets[:2] == [
        "results/local/runs/local_resnet18_fp32_bs2_run1.json",
        "results/local/runs/local_resnet18_fp32_bs2_run2.json",
    ]
    first = lease.expand("results/{env}/runs/{point}_run1.json", matrix)
    assert len(first) == TINY_POINTS and all(t.endswith("_run1.json") for t in first)
    assert lease.expand("results/{env}/env_info.json", matrix) == ["results/local/env_info.json"]


@pytest.mark.parametrize(
    ("group", "wanted"),
    [
        ({"name": "a", "targets": ["x"], "estimate": 5}, "group 1 ('a'): unknown key 'estimate'"),
        ({"targets": ["x"]}, "group 1: key 'name'"),
        ({"name": "a"}, "group 1 ('a'): key 'targets'"),
        ({"name": "a", "targets": []}, "group 1 ('a'): key 'targets'"),
        ({"name": "a", "targets": ["x"], "estimate_s": -1}, "group 1 ('a'): key 'estimate_s'"),
        ({"name": "a", "targets": ["results/{model}.json"]}, "{model}"),
        ({"name": "a", "targets": ["x"], "estimate_s": True}, "key 'estimate_s'"),
    ],
)
def test_a_bad_plan_names_its_file_group_and_key(group, wanted):
    with pytest.raises(InputError) as err:
        lease.parse_plan([group], "plan.yaml")
    assert str(err.value).startswith("plan.yaml: group 1") and wanted in str(err.value)


def test_a_bad_plan_stops_the_command_before_anything_runs(tiny, tmp_path):
    workdir, config = tiny
    plan = write_plan(
        tmp_path / "plan.yaml",
        [{"name": "ok", "targets": ["x"]}, {"name": "b", "targets": ["{env}/{pont}"]}],
    )
    out = tmp_path / "out"
    proc = gpu_lease("--plan", plan, "--budget-s", 60, "--out", out, "--configfile", config)
    assert proc.returncode == 2
    assert f"{plan}: group 2 ('b'): key 'targets'" in proc.stderr and "{point}" in proc.stderr
    assert not out.exists()
    with pytest.raises(InputError, match="name 'ok' is used by an earlier group"):
        lease.parse_plan([{"name": "ok", "targets": ["x"]}] * 2, "p.yaml")


# ---------------------------------------------------------------- the lease


@pytest.mark.workflow  # its first group runs the workflow
def test_a_real_lease_runs_the_first_group_skips_one_over_budget_and_packs(tiny, tmp_path):
    workdir, config = tiny
    plan = write_plan(
        tmp_path / "plan.yaml",
        [
            {"name": "fingerprint", "targets": ["results/{env}/env_info.json"]},
            {"name": "runs", "targets": ["results/{env}/runs/{point}_run1.json"]},
        ],
    )
    plan_text = plan.read_text().replace("- name: runs", "- estimate_s: 100000\n  name: runs")
    plan.write_text(plan_text)
    out = tmp_path / "out"
    args = ["--plan", plan, "--budget-s", 300, "--out", out, "--configfile", config]
    dry = gpu_lease(*args, "--directory", workdir, "--dry-run")
    assert dry.returncode == 0
    assert f"runs: {TINY_POINTS} targets, estimate 100000 s" in dry.stdout
    proc = gpu_lease(*args, "--directory", workdir, "--cores", 1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["lease.json", "lease.log", "results.tar.gz"]
    assert "results/local/env_info.json" in archive_names(out)
    record = json.loads((out / "lease.json").read_text())
    done, skipped = record["groups"]
    assert (done["status"], done["exit_code"], done["targets_done"]) == ("done", 0, 1)
    assert skipped["status"] == "skipped" and "estimate 100000 s" in skipped["reason"]
    assert record["budget_s"] == 300 and record["end"] and record["envs"] == ["local"]
    assert "fingerprint  done" in proc.stdout and "1/1" in proc.stdout
    assert "env_info" in (out / "lease.log").read_text()


def test_a_group_past_its_deadline_is_cut_and_the_archive_before_is_kept(tiny, tmp_path):
    workdir, config = tiny
    # a stand-in for snakemake: the fingerprint at once, anything else sleeps past the
    # deadline after writing its pid (so that the test can see it was stopped)
    stand_in = (
        'case "$*" in *env_info*) mkdir -p results/local && echo {} > results/local/env_info.json;;'
        " *) echo $$ > sleeper.pid; exec sleep 60;; esac"
    )
    plan = write_plan(
        tmp_path / "plan.yaml",
        [
            {"name": "fingerprint", "targets": ["results/{env}/env_info.json"]},
            {"name": "slow", "targets": ["results/{env}/ceilings.json"]},
            {"name": "later", "targets": ["results/{env}/efficiency.json"]},
        ],
    )
    out = tmp_path / "out"
    began = time.monotonic()
    proc = gpu_lease(
        "--plan", plan, "--budget-s", 6, "--reserve-s", 1, "--grace-s", 1, "--out", out,
        "--configfile", config, "--directory", workdir,
        "--snakemake", f"sh -c {shlex.quote(stand_in)} stand-in",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert time.monotonic() - began < 30
    rows = {row["name"]: row for row in json.loads((out / "lease.json").read_text())["groups"]}
    assert rows["fingerprint"]["status"] == "done"
    assert rows["slow"]["status"] == "cut" and rows["slow"]["reason"].startswith("deadline")
    assert rows["later"] == {**rows["later"], "status": "skipped", "reason": "no time left"}
    assert archive_names(out) == {"results/local/env_info.json"}
    pid = int((workdir / "sleeper.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "slow" in proc.stdout and "cut" in proc.stdout


def test_a_study_wide_file_target_is_packed_and_every_file_made_has_its_sha256(tiny, tmp_path):
    workdir, config = tiny
    # a stand-in for snakemake that makes each file target it is given
    stand_in = (
        'for t in "$@"; do case "$t" in results/*) mkdir -p "$(dirname "$t")";'
        ' echo "made $t" > "$t";; esac; done'
    )
    plan = write_plan(
        tmp_path / "plan.yaml",
        [
            {"name": "predict", "targets": ["results/predictions.csv", "predictions"]},
            {"name": "runs", "targets": ["results/{env}/runs/{point}_run1.json"]},
        ],
    )
    out = tmp_path / "out"
    proc = gpu_lease(
        "--plan", plan, "--budget-s", 60, "--out", out, "--configfile", config,
        "--directory", workdir, "--snakemake", f"sh -c {shlex.quote(stand_in)} stand-in",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = archive_names(out)
    assert "results/predictions.csv" in names  # outside results/{env}/, packed all the same
    assert len([n for n in names if n.startswith("results/local/runs/")]) == TINY_POINTS
    predict, runs = json.loads((out / "lease.json").read_text())["groups"]
    made = (workdir / "results" / "predictions.csv").read_bytes()
    assert predict["sha256"] == {"results/predictions.csv": hashlib.sha256(made).hexdigest()}
    assert len(runs["sha256"]) == TINY_POINTS  # the rule name "predictions" is no file
    # the prediction, taken out to be committed before the next call measures
    dest = tmp_path / "examples" / "predicted.csv"
    proc = gpu_lease("--out", out, "--take-out", "results/predictions.csv", dest)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert dest.read_bytes() == made and predict["sha256"]["results/predictions.csv"] in proc.stdout
    proc = gpu_lease("--out", out)
    assert proc.returncode == 2 and "--plan and --budget-s are required" in proc.stderr


def lease_folder(tmp_path: Path, content: bytes = b"model,images_per_s\nresnet18,3079\n") -> Path:
    """A lease folder whose one group made results/predictions.csv."""
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "results").mkdir(parents=True)
    (work / "results" / "predictions.csv").write_bytes(content)
    lease.pack(out / lease.ARCHIVE, work, [], ["results/predictions.csv"])
    sha = lease.digests(["results/predictions.csv"], work)
    (out / lease.RECORD).write_text(json.dumps({"groups": [{"name": "predict", "sha256": sha}]}))
    return out


def test_take_out_copies_the_recorded_bytes_and_refuses_anything_else(tmp_path):
    out = lease_folder(tmp_path)
    dest = tmp_path / "examples" / "predicted.csv"
    sha = lease.take_out(out, "results/predictions.csv", dest)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha
    assert lease.take_out(out, "results/predictions.csv", dest) == sha  # same bytes: no-op

    with pytest.raises(InputError, match=r"no group made 'results/prediction\.csv' \(made: "):
        lease.take_out(out, "results/prediction.csv", tmp_path / "x.csv")
    dest.write_text("edited by hand\n")
    with pytest.raises(InputError, match="predicted.csv exists with other contents"):
        lease.take_out(out, "results/predictions.csv", dest)

    # an archive whose file is not the one the lease recorded (packed again after an edit)
    record = (out / lease.RECORD).read_text()
    other = lease_folder(tmp_path / "other", b"model,images_per_s\nresnet18,9999\n")
    (other / lease.RECORD).write_text(record)
    with pytest.raises(InputError, match=r"is not what group 'predict' made \(sha256 "):
        lease.take_out(other, "results/predictions.csv", tmp_path / "y.csv")
    assert not (tmp_path / "y.csv").exists()
    (out / lease.RECORD).write_text("{")
    with pytest.raises(InputError, match="lease.json: not a lease record"):
        lease.take_out(out, "results/predictions.csv", tmp_path / "z.csv")


def test_the_archives_extra_files_are_the_plans_file_targets_outside_the_env_folders():
    groups = [
        (lease.Group("a", ()), ["results/local/ceilings.json", "results/predictions.csv"]),
        (lease.Group("b", ()), ["measure", "results/predictions.csv", "results/localx/f"]),
    ]
    extra = lease.file_targets(groups, ["results/local"])
    assert extra == ["results/predictions.csv", "results/localx/f"]


def test_a_pack_that_fails_half_way_leaves_the_archive_before(tmp_path, monkeypatch):
    (tmp_path / "results" / "e").mkdir(parents=True)
    for name in ("a", "b"):
        (tmp_path / "results" / "e" / name).write_text(name)
    out = tmp_path / "out"
    assert lease.pack(out / lease.ARCHIVE, tmp_path, ["results/e", "results/none"]) == 2
    before = (out / lease.ARCHIVE).read_bytes()
    (tmp_path / "results" / "e" / "c").write_text("c")
    real_add = tarfile.TarFile.add

    def add_then_die(self, path, *args, **kwargs):
        if str(path).endswith("b"):
            raise KeyboardInterrupt
        return real_add(self, path, *args, **kwargs)

    monkeypatch.setattr(tarfile.TarFile, "add", add_then_die)
    with pytest.raises(KeyboardInterrupt):
        lease.pack(out / lease.ARCHIVE, tmp_path, ["results/e"])
    assert (out / lease.ARCHIVE).read_bytes() == before
    assert [p.name for p in out.iterdir()] == [lease.ARCHIVE]


def test_start_verdict_and_the_command():
    assert lease.start_verdict(100, 20, None) is None
    assert lease.start_verdict(100, 20, 80) is None
    assert "estimate 81 s > 80 s" in lease.start_verdict(100, 20, 81)
    assert lease.start_verdict(20, 20, None) == "no time left"
    cmd = lease.snakemake_command(["snakemake"], ["a.yaml", "b.yaml"], ["t1", "t2"], "4")
    assert cmd[:6] == ["snakemake", "--cores", "4", "--configfile", "a.yaml", "b.yaml"]
    assert cmd[-2:] == ["t1", "t2"] and "--replace-workflow-config" in cmd
    assert cmd[cmd.index("--rerun-triggers") + 1] == "mtime" and "--keep-going" in cmd
