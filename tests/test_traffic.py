"""The AI range: the per-layer traffic model, its LLC rule, the bound, and ncu against it."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from test_aggregate import make_run
from torch import nn

from dnnroofline import aggregate, traffic
from dnnroofline import complexity as cx
from dnnroofline.errors import InputError
from dnnroofline.ncu import parse_ncu_csv

NCU = Path(__file__).resolve().parent / "data" / "ncu"


@pytest.fixture(scope="module")
def mlp_table():
    """Linear(64->32) -> ReLU -> Linear(32->10), no biases, traced on 4 rows, scaled to 8."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32, bias=False), nn.ReLU(), nn.Linear(32, 10, bias=False))
    records = cx.trace_traffic(model, torch.randn(4, 64))
    return records, cx.traffic_table(records, batch_size=8, probe=4)


def test_trace_sees_layers_not_views(mlp_table):
    records, _ = mlp_table
    # the weight transposes are views: no data moves, no record
    assert [r["op"] for r in records] == ["aten.mm.default", "aten.relu.default", "aten.mm.default"]
    first = records[0]
    assert [(k, b) for _, b, k, _ in first["inputs"]] == [("input", 4 * 64 * 4), ("param", 8192)]
    assert [(k, b) for _, b, k, _ in first["outputs"]] == [("act", 4 * 32 * 4)]


def test_a_reshape_that_declares_no_alias_moves_nothing():
    # Linear on a 3-d input runs mm between two reshapes; the second, _unsafe_view,
    # declares no alias in its schema but returns its input's storage
    model = nn.Sequential(nn.Linear(64, 32, bias=False))
    records = cx.trace_traffic(model, torch.randn(4, 5, 64))
    assert [r["op"] for r in records] == ["aten.mm.default"]
    table = cx.traffic_table(records, batch_size=4, probe=4)
    assert [row for row in table if row[1].startswith("act")] == [
        [4 * 5 * 32 * 4, "act", 1, 0, 1],  # the output: written once
        [4 * 5 * 32 * 4, "act_grad", 0, 1, 1],  # its gradient: read once
    ]


def test_frozen_weights_are_read_but_get_no_gradient():
    model = nn.Sequential(nn.Linear(64, 32, bias=False), nn.ReLU(), nn.Linear(32, 10, bias=False))
    model[0].weight.requires_grad = False
    table = cx.traffic_table(cx.trace_traffic(model, torch.randn(4, 64)), batch_size=4, probe=4)
    # W1 is read in forward; its layer (the image and a frozen weight) has no backward
    assert [8192, "other", 1, 0, 1] in table and [1024, "input", 1, 0, 1] in table
    assert [row for row in table if row[1] == "param_grad"] == [[1280, "param_grad", 0, 1, 1]]
    assert traffic.step_extra_bytes(100, "amp", trainable=10) == 20 * 10 + 6 * 100 + 8 * 10


def test_table_counts_the_documented_accesses(mlp_table):
    _, table = mlp_table
    # [bytes at batch 8, kind, forward accesses, backward accesses, how many tensors]
    assert table == [
        [320, "act", 1, 0, 1],  # logits: written in forward
        [320, "act_grad", 0, 1, 1],  # their gradient: read by the last mm's backward
        [1024, "act", 2, 1, 2],  # hidden pre/post ReLU: written, read; saved input read
        [1024, "act_grad", 0, 2, 2],  # their gradients: written once, read once
        [1280, "param", 1, 1, 1],  # W2 (10x32): read in forward and for the input grad
        [1280, "param_grad", 0, 1, 1],
        [2048, "input", 1, 1, 1],  # the batch: read in forward, saved for W1's gradient
        [8192, "param", 1, 1, 1],  # W1 (32x64), weights do not scale with the batch
        [8192, "param_grad", 0, 1, 1],
    ]


def test_layer_bytes_without_cache_and_with_llc(mlp_table):
    _, table = mlp_table
    fwd = 320 + 2 * (1024 * 2) + 1280 + 2048 + 8192
    bwd = 320 + 2 * (1024 * 3) + 1280 * 2 + 2048 + 8192 * 2
    assert traffic.layer_bytes(table, llc_bytes=None, phases=("forward",)) == fwd
    assert traffic.layer_bytes(table, llc_bytes=None) == fwd + bwd
    # an LLC that holds every tensor: each counted once per phase it appears in
    fwd_once = 320 + 2 * 1024 + 1280 + 2048 + 8192
    bwd_once = 320 + 2 * 1024 * 2 + 1280 * 2 + 2048 + 8192 * 2
    assert traffic.layer_bytes(table, llc_bytes=1 << 20) == fwd_once + bwd_once
    # 1 KiB: the 1024 B activations fit (the only tensors touched twice in a phase);
    # 512 B: they do not, and every access counts again
    assert traffic.layer_bytes(table, llc_bytes=1024) == fwd_once + bwd_once
    assert traffic.layer_bytes(table, llc_bytes=512) == fwd + bwd
    # bf16: activations, their grads and the weight copy at 2 bytes; weight grads fp32
    bf = traffic.layer_bytes(table, llc_bytes=None, precision="bf16")
    act = 320 * 1 + 2 * 1024 * 3  # bytes x accesses of the activations
    act_grad = 320 * 1 + 2 * 1024 * 2
    weights = 1280 * 2 + 8192 * 2
    assert bf == fwd + bwd - (act + act_grad + weights) // 2


def test_step_traffic_adds_optimizer_and_weight_copy():
    block = {"table": [[100, "act", 1, 1, 1]]}
    assert traffic.step_traffic_bytes(block, 10, llc_bytes=None) == 200 + 20 * 10
    assert traffic.step_traffic_bytes(block, 10, llc_bytes=None, precision="bf16") == 100 + 260
    assert traffic.step_traffic_bytes(block, 10, llc_bytes=None, precision="amp") == 100 + 340


def test_bad_tables_and_arguments_are_refused():
    with pytest.raises(InputError, match="row 0"):
        traffic.check_table([[1, "weights", 1, 1, 1]])
    with pytest.raises(InputError, match="expected a list"):
        traffic.step_traffic_bytes({"table": None}, 1, llc_bytes=None)
    with pytest.raises(InputError, match="precision 'fp8'"):
        traffic.layer_bytes([], llc_bytes=None, precision="fp8")
    with pytest.raises(InputError, match="phases"):
        traffic.layer_bytes([], llc_bytes=None, phases=("optimizer",))


def test_bound_of_range_and_clamp():
    assert traffic.bound_of_range(2.0, 5.0, ridge=10.0) == "memory"
    assert traffic.bound_of_range(10.0, 50.0, ridge=10.0) == "compute"
    assert traffic.bound_of_range(5.0, 50.0, ridge=10.0) == "inconclusive"
    assert traffic.ai_range(100.0, 10.0, 20.0) == (5.0, 10.0, False)
    assert traffic.ai_range(100.0, 10.0, 5.0) == (10.0, 10.0, True)  # never below the bound
    assert [traffic.position(a, 5.0, 10.0) for a in (4, 7, 11)] == ["below", "inside", "above"]


@pytest.fixture(scope="module")
def resnet18_cifar():
    """torchvision resnet18, 10 classes, on 32x32 images at batch 64 (the nnperf capture)."""
    return cx.complexity("resnet18", 64, 32, num_classes=10)


def test_complexity_json_carries_the_traffic_table(resnet18_cifar):
    c = resnet18_cifar
    t = c["traffic"]
    assert t["method"] == traffic.METHOD and t["ops"] > 50
    traffic.check_table(t["table"])
    no_cache = c["by_precision"]["fp32"]["traffic_bytes_no_cache"]
    assert no_cache == traffic.step_traffic_bytes(t, c["params"], llc_bytes=None)
    # the upper estimate sits above the true lower bound, and a cache only lowers it
    assert no_cache > c["min_dram_bytes_per_step"]
    llc = traffic.step_traffic_bytes(t, c["params"], llc_bytes=32 * 2**20)
    assert c["min_dram_bytes_per_step"] <= llc < no_cache
    assert c["by_precision"]["bf16"]["traffic_bytes_no_cache"] < no_cache


def test_ncu_fixture_ai_against_the_forward_range(resnet18_cifar):
    """The real nnperf L4 capture (forward only: it missed backward) against the model.

    Finding: ncu's AI (6.94 FLOP/B) lies *below* the forward range even without any
    cache in the model: the capture moved ~5x the per-layer model's bytes. Its
    implicit-GEMM convolutions re-read their inputs, and ncu's kernel replay flushed
    the caches before every kernel. The comparison is reported, never forced inside.
    """
    t = parse_ncu_csv(NCU / "nnperf_resnet18_cifar10_bs64_L4_details_scaled.csv")["totals"]
    ai_ncu = t["flop"]["total"] / t["bytes"]["dram"]
    assert ai_ncu == pytest.approx(6.9419, rel=1e-4)
    lo, hi = traffic.forward_ai_range(resnet18_cifar, llc_bytes=None)  # no cache: widest
    lo_l2, hi_l2 = traffic.forward_ai_range(resnet18_cifar, llc_bytes=48 * 10**6)  # L4's L2
    assert hi == hi_l2 and lo < lo_l2 <= hi
    assert traffic.position(ai_ncu, lo, hi) == "below"
    assert 3 < lo / ai_ncu < 8  # ncu moved 3-8x the no-cache model's forward bytes
    # the FLOPs agree within 5%: the gap is in the bytes, not the count
    assert resnet18_cifar["flops"]["forward"] == pytest.approx(t["flop"]["total"], rel=0.05)


def _metrics(env: str, model: str, batch: int, median: float) -> pd.DataFrame:
    return aggregate.metrics_frame([make_run(env, model, "fp32", batch, 1, median=median)])


def _ceilings(peak: float, bw: float, llc: int | None) -> dict:
    return {
        "env": "local",
        "llc_bytes": llc,
        "roofs": [
            {"kind": "compute", "precision": "fp32", "source": "measured", "value": peak},
            {"kind": "memory", "precision": None, "source": "measured", "value": bw},
        ],
    }


def test_points_get_range_and_honest_bound():
    comp = {
        "arch": "toy",
        "batch_size": 8,
        "params": 10,
        "flops": {"train_step": 1_000_000},
        "min_dram_bytes_per_step": 10_000,  # ai_high = 100
        "traffic": {"table": [[20_000, "act", 1, 1, 1]]},  # 40_000 + 200 (optimizer)
    }
    metrics = _metrics("local", "toy", 8, 1e-3)
    for ridge, bound in ((10.0, "compute"), (50.0, "inconclusive"), (200.0, "memory")):
        pts = aggregate.roofline_points_frame(
            metrics, {("toy", 8): comp}, {"local": _ceilings(ridge * 1e9, 1e9, None)}
        )
        r = pts.iloc[0]
        assert r["ai_source"] == "analytic"
        assert r["ai"] == r["ai_high"] == pytest.approx(100.0)
        assert r["ai_low"] == pytest.approx(1_000_000 / 40_200)
        assert r["bound"] == bound, ridge
    # an LLC that holds the tensor counts it once per phase: a narrower range
    pts = aggregate.roofline_points_frame(
        metrics, {("toy", 8): comp}, {"local": _ceilings(50e9, 1e9, 1 << 20)}
    )
    assert pts.iloc[0]["ai_low"] == pytest.approx(1_000_000 / 40_200)  # counted once already
    comp["traffic"]["table"] = [[20_000, "act", 3, 2, 1]]
    pts = aggregate.roofline_points_frame(
        metrics, {("toy", 8): comp}, {"local": _ceilings(50e9, 1e9, 1 << 20)}
    )
    assert pts.iloc[0]["ai_low"] == pytest.approx(1_000_000 / 40_200)
    pts = aggregate.roofline_points_frame(
        metrics, {("toy", 8): comp}, {"local": _ceilings(50e9, 1e9, None)}
    )
    assert pts.iloc[0]["ai_low"] == pytest.approx(1_000_000 / 100_200)
    # an old complexity JSON without a traffic table: no range, the old bound
    del comp["traffic"]
    pts = aggregate.roofline_points_frame(
        metrics, {("toy", 8): comp}, {"local": _ceilings(50e9, 1e9, None)}
    )
    assert math.isnan(pts.iloc[0]["ai_low"]) and pts.iloc[0]["bound"] == "compute"


def test_broken_traffic_table_names_the_file():
    comp = {
        "arch": "toy",
        "batch_size": 8,
        "params": 10,
        "flops": {"train_step": 1_000_000},
        "min_dram_bytes_per_step": 10_000,
        "traffic": {"table": [[20_000, "activation", 1, 1, 1]]},
    }
    with pytest.raises(InputError, match=r"results/complexity/toy_bs8\.json: .*row 0"):
        aggregate.roofline_points_frame(
            _metrics("local", "toy", 8, 1e-3),
            {("toy", 8): comp},
            {"local": _ceilings(50e9, 1e9, None)},
        )
