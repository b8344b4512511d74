"""The ncu stage without a GPU: metric sets, the command line, failure handling,
and profile_ncu.py end to end against a missing ncu and a fake one."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dnnroofline.errors import InputError
from dnnroofline.ncu.command import (
    BASE_METRICS,
    STEP_METRICS,
    build_ncu_command,
    diagnose_ncu_output,
    filter_supported_metrics,
    find_ncu,
    metrics_for_arch,
    parse_compute_capability,
    parse_query_metrics,
    prepare_driver_argv,
    query_metrics_command,
)
from dnnroofline.ncu.metrics import is_roofline_metric
from dnnroofline.ncu.parse import parse_ncu_csv
from dnnroofline.study.identity import identity_of

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "ncu"
PROFILE_NCU = ROOT / "workflow" / "scripts" / "profile_ncu.py"
H100_RAW = DATA / "handmade_h100_raw_tensor.csv"
STEP_RAW = DATA / "handmade_step_range_raw.csv"

T = "sm__ops_path_tensor_"
CUDA_CORE = [
    f"smsp__sass_thread_inst_executed_op_{p}{o}_pred_on.sum"
    for p in "dfh"
    for o in ("add", "mul", "fma")
]
BYTES = ["dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum", "l1tex__t_bytes.sum"]
DRIVER = [
    "python",
    "workflow/scripts/run_train.py",
    "--arch",
    "resnet50",
    "--batch-size",
    "32",
    "--image-size",
    "224",
    "--precision",
    "bf16",
    "--backend",
    "cuda",
    "--synthetic",
    "--channels-last",
    "--warmup-iters",
    "3",
    "--iters",
    "1",
]

# --------------------------------------------------------------------------- metric sets


def test_metrics_for_ampere_a100():
    m = metrics_for_arch("8.0")
    assert set(CUDA_CORE + BYTES + ["gpu__time_duration.sum"]) <= set(m)
    for src in ("fp16_dst_fp16", "fp16_dst_fp32", "bf16_dst_fp32", "tf32_dst_fp32"):
        assert f"{T}src_{src}_sparsity_off.sum" in m
    assert f"{T}src_fp64.sum" in m  # A100 has FP64 tensor cores
    assert not [x for x in m if "hgmma" in x or "fp8" in x]  # Hopper/Ada only
    assert not [x for x in m if "sparsity_on" in x]


def test_metrics_for_hopper():
    m = metrics_for_arch("9.0")
    for name in (
        f"{T}src_bf16_dst_fp32_sparsity_off.sum",
        f"{T}src_tf32_dst_fp32_sparsity_off.sum",
        f"{T}src_fp16_dst_fp32_sparsity_off.sum",
        f"{T}src_fp64.sum",
        f"{T}src_fp8_sparsity_off.sum",
        f"{T}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum",
        f"{T}op_hgmma_src_fp16_sparsity_off.sum",
        f"{T}op_hgmma_src_tf32_dst_fp32_sparsity_off.sum",
        f"{T}op_hmma_src_bf16_dst_fp32_sparsity_off.sum",
    ):
        assert name in m, name
    assert set(CUDA_CORE + BYTES) <= set(m)


def test_metrics_for_other_archs():
    ga102 = metrics_for_arch((8, 6))
    assert f"{T}src_fp64.sum" not in ga102 and f"{T}src_bf16_dst_fp32_sparsity_off.sum" in ga102
    ada = metrics_for_arch(8.9)
    assert f"{T}src_fp8_sparsity_off.sum" in ada and f"{T}src_fp64.sum" not in ada
    turing = metrics_for_arch("7.5")
    assert f"{T}src_fp16_dst_fp32.sum" in turing
    assert not [x for x in turing if "sparsity" in x or "bf16" in x or "tf32" in x]
    unknown = metrics_for_arch(None)
    for cc in ("7.0", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"):
        assert set(metrics_for_arch(cc)) <= set(unknown) | set(metrics_for_arch(cc))
    with pytest.raises(InputError, match="Volta"):
        metrics_for_arch("6.1")


@pytest.mark.parametrize("cc", [None, "7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"])
def test_every_requested_metric_is_one_the_parser_reads(cc):
    m = metrics_for_arch(cc)
    assert len(m) == len(set(m))
    assert all(is_roofline_metric(x) for x in m)
    # nvprof names (flop_count_sp, dram_read_bytes, ...) are rejected by ncu.
    assert not [x for x in m if "__" not in x]
    # Tensor-pipe instruction counters only as the diagnostic (never a FLOP source with
    # a fixed multiplier); Hopper's per-kind ones (HMMA, HGMMA) come with the total.
    hopper = (
        "sm__inst_executed_pipe_tensor_op_hmma.sum",
        "sm__inst_executed_pipe_tensor_op_gmma.sum",
    )
    assert [x for x in m if "inst_executed_pipe_tensor" in x] == [
        "smsp__inst_executed_pipe_tensor.sum",
        *(hopper if cc in (None, "9.0") else ()),
    ]


@pytest.mark.parametrize(
    "value,cc",
    [("9.0", (9, 0)), (8.6, (8, 6)), ((8, 0), (8, 0)), ([7, 5], (7, 5)), ("sm_90", (9, 0))],
)
def test_parse_compute_capability(value, cc):
    assert parse_compute_capability(value) == cc


def test_parse_compute_capability_rejects():
    assert parse_compute_capability(None) is None
    with pytest.raises(InputError):
        parse_compute_capability("hopper")


# --------------------------------------------------------------------------- command line


def test_hopper_command_line():
    metrics = metrics_for_arch("9.0")
    cmd = build_ncu_command("/opt/ncu/ncu", metrics, DRIVER, log_file="out.csv")
    assert cmd[0] == "/opt/ncu/ncu"

    def after(flag):
        return cmd[cmd.index(flag) + 1]

    assert after("--profile-from-start") == "off"
    assert after("--target-processes") == "all"
    assert after("--metrics").split(",") == metrics
    assert "--csv" in cmd and after("--page") == "raw" and after("--print-units") == "base"
    assert after("--log-file") == "out.csv"
    assert not [a for a in cmd if "nvtx" in a.lower()]
    # The driver comes last, unchanged, with --profile-step added once.
    driver = cmd[cmd.index("python") :]
    assert driver == [*DRIVER, "--profile-step"]
    assert cmd.index("--metrics") < cmd.index("python")


def test_command_keeps_an_existing_profile_step_and_refuses_nvtx():
    cmd = build_ncu_command("ncu", BASE_METRICS, [*DRIVER, "--profile-step"])
    assert cmd.count("--profile-step") == 1 and "--log-file" not in cmd
    with pytest.raises(InputError, match="backward"):
        build_ncu_command("ncu", BASE_METRICS, DRIVER, extra_args=["--nvtx"])
    with pytest.raises(InputError):
        build_ncu_command("ncu", [], DRIVER)
    with pytest.raises(InputError):
        build_ncu_command("ncu", BASE_METRICS, [])


def test_prepare_driver_argv_adds_out_only_when_missing():
    argv = prepare_driver_argv(DRIVER, "/tmp/run.json")
    assert argv[-3:] == ["--profile-step", "--out", "/tmp/run.json"]
    argv = prepare_driver_argv([*DRIVER, "--out", "mine.json"], "/tmp/run.json")
    assert argv.count("--out") == 1 and "mine.json" in argv


QUERY_OUTPUT = """\
Device NVIDIA H100 80GB HBM3 (GH100)
------------------------------------------------------------------- -----------------------------
Metric Name                                                          Metric Description
------------------------------------------------------------------- -----------------------------
dram__bytes_read                                                     # of bytes read from DRAM
dram__bytes_write                                                    # of bytes written to DRAM
gpu__time_duration                                                   total duration in nanoseconds
sm__ops_path_tensor_src_fp16_dst_fp32                                # of math ops executed in ...
sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_off                   # of math ops executed in ...
"""


def test_query_and_filter():
    assert query_metrics_command("ncu") == ["ncu", "--query-metrics"]
    names = parse_query_metrics(QUERY_OUTPUT)
    assert names == {
        "dram__bytes_read",
        "dram__bytes_write",
        "gpu__time_duration",
        f"{T}src_fp16_dst_fp32",
        f"{T}src_bf16_dst_fp32_sparsity_off",
    }
    wanted = [
        "gpu__time_duration.sum",
        "dram__bytes_read.sum",
        "lts__t_bytes.sum",
        f"{T}src_fp16_dst_fp32_sparsity_off.sum",
        f"{T}src_bf16_dst_fp32_sparsity_off.sum",
    ]
    sel = filter_supported_metrics(wanted, names)
    assert sel.kept == [
        "gpu__time_duration.sum",
        "dram__bytes_read.sum",
        f"{T}src_fp16_dst_fp32.sum",
        f"{T}src_bf16_dst_fp32_sparsity_off.sum",
    ]
    assert sel.dropped == ["lts__t_bytes.sum"]
    assert sel.substituted == {
        f"{T}src_fp16_dst_fp32_sparsity_off.sum": f"{T}src_fp16_dst_fp32.sum"
    }
    # Newer ncu names for DRAM read/write bytes.
    sel = filter_supported_metrics(
        ["dram__bytes_read.sum", "dram__bytes_write.sum"],
        {"dram__bytes_op_read", "dram__bytes_op_write"},
    )
    assert sel.kept == ["dram__bytes_op_read.sum", "dram__bytes_op_write.sum"] and not sel.dropped


# --------------------------------------------------------------------------- failures

PERM_LINE = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
    "Performance Counters on the target device 0. For instructions on enabling permissions and "
    "to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


def test_diagnose():
    d = diagnose_ncu_output(1, f"==PROF== Connected\n{PERM_LINE}\n")
    assert d.status == "unavailable" and d.reason == "counters_not_permitted"
    assert "NVreg_RestrictProfilingToAdminUsers=0" in d.message
    assert "https://developer.nvidia.com/ERR_NVGPUCTRPERM" in d.message
    assert PERM_LINE in d.message

    d = diagnose_ncu_output(1, "==ERROR== Failed to find metric sm__foo_bar.sum\n")
    assert d.status == "error" and d.reason == "unknown_metric" and "sm__foo_bar" in d.message
    assert d.unknown_metrics == ["sm__foo_bar"]
    text = "==ERROR== Failed to find metric regex:^flop_count_sp\\.(sum|min|max|avg|pct|ratio)$\n"
    assert diagnose_ncu_output(1, text).unknown_metrics == ["flop_count_sp"]
    # The application's own output does not count as ncu's verdict.
    d = diagnose_ncu_output(0, "UserWarning: this op is not supported on this device\n")
    assert d.status == "ok"

    d = diagnose_ncu_output(0, "==PROF== Disconnected\n==WARNING== No kernels were profiled.\n")
    assert d.reason == "no_kernels" and "--profile-step" in d.message
    d = diagnose_ncu_output(0, "==WARNING== No ranges were profiled.\n")  # range replay says so
    assert d.reason == "no_kernels" and "--profile-step" in d.message

    text = (
        "==ERROR== The application returned an error code (1).\n"
        "==WARNING== No kernels were profiled.\n"
    )
    d = diagnose_ncu_output(1, text)
    assert d.reason == "no_kernels" and "failed before profiling" in d.message

    d = diagnose_ncu_output(1, "==ERROR== The application returned an error code (137).\n")
    assert d.status == "error" and d.reason == "app_failed" and "(137)" in d.message

    d = diagnose_ncu_output(None, "==PROF== x\n", timed_out=True)
    assert d.reason == "timeout"

    d = diagnose_ncu_output(3, "something odd\n")
    assert d.reason == "ncu_failed" and "3" in d.message

    d = diagnose_ncu_output(0, "==PROF== Disconnected from process 1\n")
    assert d.status == "ok" and d.message is None


# --------------------------------------------------------------------------- end to end

FAKE_NCU = """\
#!{python}
# A stand-in for ncu: answers --query-metrics, or "profiles" by writing a CSV to --log-file.
import json, os, sys

argv = sys.argv[1:]
mode = os.environ.get("FAKE_NCU_MODE", "ok")
record = os.environ.get("FAKE_NCU_RECORD")
if record:
    with open(record, "a") as fh:
        fh.write(json.dumps(argv) + "\\n")
perm = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
        "Performance Counters on the target device 0. For instructions on enabling permissions "
        "and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
not_loaded = "==ERROR== Failed to initialize the profiler: LibraryNotLoaded"
if "--query-metrics" in argv:
    if mode == "query_not_loaded":
        print(not_loaded)
        sys.exit(1)
    if mode == "query_perm":
        print("Device NVIDIA H100 80GB HBM3 (GH100)")
        print(perm)
        sys.exit(1)
    print("Device NVIDIA H100 80GB HBM3 (GH100)")
    print("Metric Name      Metric Description")
    for name in os.environ["FAKE_NCU_QUERY"].split(","):
        print(name + "     # of something")
    sys.exit(0)

log = argv[argv.index("--log-file") + 1]
out = argv[argv.index("--out") + 1]
hang_case = os.environ.get("FAKE_NCU_HANG_CASE")  # the self-test: hang on that case only
if hang_case and "--case" in argv and argv[argv.index("--case") + 1] == hang_case:
    mode = "hang"
if mode == "hang":  # a pass that never ends: ncu and the driver it started, both on the GPU
    import subprocess, time
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["FAKE_NCU_PIDS"], "a") as fh:
        fh.write(f"{{os.getpid()}} {{driver.pid}}\\n")
    time.sleep(600)
if "--profile-from-start" in argv and "app-range" in argv:  # as ncu rejects it
    with open(log, "w") as fh:
        fh.write("==ERROR== --profile-from-start is not supported with range replay modes\\n")
    sys.exit(1)
metrics = argv[argv.index("--metrics") + 1].split(",")
rejected = os.environ.get("FAKE_NCU_REJECT", "").split(",")
reject = [m for m in metrics if m.split(".")[0] in rejected]
if os.environ.get("FAKE_NCU_REJECT_FIRST_ONLY"):  # as some ncu versions name one at a time
    reject = reject[:1]
if reject:
    with open(log, "w") as fh:
        fh.write("==PROF== Connected to process 4242 (/usr/bin/python3)\\n")
        for m in reject:
            base = m.split(".")[0]
            fh.write(f"==ERROR== Failed to find metric regex:^{{base}}\\\\.(sum|min|max|avg)$\\n")
    sys.exit(1)
print("the driver's own stdout: step 0 loss 6.9")  # application output goes to the console
with open(log, "w") as fh:
    fh.write("==PROF== Connected to process 4242 (/usr/bin/python3)\\n")
    if mode == "ok" or mode == "oom" or (mode == "stepfail" and "app-range" not in argv):
        step = argv[argv.index("--replay-mode") + 1] == "app-range"
        table = os.environ["FAKE_NCU_STEP_CSV" if step else "FAKE_NCU_CSV"]
        cases = os.environ.get("FAKE_NCU_CASE_DIR")  # the self-test: a table per case
        if cases and "--case" in argv:
            case = argv[argv.index("--case") + 1]
            mine = os.path.join(cases, case + (".step" if step else ".kernel") + ".csv")
            table = mine if os.path.exists(mine) else table
        fh.write(open(table).read())
        fh.write("==PROF== Disconnected from process 4242\\n")
        status = {{"ok": "ok", "oom": "oom", "stepfail": "ok"}}[mode]
        def flag(name):  # the driver's own flags name its run, as its real record does
            return argv[argv.index(name) + 1] if name in argv else None
        batch = flag("--batch-size")
        config = {{"arch": flag("--arch"), "precision": flag("--precision"),
                   "batch_size": int(batch) if batch else None}}
        with open(out, "w") as o:
            msg = None if status == "ok" else "CUDA out of memory"
            json.dump({{"status": status, "message": msg, "env": flag("--env"),
                       "config": config}}, o)
        sys.exit(0)
    if mode == "stepfail":
        fh.write("==ERROR== Range replay failed: unsupported API call in range.\\n")
        sys.exit(1)
    if mode == "not_loaded":  # as an H200 under gVisor answered
        fh.write(not_loaded + "\\n")
        fh.write("==WARNING== No kernels were profiled.\\n")
        sys.exit(1)
    if mode == "perm":
        fh.write(perm + "\\n")
        fh.write("==PROF== Disconnected from process 4242\\n")
        fh.write("==WARNING== No kernels were profiled.\\n")
        sys.exit(0)
    if mode == "appfail":
        fh.write("==ERROR== The application returned an error code (1).\\n")
        fh.write("==WARNING== No kernels were profiled.\\n")
        with open(out, "w") as o:
            json.dump({{"status": "error", "message": "boom"}}, o)
        sys.exit(1)
"""


@pytest.fixture
def fake_ncu(tmp_path):
    return make_fake_ncu(tmp_path)


def make_fake_ncu(tmp_path):
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir()
    exe.write_text(FAKE_NCU.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def run_stage(
    tmp_path,
    ncu,
    *extra,
    mode="ok",
    query=None,
    csv=H100_RAW,
    reject=(),
    step_csv=STEP_RAW,
    driver=DRIVER,
):
    env = dict(os.environ)
    env.update(
        FAKE_NCU_REJECT=",".join(reject),
        FAKE_NCU_MODE=mode,
        FAKE_NCU_CSV=str(csv),
        FAKE_NCU_STEP_CSV=str(step_csv),
        FAKE_NCU_RECORD=str(tmp_path / "calls.jsonl"),
        FAKE_NCU_QUERY=",".join(query or []),
    )
    out = tmp_path / "results" / "gpu" / "ncu"
    p = subprocess.run(
        [
            sys.executable,
            str(PROFILE_NCU),
            "--ncu",
            str(ncu),
            "--csv-out",
            str(out / "gpu_resnet50_bf16_bs32.csv"),
            "--json-out",
            str(out / "gpu_resnet50_bf16_bs32.json"),
            *extra,
            "--",
            *driver,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    js = out / "gpu_resnet50_bf16_bs32.json"
    return (
        p,
        (json.loads(js.read_text()) if js.exists() else None),
        out / "gpu_resnet50_bf16_bs32.csv",
    )


def calls(tmp_path):
    f = tmp_path / "calls.jsonl"
    return [json.loads(ln) for ln in f.read_text().splitlines()] if f.exists() else []


def assert_empty_counters(r):
    assert r["kernels"] == []
    t = r["totals"]
    assert t["kernels"] == 0 and t["time_s"] is None
    assert all(v is None for v in t["flop"].values())
    assert all(v is None for v in t["bytes"].values())


def test_stage_without_ncu_is_unavailable_not_a_crash(tmp_path):
    p, r, csv_path = run_stage(tmp_path, "/nonexistent/ncu")
    assert p.returncode == 0, p.stderr
    assert r["status"] == "unavailable" and r["reason"] == "ncu_not_found"
    assert "/nonexistent/ncu" in r["message"] and "--ncu" in r["message"]
    assert "not found" in r["message"]
    assert_empty_counters(r)
    assert csv_path.exists() and "not found" in csv_path.read_text()
    with pytest.raises(InputError, match="not found"):  # the note reads as "no table"
        parse_ncu_csv(csv_path)


def test_a_failed_capture_still_names_its_run(tmp_path):
    """No driver JSON (ncu never ran it): the run's identity comes from the driver's own
    command, so the report still places the capture's 'unavailable' note on its point."""
    _, r, _ = run_stage(tmp_path, "/nonexistent/ncu", driver=[*DRIVER, "--env", "gpu"])
    assert r["driver_run"] == {
        "status": None,
        "env": "gpu",
        "config": {"arch": "resnet50", "precision": "bf16", "batch_size": 32},
    }
    assert identity_of(r, "capture") == ("gpu", "resnet50", "bf16", 32)


def test_stage_with_a_name_not_on_path(tmp_path):
    p, r, _ = run_stage(tmp_path, "ncu-does-not-exist-here")
    assert p.returncode == 0 and r["status"] == "unavailable"


def _alive(pid: int) -> bool:
    """A process that runs (a zombie no reaper collected has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("stage", ["profile_ncu", "ncu_selftest"])
def test_a_stopped_stage_leaves_no_ncu_or_driver_running(tmp_path, fake_ncu, stage):
    # `timeout` and Snakemake stop a stage with SIGTERM to its process group. ncu runs in
    # a session of its own (so that one killpg ends it and its driver), out of reach of
    # that signal: the stage must end it, or it keeps the GPU beside the next measurement.
    pids = tmp_path / "pids"
    env = dict(os.environ, FAKE_NCU_MODE="hang", FAKE_NCU_PIDS=str(pids))
    out = tmp_path / "ncu"
    if stage == "profile_ncu":
        cmd = [str(PROFILE_NCU), "--csv-out", str(out / "k.csv"), "--json-out", str(out / "k.json")]
        cmd += ["--no-query", "--ncu", str(fake_ncu), "--compute-capability", "9.0", "--", *DRIVER]
    else:
        selftest = ROOT / "workflow" / "scripts" / "ncu_selftest.py"
        cmd = [str(selftest), "--ncu", str(fake_ncu), "--compute-capability", "9.0"]
        cmd += ["--precisions", "bf16", "--work-dir", str(out), "--out", str(tmp_path / "st.json")]
    proc = subprocess.Popen(
        [sys.executable, *cmd],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = []
    try:
        deadline = time.monotonic() + 60
        while not started:
            assert proc.poll() is None, f"{stage} ended before ncu started"
            assert time.monotonic() < deadline, "ncu never started"
            time.sleep(0.1)
            started = [int(p) for p in pids.read_text().split()] if pids.exists() else []
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=90)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in started if _alive(p)], "ncu or its driver outlived the stage"
    finally:
        for pid in [proc.pid, *started]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_find_ncu_looks_where_the_toolkit_installs_it_when_not_on_path():
    installed = {
        "/usr/local/cuda/bin/ncu": ["/usr/local/cuda/bin/ncu"],
        "/opt/nvidia/nsight-compute/*/ncu": [
            "/opt/nvidia/nsight-compute/2025.3.1/ncu",
            "/opt/nvidia/nsight-compute/2025.10.0/ncu",
            "/opt/nvidia/nsight-compute/2024.1.0/ncu",
        ],
    }

    def matches(pattern):
        return installed.get(pattern, [])

    def nowhere(name):
        return None

    # on PATH wins; a path is taken as given; another bare name is never searched for
    assert find_ncu("ncu", lambda n: "/bin/ncu", matches) == ("/bin/ncu", "PATH")
    assert find_ncu("/opt/x/ncu", nowhere, matches) == (None, "not found")
    assert find_ncu("ncu-2025", nowhere, matches) == (None, "not found")
    # not on PATH: $CUDA_HOME first, then /usr/local/cuda, then the newest standalone ncu
    installed["/cuda12/bin/ncu"] = ["/cuda12/bin/ncu"]
    assert find_ncu("ncu", nowhere, matches, cuda_home="/cuda12")[0] == "/cuda12/bin/ncu"
    found, how = find_ncu("ncu", nowhere, matches)
    assert found == "/usr/local/cuda/bin/ncu" and "not on PATH" in how
    del installed["/usr/local/cuda/bin/ncu"]
    assert find_ncu("ncu", nowhere, matches)[0] == "/opt/nvidia/nsight-compute/2025.10.0/ncu"
    assert find_ncu("ncu", nowhere, lambda pattern: []) == (None, "not found")


def test_stage_finds_ncu_under_cuda_home_when_it_is_not_on_path(tmp_path, fake_ncu, monkeypatch):
    # fake_ncu is tmp_path/bin/ncu: CUDA_HOME=tmp_path, and no ncu on PATH
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    p, r, _ = run_stage(tmp_path, "ncu", "--compute-capability", "9.0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert r["ncu"]["executable"] == str(fake_ncu), r["message"]
    assert r["ncu"]["executable_found"] == "not on PATH; a standard install location"
    assert f"ncu: {fake_ncu} (not on PATH" in p.stdout


def test_stage_success_with_fake_ncu(tmp_path, fake_ncu):
    supported = [m.split(".")[0] for m in metrics_for_arch("9.0") if "op_hmma" not in m]
    supported += [m.split(".")[0] for m in STEP_METRICS]
    p, r, csv_path = run_stage(tmp_path, fake_ncu, "--compute-capability", "9.0", query=supported)
    assert p.returncode == 0, p.stdout + p.stderr
    assert r["status"] == "ok" and r["message"] is None, r["message"]
    assert r["missing"] == []
    # FLOPs and kernels from the kernel pass (the CSV ncu wrote for it) ...
    kernel = parse_ncu_csv(H100_RAW)
    step = parse_ncu_csv(STEP_RAW)
    assert r["totals"]["flop"] == kernel["totals"]["flop"]
    assert r["totals"]["flop"]["total"] == 139_605_445_821
    assert len(r["kernels"]) == 3 and r["kernels"] == kernel["kernels"]
    # ... bytes and time from the step pass (one range: the step as it ran).
    assert r["totals"]["bytes"] == step["totals"]["bytes"]
    assert r["totals"]["bytes"]["dram"] == 301_989_888
    assert r["totals"]["time_s"] == pytest.approx(298.12e-6)
    assert r["totals"]["arithmetic_intensity_dram"] == pytest.approx(139_605_445_821 / 301_989_888)
    # The kernel pass's own (cold-cache) totals are kept, labelled, not used.
    assert r["kernel_pass_totals"]["bytes"]["dram"] == 364_904_448
    assert "cold cache" in r["kernel_pass_totals"]["label"]
    assert r["provenance"]["totals.flop"] == "kernel"
    assert r["provenance"]["totals.bytes"] == "step"
    assert r["memory_roofs"]["dram"]["bytes_per_s"] == pytest.approx(1280 * 2.619e9)
    assert r["source_file"] == str(csv_path)
    step_csv = csv_path.with_name("gpu_resnet50_bf16_bs32.step.csv")
    assert r["step_source_file"] == str(step_csv)
    assert parse_ncu_csv(step_csv)["totals"] == step["totals"]
    # ... plus what was run, pass by pass, with its settings.
    ncu = r["ncu"]
    assert ncu["compute_capability"] == "9.0"
    assert ncu["metrics_requested"] == metrics_for_arch("9.0")
    assert ncu["metrics_dropped"] == [m for m in metrics_for_arch("9.0") if "op_hmma" in m]
    assert ncu["metrics"] == [m for m in metrics_for_arch("9.0") if "op_hmma" not in m]
    assert ncu["metric_query"]["ok"] is True
    assert isinstance(ncu["wall_s"], float) and ncu["returncode"] == 0
    assert ncu["command"][0] == str(fake_ncu)
    kp, sp = ncu["passes"]["kernel"], ncu["passes"]["step"]
    assert (kp["replay_mode"], kp["cache_control"]) == ("kernel", "all")
    assert kp["clock_control"] == "none"
    assert (sp["replay_mode"], sp["cache_control"], sp["clock_control"]) == (
        "app-range",
        "none",
        "none",
    )
    assert kp["status"] == sp["status"] == "ok"
    assert sp["metrics"] == list(STEP_METRICS)
    assert r["driver_run"]["status"] == "ok"
    # The real invocations: query first, then the kernel pass, then the step pass.
    q, prof, steppass = calls(tmp_path)
    assert q == ["--query-metrics"]
    assert prof[prof.index("--replay-mode") + 1] == "kernel"
    assert steppass[steppass.index("--replay-mode") + 1] == "app-range"
    assert prof[prof.index("--profile-from-start") + 1] == "off"
    assert "--profile-from-start" not in steppass  # range replay takes start/stop itself
    assert prof[prof.index("--metrics") + 1].split(",") == ncu["metrics"]
    assert not [a for a in prof + steppass if "nvtx" in a.lower()]
    driver = prof[prof.index("python") :]
    assert driver[: len(DRIVER)] == DRIVER
    assert driver[len(DRIVER)] == "--profile-step" and driver[len(DRIVER) + 1] == "--out"
    assert steppass[steppass.index("python") :][: len(DRIVER)] == DRIVER
    # The raw CSV is kept, and parses on its own; app stdout stayed out of it.
    assert parse_ncu_csv(csv_path)["totals"] == kernel["totals"]
    assert "step 0 loss" not in csv_path.read_text()
    assert "step 0 loss" in p.stdout  # the rule's log has it


def test_stage_permission_error(tmp_path, fake_ncu):
    p, r, csv_path = run_stage(tmp_path, fake_ncu, "--no-query", mode="perm")
    assert p.returncode == 0, p.stderr
    assert r["status"] == "unavailable" and r["reason"] == "counters_not_permitted"
    assert "ERR_NVGPUCTRPERM" in r["message"]
    assert "https://developer.nvidia.com/ERR_NVGPUCTRPERM" in r["message"]
    assert_empty_counters(r)
    assert "==ERROR== ERR_NVGPUCTRPERM" in csv_path.read_text()
    assert r["ncu"]["metric_query"]["ran"] is False


def test_stage_permission_error_at_query_skips_the_run(tmp_path, fake_ncu):
    p, r, _ = run_stage(tmp_path, fake_ncu, "--compute-capability", "8.0", mode="query_perm")
    assert p.returncode == 0
    assert r["status"] == "unavailable" and "ERR_NVGPUCTRPERM" in r["message"]
    assert calls(tmp_path) == [["--query-metrics"]]


NOT_LOADED = "==ERROR== Failed to initialize the profiler: LibraryNotLoaded"


@pytest.mark.parametrize(
    "text",
    [f"==PROF== Connected\n{NOT_LOADED}\n==WARNING== No kernels were profiled.\n", NOT_LOADED[10:]],
)
def test_a_profiler_that_cannot_load_is_unavailable_with_ncus_words(text):
    # On an H200 under gVisor ncu could not start its profiler; it must not read as a
    # driver that never called profiler.start() ("No kernels were profiled").
    d = diagnose_ncu_output(1, text)
    assert (d.status, d.reason) == ("unavailable", "profiler_not_loaded")
    assert "Failed to initialize the profiler: LibraryNotLoaded" in d.message  # quoted as said
    assert "gVisor" in d.message and "analytic AI" in d.message
    assert "--profile-step" not in d.message


def test_a_profiler_failure_split_over_two_lines_is_still_diagnosed():
    d = diagnose_ncu_output(1, "==ERROR== Failed to initialize the profiler:\nLibraryNotLoaded\n")
    assert (d.status, d.reason) == ("unavailable", "profiler_not_loaded")
    assert "==ERROR== Failed to initialize the profiler:" in d.message


def test_stage_profiler_not_loaded_at_query_stops_before_any_pass(tmp_path, fake_ncu):
    p, r, csv_path = run_stage(tmp_path, fake_ncu, mode="query_not_loaded")
    assert p.returncode == 0, p.stderr
    assert (r["status"], r["reason"]) == ("unavailable", "profiler_not_loaded")
    assert calls(tmp_path) == [["--query-metrics"]]  # no pass ran: none could read a counter
    assert r["ncu"]["metric_query"] == {
        "ran": True,
        "ok": False,
        "message": "profiler_not_loaded",
    }
    assert_empty_counters(r)
    assert NOT_LOADED in csv_path.read_text()  # ncu's exact words kept


def test_stage_profiler_not_loaded_in_the_kernel_pass(tmp_path, fake_ncu):
    p, r, csv_path = run_stage(
        tmp_path, fake_ncu, "--no-query", "--compute-capability", "9.0", mode="not_loaded"
    )
    assert p.returncode == 0, p.stderr
    assert (r["status"], r["reason"]) == ("unavailable", "profiler_not_loaded")
    assert len(calls(tmp_path)) == 1  # the step pass is not tried
    assert NOT_LOADED in csv_path.read_text()
    step_csv = csv_path.with_name(csv_path.stem + ".step.csv")
    assert "step pass not run" in step_csv.read_text()


def test_stage_app_failure(tmp_path, fake_ncu):
    p, r, csv_path = run_stage(
        tmp_path, fake_ncu, "--no-query", "--compute-capability", "8.0", mode="appfail"
    )
    assert p.returncode == 0
    assert r["status"] == "error" and r["reason"] == "no_kernels"
    assert "application" in r["message"]
    assert_empty_counters(r)
    assert "The application returned an error code" in csv_path.read_text()


def test_stage_driver_oom_is_an_error_with_the_counters_kept(tmp_path, fake_ncu):
    p, r, _ = run_stage(tmp_path, fake_ncu, "--no-query", "--compute-capability", "9.0", mode="oom")
    assert p.returncode == 0
    assert r["status"] == "error" and "oom" in r["message"]
    assert r["totals"]["kernels"] == 3


def test_stage_capture_without_roofline_counters_is_an_error(tmp_path, fake_ncu):
    meinie = DATA / "meinie_torch_sdpa_flash_raw_page.csv"
    p, r, _ = run_stage(
        tmp_path, fake_ncu, "--no-query", "--metrics", "gpu__time_duration.sum", csv=meinie
    )
    assert p.returncode == 0
    assert r["status"] == "missing_counters" and r["reason"] == "no_flop_counters"
    assert "FLOPs" in r["message"] and r["missing"]
    assert r["ncu"]["metrics"] == ["gpu__time_duration.sum"]


def test_stage_needs_a_driver_command(tmp_path):
    p = subprocess.run(
        [sys.executable, str(PROFILE_NCU), "--csv-out", "a.csv", "--json-out", "a.json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert p.returncode == 2 and "driver" in p.stderr


def test_module_docstrings_explain_the_capture():
    import dnnroofline.ncu.command as mod

    doc = textwrap.dedent(mod.__doc__)
    assert "--profile-from-start off" in doc and "backward" in doc


def test_stage_retries_without_metrics_ncu_rejects(tmp_path, fake_ncu):
    bad = f"{T}op_hgmma_src_fp16_sparsity_off"
    p, r, _ = run_stage(
        tmp_path, fake_ncu, "--no-query", "--compute-capability", "9.0", reject=[bad]
    )
    assert p.returncode == 0, p.stdout
    assert r["status"] == "ok", r["message"]
    assert r["ncu"]["metrics_dropped"] == [f"{bad}.sum"]
    assert f"{bad}.sum" not in r["ncu"]["metrics"]
    first, second, step = calls(tmp_path)
    assert step[step.index("--replay-mode") + 1] == "app-range"
    assert f"{bad}.sum" in first[first.index("--metrics") + 1].split(",")
    assert f"{bad}.sum" not in second[second.index("--metrics") + 1].split(",")


def test_stage_retries_until_ncu_names_no_more_unknown_metrics(tmp_path, fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_REJECT_FIRST_ONLY", "1")
    bad = [f"{T}op_hgmma_src_fp16_sparsity_off", f"{T}op_hgmma_src_bf16_dst_fp32_sparsity_off"]
    p, r, _ = run_stage(tmp_path, fake_ncu, "--no-query", "--compute-capability", "9.0", reject=bad)
    assert p.returncode == 0, p.stdout
    assert r["status"] == "ok", r["message"]
    assert sorted(r["ncu"]["metrics_dropped"]) == sorted(f"{b}.sum" for b in bad)
    assert len(calls(tmp_path)) == 3 + 1  # the kernel pass three times, then the step pass


def test_stage_gives_up_when_ncu_rejects_every_metric(tmp_path, fake_ncu):
    p, r, _ = run_stage(
        tmp_path,
        fake_ncu,
        "--no-query",
        "--metrics",
        "gpu__time_duration.sum,dram__bytes.sum",
        reject=["gpu__time_duration", "dram__bytes"],
    )
    assert p.returncode == 0
    assert r["status"] == "error" and r["reason"] == "unknown_metric"
    assert "gpu__time_duration" in r["message"]
    assert len(calls(tmp_path)) == 1  # nothing left to retry with


def test_stage_with_a_relative_ncu_path(tmp_path, fake_ncu):
    env = dict(
        os.environ,
        FAKE_NCU_MODE="ok",
        FAKE_NCU_CSV=str(H100_RAW),
        FAKE_NCU_STEP_CSV=str(STEP_RAW),
        FAKE_NCU_QUERY="",
    )
    p = subprocess.run(
        [
            sys.executable,
            str(PROFILE_NCU),
            "--ncu",
            "./bin/ncu",
            "--csv-out",
            "out/a.csv",
            "--json-out",
            "out/a.json",
            "--compute-capability",
            "9.0",
            "--",
            *DRIVER,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads((tmp_path / "out" / "a.json").read_text())
    assert r["status"] == "ok", r["message"]
    assert r["ncu"]["executable"] == str(fake_ncu)
    assert r["ncu"]["metric_query"]["ok"] is False  # an empty list: the full set is used


def test_stage_keeps_the_driver_run_json(tmp_path, fake_ncu):
    kept = tmp_path / "results" / "gpu" / "ncu" / "driver" / "gpu_resnet50_bf16_bs32.json"
    p, r, _ = run_stage(
        tmp_path,
        fake_ncu,
        "--no-query",
        "--compute-capability",
        "9.0",
        "--driver-run-out",
        str(kept),
        mode="oom",
    )
    assert p.returncode == 0, p.stdout
    assert json.loads(kept.read_text()) == {
        "status": "oom",
        "message": "CUDA out of memory",
        "env": None,  # DRIVER has no --env
        "config": {"arch": "resnet50", "precision": "bf16", "batch_size": 32},
    }
    # The driver still writes to a scratch file, not to the kept path itself.
    kernel_pass, *rest = calls(tmp_path)
    assert rest == []  # a failed driver: no step pass after the kernel pass
    assert str(kept) not in kernel_pass


def test_stage_without_ncu_says_why_there_is_no_driver_run(tmp_path):
    kept = tmp_path / "driver.json"
    p, r, _ = run_stage(tmp_path, "/nonexistent/ncu", "--driver-run-out", str(kept))
    assert p.returncode == 0 and r["status"] == "unavailable"
    note = json.loads(kept.read_text())
    assert note["status"] is None and "not found" in note["message"]
