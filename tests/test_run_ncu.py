"""What a capture's two passes add up to: judge() on real parsed tables, one case per
status. (The passes themselves run end to end against a fake ncu in test_ncu_command.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from dnnroofline.ncu.command import Diagnosis, metrics_for_arch
from dnnroofline.ncu.parse import parse_ncu_csv
from dnnroofline.ncu.run_ncu import TRUSTED, CaptureRequest, judge

DATA = Path(__file__).resolve().parent / "data" / "ncu"
KERNEL_CSV = DATA / "handmade_h100_raw_tensor.csv"  # FLOPs and tensor ops, per kernel
STEP_CSV = DATA / "handmade_step_range_raw.csv"  # the step's DRAM bytes
PIPE_NO_OPS = DATA / "handmade_tensor_pipe_no_ops_raw.csv"  # tensor pipe ran, no op counter
H100_METRICS = metrics_for_arch("9.0")


def a_pass(csv: Path | None, diag: Diagnosis | None = None, driver_run: dict | None = None):
    return {
        "diag": diag or Diagnosis("ok", None, None),
        "parsed": parse_ncu_csv(csv) if csv else None,
        "driver_run": driver_run,
    }


def test_both_passes_with_counters_and_a_passed_selftest_are_ok():
    verdict = {"trusted": True, "reason": None, "checked": True}
    status, reason, message, missing = judge(
        a_pass(KERNEL_CSV), a_pass(STEP_CSV), H100_METRICS, verdict, "bf16"
    )
    assert (status, reason, message, missing) == ("ok", None, None, [])


def test_ncu_failing_is_its_own_diagnosis():
    failed = Diagnosis("unavailable", "counters_not_permitted", "ERR_NVGPUCTRPERM: ...")
    assert judge(a_pass(None, failed), None, H100_METRICS, TRUSTED, "amp")[:3] == (
        "unavailable",
        "counters_not_permitted",
        "ERR_NVGPUCTRPERM: ...",
    )


def test_a_failing_driver_is_an_error_even_with_a_table():
    oom = {"status": "oom", "message": "CUDA out of memory"}
    status, reason, message, _ = judge(
        a_pass(KERNEL_CSV, driver_run=oom), a_pass(STEP_CSV), H100_METRICS, TRUSTED, "amp"
    )
    assert (status, reason) == ("error", "app_failed")
    assert "'oom'" in message and "CUDA out of memory" in message


def test_tensor_pipe_without_tensor_op_counters_names_what_is_missing():
    status, reason, message, missing = judge(
        a_pass(PIPE_NO_OPS), a_pass(STEP_CSV), H100_METRICS, TRUSTED, "bf16"
    )
    assert (status, reason) == ("missing_counters", "tensor_ops_not_counted")
    assert "tensor-core FLOPs unknown" in message
    assert missing and all(m.startswith("sm__ops_path_tensor_") for m in missing)


def test_a_capture_without_flop_counters_is_missing_counters():
    kernel = a_pass(KERNEL_CSV)
    kernel["parsed"]["totals"]["flop"]["total"] = None
    status, reason, message, missing = judge(
        kernel, a_pass(STEP_CSV), ["dram__bytes_read.sum"], TRUSTED, "fp32"
    )
    assert (status, reason) == ("missing_counters", "no_flop_counters")
    assert "none requested" in message and missing


@pytest.mark.parametrize("step", [None, "no table"])
def test_no_step_table_means_the_step_bytes_are_unknown(step):
    step_pass = None
    if step:
        step_pass = a_pass(None, Diagnosis("error", "no_table", "ncu wrote no table"))
    status, reason, message, _ = judge(a_pass(KERNEL_CSV), step_pass, H100_METRICS, TRUSTED, "amp")
    assert (status, reason) == ("error", "step_pass_failed")
    assert "DRAM bytes are unknown" in message
    assert ("ncu wrote no table" if step else "did not run") in message


def test_a_step_pass_without_dram_bytes_is_missing_counters():
    step = a_pass(STEP_CSV)
    step["parsed"]["totals"]["bytes"]["dram"] = None
    status, reason, _, missing = judge(a_pass(KERNEL_CSV), step, H100_METRICS, TRUSTED, "amp")
    assert (status, reason) == ("missing_counters", "no_dram_counters")
    assert missing and all(m.startswith("dram__bytes") for m in missing)


def test_a_failed_selftest_makes_good_counters_untrusted():
    verdict = {"trusted": False, "reason": "GEMM FLOPs 0.5x the known count", "checked": True}
    status, reason, message, _ = judge(
        a_pass(KERNEL_CSV), a_pass(STEP_CSV), H100_METRICS, verdict, "bf16"
    )
    assert (status, reason) == ("untrusted_counters", "selftest_failed")
    assert message == "the counter self-test failed for bf16: GEMM FLOPs 0.5x the known count"


def test_the_step_csv_defaults_beside_the_kernel_csv():
    req = CaptureRequest(ncu="ncu", csv_out="r/h100/ncu/k.csv", json_out="k.json", driver=["x"])
    assert req.step_csv == "r/h100/ncu/k.step.csv"
    assert CaptureRequest(**{**req.__dict__, "step_csv_out": "s.csv"}).step_csv == "s.csv"
