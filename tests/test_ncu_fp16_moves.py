"""Half-precision instructions that do no arithmetic (dnnroofline.ncu.fp16), proven on
the five committed H100 kernel-pass captures: HFMA2.MMA register moves counted as HFMA
and as tensor-pipe instructions, HADD2.F32 half-to-float widenings counted as HADD."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest

from dnnroofline.ncu.fp16 import (
    CONVERSIONS,
    HADD_METRIC,
    HFMA_METRIC,
    HMUL_METRIC,
    MOVES,
    non_arithmetic_half,
)
from dnnroofline.ncu.kernels import kernel_points
from dnnroofline.ncu.metrics import tensor_pipe_instructions
from dnnroofline.ncu.parse import parse_ncu_text
from dnnroofline.ncu.table import read_table

ROOT = Path(__file__).resolve().parents[1]
NCU = ROOT / "examples" / "h100" / "results" / "h100" / "ncu"
CAPTURES = (
    "h100_resnet18_amp_bs128",
    "h100_resnet18_bf16_bs128",
    "h100_resnet18_fp32_bs128",
    "h100_resnet50_amp_bs256",
    "h100_resnet50_bf16_bs256",
)
T = "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_off.sum"
PIPE = "smsp__inst_executed_pipe_tensor.sum"

#: FLOPs each rule removes per capture: HFMA thread instructions x 4, HADD x 2.
REMOVED = {
    "h100_resnet18_amp_bs128": {MOVES: 1_024_711_680, CONVERSIONS: 7_059_040_338},
    "h100_resnet18_bf16_bs128": {MOVES: 2_036_096_256},
    "h100_resnet18_fp32_bs128": {MOVES: 12_098_519_040},
    "h100_resnet50_amp_bs256": {MOVES: 8_939_085_312, CONVERSIONS: 58_714_853_050},
    "h100_resnet50_bf16_bs256": {MOVES: 18_196_183_808},
}


#: The kernel pass's FLOPs as the H100 run's own parser wrote them (the committed JSONs
#: before they were re-parsed; git show 5fb3057:examples/h100/results/h100/ncu/<name>.json).
AS_CAPTURED = {
    "h100_resnet18_amp_bs128": {
        "fp64": 10, "fp32": 11_635_654_553, "fp16": 8_694_731_602,
        "tensor": 1_483_120_574_464, "total": 1_503_450_960_629,
    },
    "h100_resnet18_bf16_bs128": {
        "fp64": 0, "fp32": 10_644_076_991, "fp16": 2_036_096_256,
        "tensor": 1_785_016_090_624, "total": 1_797_696_263_871,
    },
    "h100_resnet18_fp32_bs128": {
        "fp64": 53_968_896, "fp32": 953_378_755_443, "fp16": 12_098_519_040,
        "tensor": 0, "total": 965_531_243_379,
    },
    "h100_resnet50_amp_bs256": {
        "fp64": 10, "fp32": 96_840_938_189, "fp16": 68_364_008_378,
        "tensor": 6_336_222_330_880, "total": 6_501_427_277_457,
    },
    "h100_resnet50_bf16_bs256": {
        "fp64": 0, "fp32": 87_105_811_339, "fp16": 18_196_183_808,
        "tensor": 7_088_008_855_552, "total": 7_193_310_850_699,
    },
}  # fmt: skip


def _text(name: str) -> str:
    return gzip.decompress((NCU / f"{name}.csv.gz").read_bytes()).decode()


@pytest.fixture(scope="module")
def parsed() -> dict[str, dict]:
    return {name: parse_ncu_text(_text(name), name) for name in CAPTURES}


def test_the_fp32_capture_has_no_fp16_flops(parsed):
    """TF32 off, no tensor math: the 12.1 GFLOP of 'fp16' were HFMA2.MMA moves."""
    r = parsed["h100_resnet18_fp32_bs128"]
    assert r["totals"]["flop"]["fp16"] == 0
    assert all(k["flop"]["fp16"] == 0 for k in r["kernels"])
    (moves,) = r["flop_corrections"]
    assert moves["rule"] == MOVES and moves["evidence"] == "counters"
    assert moves["counter"] == HFMA_METRIC
    assert moves["flop_removed"] == 4 * moves["instructions"] == 12_098_519_040
    assert moves["kernels"] == 167
    assert moves["share_of_counted_flop"] == pytest.approx(0.01253, abs=5e-6)


def test_bf16_captures_have_no_fp16_flops_either(parsed):
    for name in ("h100_resnet18_bf16_bs128", "h100_resnet50_bf16_bs256"):
        assert parsed[name]["totals"]["flop"]["fp16"] == 0, name


def test_every_hfma_of_a_kernel_without_tensor_ops_fits_in_its_tensor_pipe():
    """The evidence for the moves rule: in every kernel whose tensor-op counters read 0,
    HFMA thread instructions <= 32 x tensor-pipe warp instructions, in all five
    captures; outside the tensor kernels no HMUL ever ran."""
    checked = 0
    for name in CAPTURES:
        for k in read_table(_text(name), name).kernels:
            v = k.values
            ops = [x for n, x in v.items() if n.startswith("sm__ops_path_tensor_")]
            if any(x for x in ops):
                continue
            assert v[HMUL_METRIC] == 0, (name, k.name)
            if v[HFMA_METRIC]:
                checked += 1
                assert v[HFMA_METRIC] <= 32 * tensor_pipe_instructions(v), (name, k.name)
    assert checked == 55 + 114 + 167 + 145 + 308


def test_pooling_kernels_have_no_flops(parsed):
    """Max pooling adds nothing: its forward kernel's 914 M HADDs (resnet50 amp) are
    widenings and its HFMAs moves. The backward's FADDs stay: they sum the gradients of
    overlapping windows, one per widened half."""
    forward = backward = 0
    for name, r in parsed.items():
        for k in r["kernels"]:
            if "max_pool_forward" in k["name"]:
                forward += 1
                assert k["flop"]["total"] == 0, (name, k["name"])
            elif "max_pool_backward" in k["name"]:
                backward += 1
                assert k["flop"]["fp16"] == 0 and k["flop"]["total"] == k["flop"]["fp32"]
    assert forward == backward == 5
    pool = next(
        k for k in parsed["h100_resnet50_amp_bs256"]["kernels"] if "max_pool_fo" in k["name"]
    )
    assert pool["flop_removed"] == {MOVES: 4 * 7_340_032, CONVERSIONS: 2 * 913_866_752}
    points = kernel_points(parsed["h100_resnet50_amp_bs256"])
    assert not [p for p in points.points if "max_pool_forward" in p.name]


@pytest.mark.parametrize("name", CAPTURES)
def test_totals_change_only_by_the_documented_correction(parsed, name):
    """Against the FLOPs the H100 run's parser wrote from the same CSV: fp32, fp64 and
    tensor unchanged, fp16 and the total less exactly the FLOPs each rule reports; the
    committed JSON is that re-parse, kernel by kernel."""
    new = parsed[name]
    corrections = {c["rule"]: c["flop_removed"] for c in new["flop_corrections"]}
    assert corrections == REMOVED[name]
    removed = sum(corrections.values())
    before, after = AS_CAPTURED[name], new["totals"]["flop"]
    for key in ("fp64", "fp32", "tensor"):
        assert after[key] == before[key], key
    assert after["fp16"] == before["fp16"] - removed
    assert after["total"] == before["total"] - removed
    committed = json.loads((NCU / f"{name}.json").read_text())
    assert committed["kernel_pass_totals"]["flop"] == {k: after[k] for k in before}
    removed_per_kernel = sum(sum(k["flop_removed"].values()) for k in new["kernels"])
    assert removed_per_kernel == removed
    for k_committed, k_new in zip(committed["kernels"], new["kernels"], strict=True):
        assert k_new["flop"] == k_committed["flop"]


@pytest.mark.parametrize("name", CAPTURES)
def test_no_kernel_is_drawn_as_cuda_core_fp16(parsed, name):
    """The per-kernel plot's classes: before the rules 11 (fp32) to 205 (resnet50 amp)
    batch-norm, pooling and elementwise kernels were 'CUDA cores, fp16'."""
    points = kernel_points(parsed[name]).points
    assert points and not [p.name for p in points if p.path == "fp16"]


def _kernel(**counts: int | None) -> dict[str, Decimal | None]:
    names = {"hfma": HFMA_METRIC, "hadd": HADD_METRIC, "hmul": HMUL_METRIC, "pipe": PIPE}
    names["tensor"] = T
    return {names[k]: None if v is None else Decimal(v) for k, v in counts.items()}


def test_moves_are_at_most_32_per_tensor_pipe_instruction():
    (moves,) = non_arithmetic_half(_kernel(hfma=100, hadd=0, hmul=0, pipe=2, tensor=0))
    assert moves.rule == MOVES and moves.instructions == 64 and moves.flop == 256
    # HFMAs left over are arithmetic, so the HADDs are kept as well
    assert [
        r.rule for r in non_arithmetic_half(_kernel(hfma=100, hadd=7, hmul=0, pipe=2, tensor=0))
    ] == [MOVES]


def test_hadds_of_a_kernel_without_half_math_are_conversions():
    removed = non_arithmetic_half(_kernel(hfma=64, hadd=10, hmul=0, pipe=2, tensor=0))
    assert [(r.rule, r.instructions, r.flop) for r in removed] == [
        (MOVES, 64, 256),
        (CONVERSIONS, 10, 20),
    ]
    # an HMUL is half-precision math: its HADDs may be real adds
    assert [
        r.rule for r in non_arithmetic_half(_kernel(hfma=64, hadd=10, hmul=1, pipe=2, tensor=0))
    ] == [MOVES]


@pytest.mark.parametrize(
    "counts",
    [
        {"hfma": 64, "hadd": 10, "hmul": 0, "pipe": 2, "tensor": 4096},  # tensor math ran
        {"hfma": 64, "hadd": 10, "hmul": 0, "pipe": 2},  # no tensor-op counter (gardenia)
        {"hfma": 64, "hadd": 10, "hmul": 0, "pipe": 2, "tensor": None},  # n/a
        {"hfma": None, "hadd": 10, "hmul": 0, "pipe": 0, "tensor": 0},  # HFMA n/a
    ],
)
def test_nothing_is_removed_where_the_counters_cannot_tell(counts):
    assert non_arithmetic_half(_kernel(**counts)) == []
