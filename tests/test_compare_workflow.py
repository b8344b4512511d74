"""Before and after through the real workflow (issue 37): a study compared with a baseline.

* the tiny study compared with a copy of itself: every point ``same``, the gate passes, the
  comparison's plot and report page are made and in report.html, no measurement re-runs,
  and a changed baseline re-runs the comparison alone;
* a second tiny study of one point with other threads, compared with the tiny study: the
  fingerprint diff lists threads first, the point is compared, the other is unmatched (no
  timing verdict is asserted: timing belongs in benchmarks);
* bad compare blocks refused by the config check before any job, naming key and path;
* the baseline's files are byte-identical and untouched after every comparison.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_faults import GOOD, load_as_the_snakefile_does
from workflow_helpers import (
    SCRIPTS,
    TINY,
    job_counts,
    read_csv,
    run_env,
    snakemake,
    snapshot,
    text_of,
    write_config,
)

from dnnroofline.errors import InputError

pytestmark = pytest.mark.workflow

#: the rules a comparison adds; nothing that measures
COMPARE_RULES = {"compare", "plot_compare_roofline", "compare_section"}
MEASURING = {"env_info", "ceilings", "efficiency", "train", "trace", "complexity"}
PAGE = Path("results/report_sections/before_after.html")


def tree(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def gate(compare_csv: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "regression_gate.py"), str(compare_csv), *args],
        capture_output=True,
        text=True,
        env=run_env(),
        timeout=120,
    )


# --------------------------------------------------------------------------- itself


@pytest.fixture(scope="module")
def self_compared(tiny_study, tmp_path_factory):
    """The tiny study, copied with its Snakemake records, compared with a second copy of
    its results (a baseline may not be the study's own results/: the comparison is written
    there, and the baseline is never written)."""
    baseline = tmp_path_factory.mktemp("before")
    shutil.copytree(tiny_study / "results", baseline / "results")
    # as deep as tiny_study: the rules' params hold the entry scripts' paths relative to
    # the working directory, so a copy at another depth would re-run its measurements
    here = tmp_path_factory.mktemp("after")
    shutil.copytree(tiny_study, here, ignore=shutil.ignore_patterns("locks"), dirs_exist_ok=True)
    config = yaml.safe_load((here / "config" / "config.yaml").read_text())
    write_config(here, dict(config, compare={"baseline": str(baseline), "label": "before"}))
    measured = tree(here / "results" / "local")
    before = snapshot(tree(baseline))
    measured_before = snapshot(measured)
    run = snakemake(here, "--cores", "2")
    report = snakemake(here, "--report", "results/report.html")
    return {
        "here": here,
        "baseline": baseline,
        "run": run,
        "report": report,
        "baseline_unchanged": before == snapshot(tree(baseline)),
        "measured_unchanged": measured_before == snapshot(measured),
    }


def test_a_study_compared_with_itself_is_the_same_everywhere(tiny_study, self_compared):
    here = self_compared["here"]
    rows = read_csv(here / "results" / "compare.csv")
    points = read_csv(here / "results" / "roofline_points.csv")
    assert len(rows) == len(points) == 2
    assert {r["verdict"] for r in rows} == {"same"}
    assert all(float(r["change_pct"]) == 0.0 for r in rows)
    assert read_csv(here / "results" / "compare_unmatched.csv") == []
    (fingerprint,) = read_csv(here / "results" / "compare_fingerprints.csv")
    assert fingerprint["key"] == "no difference"
    proc = gate(
        here / "results" / "compare.csv", "--config", str(here / "results/study_config.json")
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 point(s) passed" in proc.stdout


def test_the_comparison_reruns_nothing_measured_and_writes_no_baseline(tiny_study, self_compared):
    counts = job_counts(self_compared["run"].stdout + self_compared["run"].stderr)
    assert set(counts) >= COMPARE_RULES, counts
    assert not MEASURING & set(counts), counts  # the study's measurements stand
    assert self_compared["measured_unchanged"]
    assert self_compared["baseline_unchanged"]


def test_the_page_plot_and_terminal_of_a_comparison(tiny_study, self_compared):
    here = self_compared["here"]
    page = text_of(here / PAGE)
    assert "Compared with before" in page
    assert page.index("What changed besides the code") < page.index("Verdicts")
    assert "2 points compared: 0 slower, 0 faster, 2 the same within the noise" in page
    assert "regression gate at a tolerance of 5% passes" in page
    svg = (here / "results" / "plots" / "compare_roofline.svg").read_text()
    for model in ("resnet18", "cifar_resnet18"):
        assert f'id="arrow-local-{model}-fp32-bs2"' in svg
        assert f'id="baseline-local-{model}-fp32-bs2"' in svg
    assert (here / "results" / "plots" / "compare_roofline.png").stat().st_size > 10_000
    report = (here / "results" / "report.html").read_text()
    assert "Compared with before" in report and "before_after.html" in report
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "summarize_study.py"), "--results", "results",
         "--metrics", "results/metrics.csv", "--points", "results/roofline_points.csv"],
        cwd=here, capture_output=True, text=True, env=run_env(), check=True, timeout=120,
    ).stdout  # fmt: skip
    assert re.search(r"^same\s+local\s+resnet18\s+fp32\s+2\s", out, re.M), out
    assert "regression gate (tolerance 5%): PASS" in out


def test_a_changed_baseline_reruns_the_comparison_alone(tiny_study, self_compared):
    here, baseline = self_compared["here"], self_compared["baseline"]
    # Snakemake (9.18+) re-runs on an input whose content changed, not on its mtime alone
    metrics = baseline / "results" / "metrics.csv"
    metrics.write_text(metrics.read_text() + "\n")
    later = time.time() + 60
    os.utime(metrics, (later, later))
    counts = job_counts(snakemake(here, "-n", "--cores", "2", "--quiet", "rules").stdout)
    assert set(counts) - {"all", "total"} == COMPARE_RULES, counts


def test_a_study_without_a_compare_block_has_no_comparison(tiny_study):
    results = tiny_study / "results"
    assert not (results / "compare.csv").exists()
    assert not (tiny_study / PAGE).exists()
    config = json.loads((results / "study_config.json").read_text())
    assert "compare" not in config and config["regression"] == {"tolerance_pct": 5}
    asked = snakemake(tiny_study, "-n", "--cores", "1", "results/compare.csv", check=False)
    assert asked.returncode != 0
    assert "the config has no compare: block" in asked.stdout + asked.stderr


# --------------------------------------------------------------------------- other threads


def test_other_threads_are_listed_first_beside_the_compared_point(tiny_study, tmp_path):
    """One point of the tiny study again, with 2 threads instead of 1 and one run."""
    baseline = tiny_study / "results"
    before = snapshot(tree(baseline))
    config = {
        "envs": {"local": {"device": "auto", "threads": 2}},
        "study": dict(TINY["study"], models=["resnet18"], runs=1),
        "ceilings": {"quick": True},
        "traces": {"enabled": False},
        "compare": {"baseline": str(baseline), "label": "one thread"},
    }
    write_config(tmp_path, config)
    snakemake(tmp_path, "--cores", "2", "results/compare.csv")
    results = tmp_path / "results"
    fingerprints = read_csv(results / "compare_fingerprints.csv")
    threads = [r for r in fingerprints if r["key"] == "threads"]
    assert threads == [
        {"env": "local", "baseline_env": "local", "key": "threads", "baseline": "1", "current": "2"}
    ]
    (row,) = read_csv(results / "compare.csv")
    assert (row["env"], row["model"], row["precision"], row["batch"]) == (
        "local", "resnet18", "fp32", "2"
    )  # fmt: skip
    assert row["verdict"] in {"faster", "slower", "same"}
    assert (row["baseline_runs"], row["runs"]) == ("2", "1")
    (unmatched,) = read_csv(results / "compare_unmatched.csv")
    assert unmatched["model"] == "cifar_resnet18" and unmatched["in"] == "baseline"
    assert before == snapshot(tree(baseline))


# --------------------------------------------------------------------------- bad input


def a_study_folder(folder: Path, envs=("local",)) -> Path:
    """A finished study as the check reads it: a metrics.csv with its envs."""
    folder.mkdir(parents=True)
    header = "env,model,precision,batch_size,run,status,images_per_s,step_median_s"
    rows = [f"{env},resnet18,fp32,2,1,ok,10.0,0.2" for env in envs]
    (folder / "metrics.csv").write_text("\n".join([header, *rows]) + "\n")
    return folder


def bad_compare_cases(tmp: Path) -> dict[str, tuple[dict, list[str]]]:
    study = a_study_folder(tmp / "old" / "results")
    renamed = a_study_folder(tmp / "renamed" / "results", envs=("box",))
    (tmp / "empty").mkdir()
    nowhere, empty = tmp / "nowhere", tmp / "empty"
    return {
        "missing_folder": (
            {"baseline": str(nowhere)},
            ["compare.baseline", str(nowhere), "no such folder"],
        ),
        "no_study": ({"baseline": str(empty)}, ["compare.baseline", str(empty), "holds no study"]),
        "unknown_env_here": (
            {"baseline": str(study), "envs": {"lokal": "local"}},
            ["compare.envs", "'lokal' is not an env of this study"],
        ),
        "no_common_point": (
            {"baseline": str(renamed)},
            [
                "compare.baseline",
                str(renamed),
                "no (env, model, precision, batch) point in common",
                "its envs: local; the baseline's: box",
                "compare.envs: {local: box}",
            ],
        ),
        "unknown_env_there": (
            {"baseline": str(study), "envs": {"local": "box"}},
            ["compare.envs.local", "'box' is not an env of the baseline", str(study)],
        ),
    }


@pytest.mark.parametrize(
    "case",
    ["missing_folder", "no_study", "unknown_env_here", "no_common_point", "unknown_env_there"],
)
def test_a_bad_compare_block_is_named_by_the_config_check(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec, expected = bad_compare_cases(tmp_path)[case]
    path = write_config(tmp_path / "study", dict(GOOD, compare=spec)).relative_to(tmp_path)
    with pytest.raises(InputError) as refused:
        load_as_the_snakefile_does(path)
    for text in expected:
        assert text in str(refused.value), str(refused.value)


def test_a_good_compare_block_passes_the_config_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a_study_folder(tmp_path / "old" / "results", envs=("box",))
    spec = {"baseline": "old", "envs": {"local": "box"}}  # relative: from the working directory
    path = write_config(tmp_path, dict(GOOD, compare=spec)).relative_to(tmp_path)
    config, study = load_as_the_snakefile_does(path)
    assert study.baseline.label == "old" and study.baseline.envs == ("box",)
    assert study.baseline.root == tmp_path / "old" / "results"
    assert config["regression"] == {"tolerance_pct": 5}


def test_a_missing_baseline_stops_the_workflow_before_any_job(tmp_path):
    write_config(tmp_path, dict(GOOD, compare={"baseline": "../nowhere"}))
    proc = snakemake(tmp_path, "--cores", "1", check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "compare.baseline ../nowhere" in out and "no such folder" in out, out[-2000:]
    assert "Traceback" not in out
    assert not (tmp_path / "results").exists(), "a job ran before the config was refused"
