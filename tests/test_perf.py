"""CPU counters: perf stat -x, parsing on real outputs, event choice, the probe, the profile."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_perf import (
    DRAM_CHANNELS,
    DRAM_MIB_PER_STEP,
    FLOP_EVENT,
    FLOP_PER_STEP,
    calls,
    make_fake_perf,
)
from test_aggregate import make_run

from dnnroofline.aggregate.metrics import metrics_frame
from dnnroofline.aggregate.points import roofline_points_frame
from dnnroofline.errors import InputError
from dnnroofline.measure import ceilings, perf, perf_run

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "perf"
SCRIPT = ROOT / "workflow" / "scripts" / "profile_perf.py"


def read(name: str) -> str:
    return (DATA / name).read_text()


# ----------------------------------------------------------------------------- real outputs


def test_intel_interval_cgroup_output_gives_flops():
    """CPU-Bops' real -I/-G output: value after the timestamp, cgroup after the event."""
    rows = perf.parse_stat_csv(read("cpubops_intel_fp_arith_interval_cgroup.csv"))
    assert len(rows) == 12
    assert all(r["status"] == "counted" for r in rows)
    by = perf.totals(rows)
    assert by["uops_executed.core"]["value"] == 9268048049
    assert by["fp_arith_inst_retired.scalar_double"]["value"] == 6335375
    scalar = next(r for r in rows if r["event"] == "fp_arith_inst_retired.scalar_double")
    assert scalar["runtime"] == 342077198 and scalar["percent"] == pytest.approx(34.22)
    # the eight fp_arith events, weighted by lanes: only scalar double counted here
    assert perf.flops_of(by, perf.INTEL_FLOP_EVENTS) == 6335375
    weights = dict(perf.INTEL_FLOP_EVENTS)
    assert weights["fp_arith_inst_retired.512b_packed_single"] == 16
    assert weights["fp_arith_inst_retired.256b_packed_double"] == 4


def test_this_vm_not_supported_output():
    rows = perf.parse_stat_csv(read("this_vm_hw_events_not_supported.csv"))
    assert [(r["event"], r["status"], r["value"]) for r in rows] == [
        ("cycles", "not supported", None),
        ("instructions", "not supported", None),
    ]
    assert perf.totals(rows)["cycles"]["value"] is None


def test_this_vm_perf_list_has_no_hardware_events():
    listed = perf.listed_events(read("this_vm_perf_list.txt"))
    assert {"cpu-clock", "cs", "context-switches", "msr/tsc/", "task-clock"} <= listed
    assert perf.choose_events(listed) == {"vendor_set": None, "flop": {}, "dram": []}


def test_unavailable_reason_quotes_perf_and_the_kernel():
    why = perf.unavailable_reason(
        read("this_vm_hw_events_not_supported.csv"),
        returncode=0,
        listed=perf.listed_events(read("this_vm_perf_list.txt")),
        kernel_log=read("this_vm_dmesg_pmu.txt"),
    )
    assert "perf list offers none of the FLOP events" in why
    assert "<not supported>,,cycles,0,100.00,," in why
    assert "PMU not available due to virtualization" in why


def test_unknown_event_is_perfs_own_error():
    text = read("this_vm_amd_flop_event_unknown.txt")
    with pytest.raises(InputError, match=r"perf said: .*event syntax error: 'fp_ret_sse_avx_ops"):
        perf.parse_stat_csv(text)
    why = perf.unavailable_reason(text, returncode=129, listed=[])
    assert why.startswith("perf stat exited 129: event syntax error")


# ----------------------------------------------------------------------------- event choice


def test_choose_events_per_vendor():
    intel = set(perf.INTEL_FLOP_EVENTS) | {
        "uncore_imc/cas_count_read/",
        "uncore_imc/cas_count_write/",
    }
    got = perf.choose_events(intel)
    assert got["vendor_set"] == "intel" and len(got["flop"]) == 8
    assert got["dram"] == ["uncore_imc/cas_count_read/", "uncore_imc/cas_count_write/"]
    amd = {"fp_ret_sse_avx_ops.all", "dram_channel_data_controller_0", "cycles"}
    got = perf.choose_events(amd)
    assert got == {
        "vendor_set": "amd",
        "flop": {"fp_ret_sse_avx_ops.all": 1},
        "dram": ["dram_channel_data_controller_0"],
    }
    # half of Intel's set is not enough: FLOPs would be undercounted
    assert perf.choose_events(list(perf.INTEL_FLOP_EVENTS)[:4])["flop"] == {}


def test_a_row_with_a_unit_names_its_event_not_the_unit():
    # perf stat -x, prints value,unit,event,run time,percent: DRAM events carry MiB
    text = (
        "182.44,MiB,uncore_imc/cas_count_read/,1001833642,100.00,,\n"
        "5000,,fp_arith_inst_retired.scalar_single,1001833642,100.00,,\n"
    )
    counts = perf.totals(perf.parse_stat_csv(text))
    assert counts == {
        "uncore_imc/cas_count_read/": {"value": 182.44, "status": "counted", "unit": "MiB"},
        "fp_arith_inst_retired.scalar_single": {"value": 5000.0, "status": "counted", "unit": ""},
    }
    assert perf.bytes_of(counts, ["uncore_imc/cas_count_read/"]) == 182.44 * 2**20


def test_dram_bytes_follow_the_printed_unit():
    counts = {
        "uncore_imc/cas_count_read/": {"value": 2.0, "unit": "MiB"},
        "uncore_imc/cas_count_write/": {"value": 1000.0, "unit": ""},  # raw lines
    }
    assert perf.bytes_of(counts, list(counts)) == 2 * 2**20 + 1000 * 64
    counts["uncore_imc/cas_count_write/"]["unit"] = "furlongs"
    with pytest.raises(InputError, match="unknown unit 'furlongs'"):
        perf.bytes_of(counts, list(counts))
    assert perf.bytes_of(counts, []) is None


# ----------------------------------------------------------------------------- probe, profile


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_probe_on_this_machine_is_clean():
    p = perf_run.probe()
    assert p["status"] in ("ok", "unavailable") and p["perf"].startswith("perf version")
    if p["status"] == "unavailable":  # this VM: no PMU
        assert p["reason"] and p["output"]
        assert p["output"].splitlines()[0] in p["reason"]


def test_probe_without_perf_and_profile_that_runs_nothing(tmp_path):
    p = perf_run.probe("no-such-perf-binary")
    assert p["status"] == "unavailable" and "not on PATH" in p["reason"]
    rec = perf_run.profile(["python", "-c", "raise SystemExit(3)"], p)
    assert rec["status"] == "unavailable" and rec["reason"] == p["reason"]
    assert rec["flop_per_step"] is None and rec["probe"]["status"] == "unavailable"


def test_cli_records_unavailable_from_the_envs_probe(tmp_path):
    ceilings = tmp_path / "ceilings.json"
    probe = {
        "status": "unavailable",
        "reason": "PMU not available (test)",
        "perf": None,
        "executable": perf_run.resolved_executable("perf"),  # the --perf default
    }
    ceilings.write_text(json.dumps({"env": "local", "roofs": [], "perf": probe}))
    out = tmp_path / "perf" / "local_resnet18_fp32_bs8.json"
    cmd = [sys.executable, str(SCRIPT), "--ceilings", str(ceilings), "--json-out", str(out)]
    proc = subprocess.run([*cmd, "--", "python", "nothing.py"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert rec["status"] == "unavailable" and rec["reason"] == "PMU not available (test)"
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 2 and "driver command after --" in proc.stderr


# ----------------------------------------------------------------------------- perf.executable

#: A driver stand-in: writes an ok run record for its --iters to --out, as run_train.py does.
FAKE_DRIVER = (
    "import json, sys; a = sys.argv; "
    "json.dump({'status': 'ok', 'iters': int(a[a.index('--iters') + 1])}, "
    "open(a[a.index('--out') + 1], 'w'))"
)


@pytest.fixture
def two_perfs(tmp_path, monkeypatch):
    """``perf`` first on PATH, which lists no counters, and the configured one elsewhere."""
    path_perf = make_fake_perf(tmp_path / "path_bin", "perf", events=False)
    configured = make_fake_perf(tmp_path / "tools", "perf-6.8")
    monkeypatch.setenv("PATH", f"{path_perf.parent}{os.pathsep}{os.environ['PATH']}")
    return path_perf, configured


def test_ceilings_probe_the_configured_perf_not_the_one_on_path(two_perfs, monkeypatch):
    path_perf, configured = two_perfs
    # the roofs themselves are not what this test is about: one cheap measured roof each
    roof = {"source": "measured", "value": 1e9}
    monkeypatch.setattr(
        ceilings, "measure_compute", lambda dev, p, **kw: dict(roof, kind="compute", precision=p)
    )
    monkeypatch.setattr(
        ceilings, "measure_memory", lambda dev, **kw: [dict(roof, kind="memory", precision=None)]
    )
    c = ceilings.build_ceilings("local", "cpu", ["fp32"], perf_executable=str(configured))
    assert c["perf"]["status"] == "ok", c["perf"]
    assert c["perf"]["perf"] == "perf version fake perf-6.8"
    assert c["perf"]["executable"] == str(configured)
    assert c["perf"]["events"]["flop"] == {FLOP_EVENT: 1}
    assert c["perf"]["events"]["dram"] == list(DRAM_CHANNELS)
    assert calls(path_perf.parent) == []  # PATH's perf was never asked
    assert [c["argv"][0] for c in calls(configured.parent)] == ["--version", "list", "stat"]


def test_profile_runs_the_configured_perf_and_reprobes_a_probe_of_another(two_perfs, tmp_path):
    """The env's probe was of PATH's perf (no counters); --perf names another binary:
    that one is probed and runs the driver, and the per-step counts are its exact ones."""
    path_perf, configured = two_perfs
    ceilings_json = tmp_path / "ceilings.json"
    stale = perf_run.probe("perf")
    assert stale["status"] == "unavailable" and stale["executable"] == str(path_perf)
    (path_perf.parent / "calls.jsonl").unlink()  # from here on, PATH's perf must stay idle
    ceilings_json.write_text(json.dumps({"env": "local", "roofs": [], "perf": stale}))
    out, driver_out = tmp_path / "perf.json", tmp_path / "driver.json"
    cmd = [sys.executable, str(SCRIPT), "--perf", str(configured), "--ceilings", str(ceilings_json)]
    cmd += ["--json-out", str(out), "--driver-run-out", str(driver_out)]
    cmd += ["--iters-short", "1", "--iters-long", "3", "--", sys.executable, "-c", FAKE_DRIVER]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert rec["status"] == "ok", rec
    assert rec["probe"]["perf"] == "perf version fake perf-6.8"
    assert rec["flop_per_step"] == FLOP_PER_STEP
    assert rec["dram_bytes_per_step"] == len(DRAM_CHANNELS) * DRAM_MIB_PER_STEP * 2**20
    assert rec["ai"] == pytest.approx(FLOP_PER_STEP / (2 * DRAM_MIB_PER_STEP * 2**20))
    assert json.loads(driver_out.read_text()) == {"status": "ok", "iters": 3}
    assert calls(path_perf.parent) == []
    stats = [c["argv"] for c in calls(configured.parent) if c["argv"][0] == "stat"]
    assert len(stats) == 3  # the probe's, then the driver at 1 and at 3 steps
    for argv, iters in zip(stats[1:], ("1", "3"), strict=True):
        assert argv[argv.index("-e") + 1] == ",".join([FLOP_EVENT, *DRAM_CHANNELS])
        assert "-a" in argv and "-o" in argv  # DRAM events count system-wide
        driver = argv[argv.index("--") + 1 :]
        assert driver[:3] == [sys.executable, "-c", FAKE_DRIVER]
        assert driver[driver.index("--iters") + 1] == iters


def test_profile_reuses_the_envs_probe_of_the_same_perf(two_perfs, tmp_path):
    _, configured = two_perfs
    recorded = perf_run.probe(str(configured))
    before = len(calls(configured.parent))
    assert perf_run.probe_for(str(configured), recorded) is recorded
    assert len(calls(configured.parent)) == before  # not probed again
    assert perf_run.probe_for(str(configured), {"status": "ok"}) == recorded  # whose? re-probe


@pytest.mark.workflow
def test_workflow_gives_perf_executable_to_the_probe_and_the_perf_jobs(tmp_path):
    from workflow_helpers import TINY, snakemake, write_config

    config = json.loads(json.dumps(TINY))
    config["study"].update(models=["resnet18"], batch_sizes=[2], runs=1)
    config["perf"] = {"enabled": True, "executable": "/opt/perf-6.8/perf"}
    write_config(tmp_path, config)
    target = "results/local/perf/local_resnet18_fp32_bs2.json"
    out = snakemake(tmp_path, "-n", "-p", "--cores", "2", target).stdout
    (probe,) = [ln for ln in out.splitlines() if "ceilings.py" in ln]
    (run,) = [ln for ln in out.splitlines() if "profile_perf.py" in ln]
    assert "--perf /opt/perf-6.8/perf " in probe
    assert "--perf /opt/perf-6.8/perf " in run


# ----------------------------------------------------------------------------- aggregation


def _frame(perf_doc, precision="fp32", nproc=1):
    comp = {
        "arch": "toy",
        "batch_size": 8,
        "params": 10,
        "flops": {"train_step": 1_000_000},
        "min_dram_bytes_per_step": 10_000,
        "traffic": {"table": [[20_000, "act", 1, 1, 1]]},
    }
    ceilings = {
        "local": {
            "env": "local",
            "roofs": [
                {"kind": "compute", "precision": precision, "source": "measured", "value": 5e10},
                {"kind": "memory", "precision": None, "source": "measured", "value": 1e9},
            ],
        }
    }
    run = make_run("local", "toy", precision, 8, 1, median=1e-3)
    run["config"]["nproc"] = nproc
    metrics = metrics_frame([run])
    key = ("local", "toy", precision, 8)
    points = roofline_points_frame(metrics, {("toy", 8): comp}, ceilings, perf={key: perf_doc})
    return points.iloc[0]


def test_perf_counts_give_a_measured_ai_with_the_range_beside_it():
    doc = {"status": "ok", "flop_per_step": 1_200_000.0, "dram_bytes_per_step": 30_000.0}
    r = _frame(doc)
    assert r["ai_source"] == "perf"
    assert r["ai"] == pytest.approx(40.0) and r["flop_per_step"] == 1_200_000
    assert r["ai_low"] == pytest.approx(1e6 / 40_200) and r["ai_high"] == pytest.approx(100.0)
    # a measured AI gets a plain bound from its own value: 40 < ridge 50, although the
    # analytic range (25-100) straddles the ridge
    assert r["bound"] == "memory"


def test_perf_counts_of_a_data_parallel_run_are_shared_by_its_ranks():
    # perf stat counts every process of the run; a data-parallel point is one rank's
    doc = {"status": "ok", "flop_per_step": 2_400_000.0, "dram_bytes_per_step": 60_000.0}
    r = _frame(doc, nproc=2)
    assert r["flop_per_step"] == 1_200_000 and r["bytes_per_step"] == 30_000
    assert r["ai"] == pytest.approx(40.0)


def test_perf_not_used_when_unavailable_or_for_bf16():
    assert _frame({"status": "unavailable", "reason": "no PMU"})["ai_source"] == "analytic"
    ok = {"status": "ok", "flop_per_step": 1.0, "dram_bytes_per_step": 1.0}
    assert _frame(ok, precision="bf16")["ai_source"] == "analytic"
    with pytest.raises(InputError, match="flop_per_step"):
        _frame({"status": "ok", "flop_per_step": -1, "dram_bytes_per_step": 1.0})


@pytest.mark.workflow
def test_workflow_perf_step_records_unavailable_once_per_env(tmp_path):
    """perf.enabled: the env's ceilings carry the probe; each config's file its outcome."""
    from workflow_helpers import TINY, snakemake, write_config

    config = json.loads(json.dumps(TINY))
    config["study"].update(models=["resnet18"], batch_sizes=[2], runs=1)
    config["perf"] = {"enabled": True, "iters_short": 1, "iters_long": 2, "warmup_iters": 1}
    write_config(tmp_path, config)
    target = "results/local/perf/local_resnet18_fp32_bs2.json"
    dry = snakemake(tmp_path, "-n", "--cores", "2", "--quiet", "rules").stdout
    assert re.search(r"^perf\s+1$", dry, re.M)  # one perf job in the full study
    snakemake(tmp_path, "--cores", "2", target)
    probe = json.loads((tmp_path / "results/local/ceilings.json").read_text())["perf"]
    rec = json.loads((tmp_path / target).read_text())
    assert rec["status"] in ("ok", "unavailable")
    if probe["status"] == "unavailable":
        assert rec["status"] == "unavailable" and rec["reason"] == probe["reason"]
    else:  # a machine with counters: per-step FLOPs from two driver runs
        assert rec["flop_per_step"] > 0 and rec["dram_bytes_per_step"] > 0
