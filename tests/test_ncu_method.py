"""The ncu method that checks itself (issue 8), without a GPU: the two passes and
their exact command lines, packed half precision, missing tensor counters, and
the counter self-test with crafted captures in ncu's raw-page format."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from decimal import Decimal

import pandas as pd
import pytest
from test_ncu_command import (
    DATA,
    DRIVER,
    H100_RAW,
    ROOT,
    STEP_RAW,
    calls,
    make_fake_ncu,
    run_stage,
)

from dnnroofline.errors import InputError
from dnnroofline.ncu.command import (
    PASSES,
    STEP_METRICS,
    build_ncu_command,
    combine_passes,
    metrics_for_arch,
    step_metrics_for_arch,
)
from dnnroofline.ncu.metrics import tensor_pipe_instructions
from dnnroofline.ncu.parse import parse_ncu_csv, tensor_counter_gap
from dnnroofline.ncu.selftest import (
    COPY_BYTES,
    GEMM_SIZE,
    PROGRESS_FILE,
    cases_for,
    check_case,
    evaluate,
    kept_cases,
    known_op,
    progress_key,
    verdict_for,
)

SELFTEST = ROOT / "workflow" / "scripts" / "ncu_selftest.py"
KERNELS = ROOT / "workflow" / "scripts" / "selftest_kernels.py"
GEMM_BF16 = DATA / "handmade_selftest_gemm_bf16_raw.csv"
GEMM_FP16_LOW = DATA / "handmade_selftest_gemm_fp16_low_raw.csv"
COPY_STEP = DATA / "handmade_selftest_copy_step_raw.csv"
PACKED = DATA / "handmade_packed_half_raw.csv"
PIPE_NO_OPS = DATA / "handmade_tensor_pipe_no_ops_raw.csv"
T = "sm__ops_path_tensor_"


@pytest.fixture
def fake_ncu(tmp_path):
    return make_fake_ncu(tmp_path)


# --------------------------------------------------------------------------- the two passes


def test_exact_command_line_of_the_step_pass():
    cmd = build_ncu_command("ncu", STEP_METRICS, DRIVER, log_file="s.csv", pass_name="step")
    assert cmd == [  # no --profile-from-start: ncu rejects it in range replay modes
        "ncu",
        "--target-processes",
        "all",
        "--replay-mode",
        "app-range",
        "--cache-control",
        "none",
        "--clock-control",
        "none",
        "--metrics",
        "gpu__time_duration.sum,dram__bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum,"
        "lts__t_bytes.sum,l1tex__t_bytes.sum,"
        "dram__bytes.sum.peak_sustained,dram__cycles_elapsed.avg.per_second,"
        "lts__t_bytes.sum.peak_sustained,lts__cycles_elapsed.avg.per_second,"
        "l1tex__t_bytes.sum.peak_sustained,l1tex__cycles_elapsed.avg.per_second",
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--log-file",
        "s.csv",
        *DRIVER,
        "--profile-step",
    ]


def test_exact_command_line_of_the_kernel_pass():
    metrics = metrics_for_arch("9.0")
    cmd = build_ncu_command("/opt/ncu", metrics, DRIVER, log_file="k.csv", pass_name="kernel")
    assert cmd == [
        "/opt/ncu",
        "--profile-from-start",
        "off",
        "--target-processes",
        "all",
        "--replay-mode",
        "kernel",
        "--cache-control",
        "all",
        "--clock-control",
        "none",
        "--metrics",
        ",".join(metrics),
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--log-file",
        "k.csv",
        *DRIVER,
        "--profile-step",
    ]
    with pytest.raises(InputError, match="ncu pass 'warm'"):
        build_ncu_command("ncu", metrics, DRIVER, pass_name="warm")


def test_step_metrics_add_ncus_hierarchical_counters_per_arch_and_refuse_pascal():
    # STEP_METRICS everywhere, plus the L1/L2 counters of ncu's hierarchical chart,
    # whose L1 name depends on the architecture (dnnroofline.ncu.hierarchy)
    for cc, l1 in (("7.0", ""), ("8.6", "_mem_lg"), ("10.0", "_mem_lgds")):
        m = step_metrics_for_arch(cc)
        assert m[: len(STEP_METRICS)] == list(STEP_METRICS)
        assert m[len(STEP_METRICS) :] == [
            f"l1tex__lsu_writeback_active{l1}.sum",
            f"l1tex__lsu_writeback_active{l1}.sum.peak_sustained",
            "lts__lts2xbar_cycles_active.sum",
            "lts__lts2xbar_cycles_active.sum.peak_sustained",
        ]
    assert not [m for m in step_metrics_for_arch(None) if "sass" in m]  # kernel pass only
    with pytest.raises(InputError, match="Volta"):
        step_metrics_for_arch("6.0")
    assert PASSES["step"]["cache_control"] == "none" and PASSES["kernel"]["cache_control"] == "all"


def test_combined_totals_take_flops_from_kernels_and_bytes_from_the_step():
    kernel, step = parse_ncu_csv(H100_RAW), parse_ncu_csv(STEP_RAW)
    r = combine_passes(kernel, step)
    assert r["totals"]["flop"] == kernel["totals"]["flop"]
    assert r["totals"]["bytes"]["dram"] == 301_989_888 != kernel["totals"]["bytes"]["dram"]
    assert r["kernel_pass_totals"]["bytes"]["dram"] == 364_904_448
    assert r["provenance"] == {
        "totals.flop": "kernel",
        "totals.bytes.shared": "kernel",
        "totals.wgmma": "kernel",
        "totals.bytes": "step",
        "totals.time_s": "step",
        "memory_roofs": "step",
        "kernels": "kernel",
        "kernel_pass_totals": "kernel",
    }
    roofs = r["memory_roofs"]
    assert roofs["dram"]["bytes_per_s"] == pytest.approx(1280 * 2.619e9)
    assert roofs["l2"]["bytes_per_s"] == pytest.approx(5120 * 1.755e9)
    assert roofs["l1"]["bytes_per_s"] == pytest.approx(16896 * 1.755e9)
    assert roofs["l1"]["source"] == "ncu-theoretical" and roofs["l1"]["clock_hz"] == 1.755e9
    no_step = combine_passes(kernel, None)
    assert no_step["totals"]["bytes"]["dram"] is None and no_step["memory_roofs"]["l2"] is None
    # kernels lacking a counter are counted in the pass its total comes from
    kernel["totals"]["incomplete"] = {"flop.total": 2, "bytes.dram": 5}
    step["totals"]["incomplete"] = {"flop.total": 7, "bytes.dram": 1}
    incomplete = combine_passes(kernel, step)["totals"]["incomplete"]
    assert incomplete == {"flop.total": 2, "bytes.dram": 1}


def test_stage_step_pass_failure_keeps_kernels_but_is_not_ok(tmp_path, fake_ncu):
    p, r, csv_path = run_stage(
        tmp_path, fake_ncu, "--no-query", "--compute-capability", "9.0", mode="stepfail"
    )
    assert p.returncode == 0, p.stdout
    assert r["status"] == "error" and r["reason"] == "step_pass_failed"
    assert "app-range" in r["message"] and "cold-cache" in r["message"]
    assert len(r["kernels"]) == 3 and r["totals"]["bytes"]["dram"] is None
    assert r["ncu"]["passes"]["step"]["status"] != "ok"
    step_csv = csv_path.with_name("gpu_resnet50_bf16_bs32.step.csv")
    assert "Range replay failed" in step_csv.read_text()


# --------------------------------------------------------------------------- FLOP counting


def test_packed_half_counts_2_2_4_and_packed_fp32_too():
    r = parse_ncu_csv(PACKED)
    flop = r["totals"]["flop"]
    assert flop["fp16"] == 2 * 100 + 2 * 200 + 4 * 300  # HADD2, HMUL2, HFMA2
    # FADD/FMUL/FFMA 1/1/2, and the packed FADD2/FMUL2/FFMA2 2/2/4 (CC 10.0)
    assert flop["fp32"] == 1 + 2 + 2 * 3 + 2 * 10 + 2 * 20 + 4 * 30
    assert flop["total"] == 1800 + 189


def test_packed_fp32_is_asked_only_where_it_exists():
    packed = "smsp__sass_thread_inst_executed_op_ffma2_pred_on.sum"
    assert packed in metrics_for_arch("10.0") and packed in metrics_for_arch(None)
    assert packed not in metrics_for_arch("9.0") and packed not in metrics_for_arch("8.0")


def test_tensor_pipe_without_tensor_op_counters_is_a_named_gap():
    r = parse_ncu_csv(PIPE_NO_OPS)
    assert r["tensor_pipe_instructions"] == 1_048_576 and r["totals"]["flop"]["tensor"] is None
    wanted = metrics_for_arch("8.0")
    gap = tensor_counter_gap(r, wanted)
    assert gap == [m for m in wanted if m.startswith(T)]
    assert tensor_counter_gap(r) == ["sm__ops_path_tensor_*_sparsity_off.sum (none collected)"]
    assert tensor_counter_gap(parse_ncu_csv(H100_RAW), wanted) is None  # counted: no gap


def test_hopper_wgmma_instructions_alone_still_reveal_the_tensor_pipe(tmp_path):
    # An H100 counts tensor instructions per kind (HMMA, HGMMA = wgmma); a capture with
    # only those and no ops counter must still say tensor FLOPs are missing.
    hopper = tmp_path / "hopper_gmma_no_ops.csv"
    text = PIPE_NO_OPS.read_text().replace(
        "smsp__inst_executed_pipe_tensor.sum", "sm__inst_executed_pipe_tensor_op_gmma.sum"
    )
    hopper.write_text(text.replace('"8.0"', '"9.0"'))
    r = parse_ncu_csv(hopper)
    assert r["tensor_pipe_instructions"] == 1_048_576 and r["totals"]["flop"]["tensor"] is None
    assert tensor_counter_gap(r, metrics_for_arch("9.0"))
    assert {
        "sm__inst_executed_pipe_tensor_op_gmma.sum",
        "sm__inst_executed_pipe_tensor_op_hmma.sum",
    } <= set(metrics_for_arch("9.0"))


def test_tensor_pipe_instructions_take_the_total_else_the_sum_of_kinds():
    total, gmma, hmma = (
        "smsp__inst_executed_pipe_tensor.sum",
        "sm__inst_executed_pipe_tensor_op_gmma.sum",
        "sm__inst_executed_pipe_tensor_op_hmma.sum",
    )
    assert tensor_pipe_instructions({total: Decimal(10), gmma: Decimal(6), hmma: Decimal(4)}) == 10
    assert tensor_pipe_instructions({gmma: Decimal(6), hmma: Decimal(4)}) == 10
    assert tensor_pipe_instructions({gmma: None}) is None


def test_stage_says_missing_counters_not_ok(tmp_path, fake_ncu):
    p, r, _ = run_stage(
        tmp_path, fake_ncu, "--no-query", "--compute-capability", "8.0", csv=PIPE_NO_OPS
    )
    assert p.returncode == 0, p.stdout
    assert r["status"] == "missing_counters" and r["reason"] == "tensor_ops_not_counted"
    assert r["missing"] == [m for m in metrics_for_arch("8.0") if m.startswith(T)]
    assert "1048576" in r["message"] and "analytic" in r["message"]


# --------------------------------------------------------------------------- self-test


def test_selftest_cases_follow_the_study_precisions():
    cases = cases_for(["amp", "bf16", "fp32"])
    assert [c["case"] for c in cases] == ["gemm_fp16", "gemm_bf16", "gemm_fp32", "copy"]
    assert cases[0]["m"] == cases[0]["n"] == cases[0]["k"] == GEMM_SIZE
    assert cases[-1]["bytes"] == COPY_BYTES
    with pytest.raises(InputError, match="fp8"):
        cases_for(["fp8"])


def _combined(kernel_csv, step_csv=STEP_RAW):
    return {"status": "ok", **combine_passes(parse_ncu_csv(kernel_csv), parse_ncu_csv(step_csv))}


def test_selftest_checks_gemm_flops_and_copy_bytes_against_the_known_answer():
    bf16, fp16, copy = cases_for(["bf16", "amp"])[0], cases_for(["amp"])[0], cases_for([])[0]
    ok = check_case(bf16, _combined(GEMM_BF16))
    assert ok["ok"] and ok["pass"] == "kernel" and ok["expected"] == 2 * 4096**3
    assert ok["measured"] == 137_438_953_472 + 16_777_216 * 2
    assert ok["rel_error"] == pytest.approx(33_554_432 / 2 / 4096**3)
    low = check_case(fp16, _combined(GEMM_FP16_LOW))
    assert not low["ok"] and low["rel_error"] == pytest.approx(-0.1, abs=1e-9)
    assert "-10.0%" in low["reason"] and "tolerance +-2%" in low["reason"]
    c = check_case(copy, _combined(H100_RAW, COPY_STEP))
    assert c["ok"] and c["pass"] == "step" and c["expected"] == 2 * 512 * 2**20
    assert c["measured"] == 1_074_790_400 and c["kernel_pass_dram_bytes"] == 364_904_448
    failed = check_case(copy, {"status": "unavailable", "message": "ncu not found", "totals": {}})
    assert not failed["ok"] and "ncu not found" in failed["reason"]
    result = evaluate(["amp", "bf16"], [ok, low, c], env="gpu")
    assert result["verdicts"]["bf16"] == {"trusted": True, "gemm_case": "gemm_bf16", "reason": None}
    assert result["verdicts"]["amp"]["trusted"] is False
    assert "gemm_fp16" in result["verdicts"]["amp"]["reason"]
    assert verdict_for(result, "amp")["trusted"] is False
    assert verdict_for(None, "amp") == {"trusted": True, "reason": None, "checked": False}
    assert "no verdict" in verdict_for(result, "tf32")["reason"]
    with pytest.raises(InputError, match="verdicts"):
        verdict_for({}, "amp", "x/selftest.json")


def selftest_run(tmp_path, fake_ncu, **env_extra):
    """The self-test stage's command (amp and bf16, an H100's CC) and environment: the
    fake ncu answers each case with its crafted capture (fp16's GEMM 10% low)."""
    cases = tmp_path / "cases"
    cases.mkdir(exist_ok=True)
    (cases / "gemm_bf16.kernel.csv").write_text(GEMM_BF16.read_text())
    (cases / "gemm_fp16.kernel.csv").write_text(GEMM_FP16_LOW.read_text())
    (cases / "copy.step.csv").write_text(COPY_STEP.read_text())
    env = dict(
        os.environ,
        FAKE_NCU_MODE="ok",
        FAKE_NCU_CSV=str(H100_RAW),
        FAKE_NCU_STEP_CSV=str(STEP_RAW),
        FAKE_NCU_CASE_DIR=str(cases),
        FAKE_NCU_RECORD=str(tmp_path / "calls.jsonl"),
        **env_extra,
    )
    out = tmp_path / "results" / "gpu" / "ncu" / "selftest.json"
    cmd = [sys.executable, str(SELFTEST), "--ncu", str(fake_ncu), "--env", "gpu"]
    cmd += ["--compute-capability", "9.0", "--precisions", "amp", "bf16"]
    cmd += ["--work-dir", str(out.parent / "selftest"), "--out", str(out)]
    return cmd, env, out


def run_selftest(tmp_path, fake_ncu):
    cmd, env, out = selftest_run(tmp_path, fake_ncu)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


def profiled_cases(call_list):
    return [c[c.index("--case") + 1] for c in call_list if "--replay-mode" in c]


def test_selftest_stage_end_to_end_then_untrusted_precision_falls_back(tmp_path, fake_ncu):
    out = run_selftest(tmp_path, fake_ncu)
    st = json.loads(out.read_text())
    assert [c["case"] for c in st["cases"]] == ["gemm_fp16", "gemm_bf16", "copy"]
    assert [c["ok"] for c in st["cases"]] == [False, True, True]
    assert st["verdicts"]["bf16"]["trusted"] is True
    assert st["verdicts"]["amp"]["trusted"] is False and "-10.0%" in st["verdicts"]["amp"]["reason"]
    # Each case went through both passes of the study's own stage, driver = the known kernel.
    modes = [c[c.index("--replay-mode") + 1] for c in calls(tmp_path) if "--replay-mode" in c]
    assert modes == ["kernel", "app-range"] * 3
    first = next(c for c in calls(tmp_path) if "--replay-mode" in c)
    assert str(KERNELS) in first and "--case" in first and "--profile-step" in first
    # The study's captures: amp is not trusted (analytic fallback, reason kept), bf16 is.
    _, amp, _ = run_stage(
        tmp_path, fake_ncu, "--no-query", "--selftest", str(out), "--precision", "amp"
    )
    assert amp["status"] == "untrusted_counters" and amp["reason"] == "selftest_failed"
    assert "amp" in amp["message"] and "-10.0%" in amp["message"]
    assert amp["ncu"]["selftest"]["trusted"] is False
    _, bf16, _ = run_stage(
        tmp_path, fake_ncu, "--no-query", "--selftest", str(out), "--precision", "bf16"
    )
    assert bf16["status"] == "ok" and bf16["ncu"]["selftest"]["checked"] is True


def test_a_stopped_selftest_keeps_its_finished_cases_and_measures_only_the_rest(tmp_path, fake_ncu):
    # Stopped (a lease's command limit) while ncu profiles the copy, its last case ...
    pids = tmp_path / "pids"
    cmd, env, out = selftest_run(
        tmp_path, fake_ncu, FAKE_NCU_HANG_CASE="copy", FAKE_NCU_PIDS=str(pids)
    )
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not (pids.exists() and pids.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, "the copy never started"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert not out.exists()
    progress = json.loads((out.parent / "selftest" / PROGRESS_FILE).read_text())
    assert sorted(progress["cases"]) == ["gemm_bf16", "gemm_fp16"]
    before = len(calls(tmp_path))
    # ... the next run on the same machine measures only the copy, and says which it kept
    run_selftest(tmp_path, fake_ncu)
    assert profiled_cases(calls(tmp_path)[before:]) == ["copy", "copy"]  # its two passes
    st = json.loads(out.read_text())
    assert [(c["case"], c["resumed"]) for c in st["cases"]] == [
        ("gemm_fp16", True),
        ("gemm_bf16", True),
        ("copy", False),
    ]
    assert st["verdicts"]["bf16"]["trusted"] is True
    assert "-10.0%" in st["verdicts"]["amp"]["reason"]  # the kept capture's own counts
    assert not (out.parent / "selftest" / PROGRESS_FILE).exists()
    # a self-test that ended keeps nothing: a forced re-run measures every case again
    before = len(calls(tmp_path))
    run_selftest(tmp_path, fake_ncu)
    assert sorted(set(profiled_cases(calls(tmp_path)[before:]))) == [
        "copy",
        "gemm_bf16",
        "gemm_fp16",
    ]


def test_kept_cases_need_the_same_ncu_machine_and_case():
    cases = cases_for(["bf16"])
    key = progress_key("ncu", "/venv/bin/python", "abc", None)
    progress = {"key": key, "cases": {c["case"]: c for c in cases}}
    assert kept_cases(progress, key, cases) == {"gemm_bf16", "copy"}
    assert not kept_cases(
        progress, progress_key("ncu-2025", "/venv/bin/python", "abc", None), cases
    )
    assert not kept_cases(progress, progress_key("ncu", "/venv/bin/python", "other", None), cases)
    resized = [{**cases[0], "m": 2048}, cases[1]]  # a case measured otherwise is measured again
    assert kept_cases(progress, key, resized) == {"copy"}
    assert kept_cases(None, key, cases) == set() == kept_cases({"key": key}, key, cases)


def test_selftest_kernel_driver_without_a_gpu_records_why(tmp_path):
    out = tmp_path / "run.json"
    p = subprocess.run(
        [sys.executable, str(KERNELS), "--case", "copy", "--kind", "copy", "--bytes", "4096"]
        + ["--profile-step", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    rec = json.loads(out.read_text())
    assert rec["status"] == "error" and "needs a CUDA GPU" in rec["message"]
    bad = subprocess.run(
        [sys.executable, str(KERNELS), "--case", "g", "--kind", "gemm", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "--precision" in bad.stderr


def test_selftest_copy_is_a_kernel_that_ncu_sees_not_a_driver_memcpy():
    # dst.copy_(src) of one dtype, contiguous, is a cudaMemcpyAsync on CUDA: no kernel,
    # so ncu's kernel pass profiles nothing and the copy case (hence every precision)
    # fails on every GPU. The case must be an elementwise kernel reading and writing
    # each byte once; the GEMM case one mm. Checked on the CPU through the dispatcher.
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.called = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.called.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    copy = {"case": "copy", "kind": "copy", "precision": None, "bytes": 4096}
    gemm = {"case": "gemm_fp32", "kind": "gemm", "precision": "fp32", "m": 8, "n": 4, "k": 2}
    for case, want in ((copy, "aten.neg"), (gemm, "aten.mm")):
        op = known_op(case, torch.device("cpu"))
        with Ops() as ops:
            out = op()
        assert ops.called == [want], (case["case"], ops.called)
    assert out.shape == (8, 4)
    moved = known_op(copy, torch.device("cpu"))()
    assert moved.numel() * moved.element_size() == copy["bytes"]


# --------------------------------------------------------------------------- roofline points


def test_point_falls_back_to_analytic_with_the_reason_and_gives_both_flop_rates():
    from test_aggregate import LOCAL_RUNS, STEP_BYTES, points_for

    key = ("local", "resnet18", "fp32", 16)
    untrusted = {
        "status": "untrusted_counters",
        "message": "the counter self-test failed for fp32: gemm_fp32: ncu FLOPs ... (-10.0%)",
        "totals": {"flop": {"total": 9e9}, "bytes": {"dram": 1e9}},
    }
    p = points_for(LOCAL_RUNS, ncu={key: untrusted}).iloc[0]
    assert p["ai_source"] == "analytic"
    assert p["ai_note"].startswith("ncu untrusted_counters: the counter self-test failed")
    assert "-10.0%" in p["ai_note"]
    assert math.isnan(p["executed_flops"])  # untrusted counts give no executed rate
    assert p["useful_flops"] == pytest.approx(1.1e10 / 0.11)  # analytic / median step
    totals = {"flop": {"total": 1.65e10}, "bytes": {"dram": 1e9}}
    ok = {"status": "ok", "totals": totals, **STEP_BYTES}
    q = points_for(LOCAL_RUNS, ncu={key: ok}).iloc[0]
    assert q["ai_source"] == "ncu" and (pd.isna(q["ai_note"]) or q["ai_note"] is None)
    assert q["executed_flops"] == pytest.approx(1.65e10 / 0.11)
    assert q["useful_flops"] == pytest.approx(1.1e10 / 0.11)
    assert q["useful_flops"] / q["executed_flops"] == pytest.approx(1.1 / 1.65)


def test_report_page_shows_the_selftest_and_which_counter_failed(tmp_path):
    import write_ncu_comparison

    bf16, fp16 = cases_for(["bf16", "amp"])[:2]
    copy = cases_for([])[0]
    records = [
        check_case(bf16, _combined(GEMM_BF16)),
        check_case(fp16, _combined(GEMM_FP16_LOW)),
        check_case(copy, _combined(H100_RAW, COPY_STEP)),
    ]
    path = tmp_path / "gpu" / "ncu" / "selftest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(evaluate(["bf16", "amp"], records, env="gpu")))
    out = tmp_path / "page.html"
    assert write_ncu_comparison.main(["--selftest", str(path), "--out", str(out)]) == 0
    html = out.read_text()
    assert "Counter self-test" in html and "gpu: known kernels" in html
    assert "gemm_fp16" in html and "-10.00%" in html and "FAILED" in html
    assert "<strong>bf16</strong>: counters trusted" in html
    assert "<strong>amp</strong>: <span class=bad>not trusted</span>, analytic AI" in html
    assert "flop (kernel pass)" in html and "dram_bytes (step pass)" in html


# --------------------------------------------------------------------------- hierarchical roofs


def test_hierarchical_plot_draws_the_captures_own_l2_dram_roofs(tmp_path):
    from test_kernel_roofline import CEILINGS, svg_ids

    from dnnroofline.ncu.kernels import (
        NCU_THEORETICAL,
        hierarchical_point,
        hierarchical_roof_at,
        level_roofs,
        with_ncu_memory_roofs,
    )
    from dnnroofline.plots.kernels import plot_hierarchical

    ncu = {"status": "ok", **combine_passes(parse_ncu_csv(H100_RAW), parse_ncu_csv(STEP_RAW))}
    roofs = with_ncu_memory_roofs(level_roofs(CEILINGS), ncu)
    assert roofs.memory["l2"] == {NCU_THEORETICAL: pytest.approx(5120 * 1.755e9)}
    assert roofs.memory["dram"][NCU_THEORETICAL] == pytest.approx(1280 * 2.619e9)
    assert "measured" in roofs.memory["dram"]  # the ceilings' own roofs stay
    assert "at 1.75 GHz (measured)" in roofs.notes[f"l2:{NCU_THEORETICAL}"]
    dram_note = roofs.notes[f"dram:{NCU_THEORETICAL}"]
    assert "bus width x memory clock, the datasheet figure" in dram_note
    p = hierarchical_point(ncu, 0.01, "gpu", "resnet50", "amp", 32)
    # L1/L2 have only the capture's roof: it is the one the point is checked against.
    assert hierarchical_roof_at(roofs, "amp", "l1", 1.0) == pytest.approx(16896 * 1.755e9)
    # The fixture's nvjet kernel runs HGMMA (wgmma): 98% of the FLOPs, so no L1 point
    # and no L1 roof, but the reason on the plot.
    assert p.ai["l1"] is None and "wgmma" in p.unmeasurable["l1"]
    svg = tmp_path / "h.svg"
    info = plot_hierarchical(p, roofs, None, svg)
    ids = svg_ids(svg)
    for lv in ("l2", "dram"):
        assert f"roof-gpu-memory-{lv}-{NCU_THEORETICAL}" in ids
    assert f"roof-gpu-memory-l1-{NCU_THEORETICAL}" not in ids
    assert "unmeasurable-gpu-resnet50-amp-bs32-l1" in ids
    assert info["cache_roofs"] == 1 and info["levels"] == ["l2", "dram"]
    text = svg.read_text()
    assert "ncu theoretical: peak/cycle x measured clock" in text
    assert "DRAM datasheet figure (ncu: bus width x memory clock)" in text
    assert "lts__t_bytes.sum.peak_sustained x lts__cycles_elapsed.avg.per_second" in text
    assert "not measured" not in text
