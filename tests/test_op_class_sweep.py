"""Efficiency: the fit from an op's shape, the fallbacks, the tables derived from a
ceilings file and scaled to another GPU, and the sweep itself (quick sizes, this CPU)."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from cpu_flags import has_bf16

from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.estimate.op_classes import TABLE_KEYS
from dnnroofline.measure import fresh_pages
from dnnroofline.perfmodel import op_class_tables as oct_
from dnnroofline.study import datasheet

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "op_class_sweep.py"
H100_CEILINGS = ROOT / "examples" / "h100" / "results" / "h100" / "ceilings.json"
ROOF_C, ROOF_M = 1e11, 1e10


def row(ideal_s: float, eff: float, what: str = "op") -> dict:
    return {"flops": 0, "bytes": 1, "seconds": ideal_s / eff, "ideal_s": ideal_s,
            "efficiency": eff, "what": what}  # fmt: skip


def doc(tables: dict, precision: str = "fp32", dispatch: dict | None = None) -> dict:
    """A hand-made efficiency document of one precision."""
    return {
        "schema_version": 2,
        "source": "sweep",
        "device": "cpu",
        "roofs": {"compute": {precision: ROOF_C}, "memory": ROOF_M},
        "dispatch": dispatch,
        "tables": {precision: tables},
    }


def conv(n, c, co, hw, k, groups=1, stride=1) -> dict:
    ho = (hw + 2 * (k // 2) - k) // stride + 1
    return {"n": n, "c_in": c, "c_out": co, "h": hw, "w": hw, "h_out": ho, "w_out": ho,
            "kh": k, "kw": k, "stride": stride, "groups": groups, "input_grad": False}  # fmt: skip


def conv_item(shape: dict, item: int = 4) -> dict:
    """An op of the conv_fwd table: its FLOPs, bytes and ideal time from its shape."""
    n, c, co, g, k = (shape[x] for x in ("n", "c_in", "c_out", "groups", "kh"))
    hw, ho = shape["h"], shape["h_out"]
    flops = 2 * n * co * ho * ho * (c // g) * k * k
    nbytes = item * (n * c * hw * hw + co * (c // g) * k * k + n * co * ho * ho)
    ideal = max(flops / ROOF_C, nbytes / ROOF_M)
    return {"shape": shape, "phase": "forward", "flops": flops, "bytes": nbytes, "ideal_s": ideal}


def conv_rows(truth, count: int = 60, seed: int = 0) -> list[dict]:
    """conv_fwd rows of random shapes whose efficiency is ``truth(shape)``."""
    rng = random.Random(seed)
    rows = []
    while len(rows) < count:
        c = rng.choice([8, 16, 32, 64, 128, 256])
        groups = rng.choice([1, 1, c])
        shape = conv(rng.choice([1, 4, 16]), c, c, rng.choice([7, 14, 28, 56]),
                     rng.choice([1, 3]), groups)  # fmt: skip
        item = conv_item(shape)
        eff = truth(shape)
        rows.append({**item, "seconds": item["ideal_s"] / eff, "efficiency": eff, "what": "c"})
    return rows


def by_ideal(tables, precision: str, key: str, ideal_s: float) -> tuple[float, str]:
    """What the tables give one op known by its ideal time alone (no shape)."""
    effs, used, _ = tables.efficiencies(precision, key, [{"ideal_s": ideal_s}])
    return effs[0], used


# --------------------------------------------------------------------------- the fit


def dense_fast_grouped_slow(shape: dict) -> float:
    return 0.6 if shape["groups"] == 1 else 0.04


def test_a_depthwise_conv_is_not_priced_as_a_dense_conv_of_the_same_ideal_time():
    tables = oct_.load_tables(doc({"conv_fwd": conv_rows(dense_fast_grouped_slow)}))
    dense = conv_item(conv(4, 64, 64, 28, 3))
    # a depthwise 3x3 with the channels and batch that give it the dense one's ideal time
    depthwise = conv_item(conv(4, 64 * 64, 64 * 64, 28, 3, groups=64 * 64))
    depthwise["ideal_s"] = dense["ideal_s"]
    (eff_dense, eff_dw), used, shapeless = tables.efficiencies(
        "fp32", "conv_fwd", [dense, depthwise]
    )
    assert used == "conv_fwd" and shapeless == 0
    assert eff_dense == pytest.approx(0.6, rel=0.25)
    assert eff_dw == pytest.approx(0.04, rel=0.5)
    # the lookup by ideal time alone (the first model) could not tell them apart
    assert by_ideal(tables, "fp32", "conv_fwd", dense["ideal_s"])[0] == pytest.approx(
        by_ideal(tables, "fp32", "conv_fwd", depthwise["ideal_s"])[0]
    )


def test_a_1x1_and_a_3x3_conv_get_their_own_efficiency():
    rows = conv_rows(lambda s: 0.15 if s["kh"] == 1 else 0.7)
    tables = oct_.load_tables(doc({"conv_fwd": rows}))
    ones, threes = (conv_item(conv(16, 128, 128, 28, k)) for k in (1, 3))
    effs, _, _ = tables.efficiencies("fp32", "conv_fwd", [ones, threes])
    assert effs[0] == pytest.approx(0.15, rel=0.3) and effs[1] == pytest.approx(0.7, rel=0.3)


def test_no_op_is_priced_faster_than_its_roof_unless_the_sweep_measured_it():
    under = oct_.load_tables(doc({"conv_fwd": conv_rows(lambda s: 0.9)}))
    over = oct_.load_tables(doc({"conv_fwd": conv_rows(lambda s: 1.5 if s["kh"] == 3 else 0.5)}))
    huge = conv_item(conv(4096, 4096, 4096, 512, 3))  # far outside every row
    assert under.efficiencies("fp32", "conv_fwd", [huge])[0][0] <= 1.0
    # a Winograd convolution (or a cache) beat the nominal roof in the sweep: no further
    assert over.efficiencies("fp32", "conv_fwd", [huge])[0][0] <= 1.5 + 1e-9


def test_the_fit_is_the_same_on_every_call():
    rows = conv_rows(lambda s: 0.1 + 0.5 * (s["kh"] == 3) * (s["groups"] == 1))
    item = conv_item(conv(8, 32, 32, 14, 3))
    first = oct_.load_tables(doc({"conv_fwd": rows})).efficiencies("fp32", "conv_fwd", [item])
    again = oct_.load_tables(doc({"conv_fwd": rows})).efficiencies("fp32", "conv_fwd", [item])
    assert first == again


def test_cross_validated_residuals_are_the_fits_error_on_rows_it_did_not_see():
    exact = oct_.load_tables(doc({"conv_fwd": conv_rows(dense_fast_grouped_slow)}))
    rng = random.Random(1)
    noisy_rows = conv_rows(lambda s: dense_fast_grouped_slow(s) * math.exp(rng.gauss(0, 0.5)))
    noisy = oct_.load_tables(doc({"conv_fwd": noisy_rows}))
    small = exact.residuals("fp32", "conv_fwd")
    large = noisy.residuals("fp32", "conv_fwd")
    assert len(small) == len(large) == 60
    median = [sorted(abs(r) for r in res)[len(res) // 2] for res in (small, large)]
    assert median[0] < 0.05 and median[1] > 0.2


def test_a_shape_without_the_tables_features_is_read_by_its_ideal_time():
    tables = oct_.load_tables(doc({"conv_fwd": conv_rows(lambda s: 0.5)}))
    item = conv_item(conv(4, 32, 32, 14, 3))
    effs, _, shapeless = tables.efficiencies("fp32", "conv_fwd", [{**item, "shape": {}}, item])
    assert shapeless == 1 and effs[0] == pytest.approx(0.5, rel=0.05)


def test_a_cpu_rows_host_cost_per_call_is_taken_out():
    bare = 1e-4
    rows = [row(1e-5, 1e-5 / 1.2e-4, "near"), row(1e-3, 1e-3 / 2e-3, "far")]
    doc_ = doc({"gemm": rows}, dispatch={"bare_s": {"gemm": bare}, "host_s": {}})
    near, far = oct_.load_tables(doc_).rows["fp32"]["gemm"]
    assert far["efficiency"] == pytest.approx(1e-3 / (2e-3 - bare))
    # 1.2x the call's cost: the difference would be noise; a third of the call is kept
    assert near["efficiency"] == pytest.approx(1e-5 / (1.2e-4 / 3))
    cuda = oct_.load_tables({**doc_, "device": "cuda"})  # CUDA times the device alone
    assert cuda.rows["fp32"]["gemm"][1]["efficiency"] == pytest.approx(0.5)


# --------------------------------------------------------------------------- small tables


def test_a_small_table_is_interpolated_linearly_in_log_ideal_time_and_clamped():
    tables = oct_.load_tables(doc({"gemm": [row(1e-2, 0.6), row(1e-4, 0.2)]}))
    eff, used = by_ideal(tables, "fp32", "gemm", 1e-3)  # halfway in log time
    assert used == "gemm"
    assert eff == pytest.approx(math.sqrt(0.6 * 0.2))  # geometric: linear in log efficiency
    assert by_ideal(tables, "fp32", "gemm", 1e-9)[0] == pytest.approx(0.2)  # clamped
    assert by_ideal(tables, "fp32", "gemm", 5.0)[0] == pytest.approx(0.6)


def test_one_outlying_row_is_outvoted_by_its_neighbours():
    # a microbenchmark slowed 20x by another process between two steady ones
    rows = [row(1e-4, 0.5), row(1e-3, 0.025), row(1e-2, 0.5), row(1e-1, 0.6)]
    tables = oct_.load_tables(doc({"elementwise": rows}))
    assert by_ideal(tables, "fp32", "elementwise", 1e-3)[0] == pytest.approx(0.5)


def test_a_missing_table_falls_back_along_the_chain_and_says_which_it_used():
    tables = oct_.load_tables(doc({"elementwise": [row(1e-3, 0.5)], "conv_fwd": [row(1e-3, 0.7)]}))
    assert by_ideal(tables, "fp32", "gemm", 1e-3) == (pytest.approx(0.7), "conv_fwd")
    # conv_depthwise_bwd -> conv_depthwise_fwd -> elementwise
    assert by_ideal(tables, "fp32", "conv_depthwise_bwd", 1e-3)[1] == "elementwise"
    item = {"shape": {"numel": 10}, "phase": "forward", "ideal_s": 1e-3, "flops": 1, "bytes": 8}
    effs, used, _ = tables.efficiencies("fp32", "normalization", [item])
    assert used == "elementwise" and effs == [pytest.approx(0.5)]


def test_no_usable_table_is_an_error_naming_the_file_and_the_chain():
    tables = oct_.load_tables(doc({"gemm": [row(1e-3, 0.5)]}), where="results/x/efficiency.json")
    with pytest.raises(InputError, match=r"results/x/efficiency.json.*'pooling'.*pooling -> "):
        by_ideal(tables, "fp32", "pooling", 1e-3)
    with pytest.raises(InputError, match=r"no tables for precision 'bf16'"):
        by_ideal(tables, "bf16", "gemm", 1e-3)


@pytest.mark.parametrize(
    "bad, named",
    [
        ({"tables": {"fp32": {"gemm": [row(1e-3, 0.5), {"ideal_s": 1e-3, "efficiency": -1}]}}},
         r"tables\.fp32\.gemm\[1\]\.efficiency"),
        ({"tables": {"fp32": {"matmul": [row(1e-3, 0.5)]}}}, r"tables\.fp32\.matmul: unknown"),
        ({"roofs": {"compute": {"fp32": 1e11}}}, r"roofs\.memory"),
        ({"tables": {"bf16": {"gemm": [row(1e-3, 0.5)]}}}, r"tables\.bf16 has no compute roof"),
    ],
)  # fmt: skip
def test_a_bad_document_is_refused_naming_the_file_and_the_key(bad, named):
    with pytest.raises(InputError, match=rf"eff\.json: .*{named}"):
        oct_.load_tables({**doc({}), **bad}, where="eff.json")


def test_leave_one_out_residuals_of_a_small_table():
    rows = [row(1e-4, 0.2, "a"), row(1e-3, 0.4, "b"), row(1e-2, 0.8, "c")]
    tables = oct_.load_tables(doc({"gemm": rows, "copy": rows[:2]}))
    res = tables.residuals("fp32", "gemm")
    # b lies on the line through a and c (in log efficiency); a and c are clamped to b
    assert res == pytest.approx([math.log(0.4 / 0.2), 0.0, math.log(0.4 / 0.8)])
    assert tables.residuals("fp32", "copy") == []  # 2 rows: nothing to leave out


# --------------------------------------------------------------------------- from ceilings


@pytest.fixture(scope="module")
def h100_ceilings():
    return json.loads(H100_CEILINGS.read_text())


def test_tables_from_h100_ceilings_put_the_roof_setting_gemm_at_efficiency_one(h100_ceilings):
    derived = oct_.tables_from_ceilings(h100_ceilings, "examples/h100/ceilings.json")
    tables = oct_.load_tables(derived)
    assert derived["source"] == "ceilings" and derived["dispatch"] is None
    roofs = roofline.parse_roofs(h100_ceilings)
    for roof in h100_ceilings["roofs"]:
        if roof["kind"] != "compute" or roof["source"] != "measured":
            continue
        p = roof["precision"]
        assert tables.roofs["compute"][p] == roofline.select_roof(roofs, "compute", p).value
        assert {"gemm", "conv_fwd", "conv_bwd"} <= set(derived["tables"][p])
        winner = next(c for c in roof["candidates"] if c["set_roof"])
        ideal = winner["flop"] / roof["value"]  # compute-bound: its FLOPs at the roof
        gemms = derived["tables"][p]["gemm"]
        at_roof = [r for r in gemms if r["ideal_s"] == pytest.approx(ideal)]
        assert [r["efficiency"] for r in at_roof] == [pytest.approx(1.0)]
        assert all(set(r["shape"]) == {"m", "n", "k"} for r in gemms)  # the fit reads them
        effs, used, shapeless = tables.efficiencies(p, "gemm", [{**at_roof[0], "bytes": 1}])
        assert used == "gemm" and shapeless == 0 and effs[0] == pytest.approx(1.0, abs=0.1)
        assert len(gemms) == sum(c["kind"] == "gemm" for c in roof["candidates"])
        assert all(0 < r["efficiency"] <= 1.0 + 1e-12 for r in gemms)


def test_tables_from_h100_ceilings_take_the_memory_tables_from_the_stream_rows(h100_ceilings):
    derived = oct_.tables_from_ceilings(h100_ceilings)
    best_bw = max(r["value"] for r in h100_ceilings["roofs"] if r["kind"] == "memory"
                  and r["source"] == "measured")  # fmt: skip
    assert derived["roofs"]["memory"] == best_bw
    for p, tables in derived["tables"].items():
        assert [r["what"] for r in tables["elementwise"]] == ["STREAM scale", "STREAM triad"]
        assert [r["what"] for r in tables["optimizer"]] == ["STREAM triad"]
        assert [r["what"] for r in tables["copy"]] == ["STREAM d2d_copy"]
        triad = tables["optimizer"][0]
        assert triad["efficiency"] == pytest.approx(1.0)  # the triad set the memory roof
        assert triad["ideal_s"] == pytest.approx(3221225472 / best_bw)
        assert "normalization" not in tables  # it falls back to elementwise
        used = by_ideal(oct_.load_tables(derived), p, "normalization", 1e-4)[1]
        assert used == "elementwise"


def test_scaled_for_gpu_scales_the_h100_memory_roof_to_the_h200s(h100_ceilings):
    derived = oct_.tables_from_ceilings(h100_ceilings)
    h100, h200 = datasheet.gpu_by_key("h100_sxm5"), datasheet.gpu_by_key("h200_sxm")
    scaled = oct_.scaled_for_gpu(derived, h100, h200)
    assert scaled["roofs"]["memory"] == pytest.approx(derived["roofs"]["memory"] * 4800 / 3350)
    assert scaled["roofs"]["compute"] == pytest.approx(derived["roofs"]["compute"])  # same peaks
    assert scaled["device_name"] == h200.name
    assert any("scaled from" in n for n in scaled["notes"])
    before = derived["tables"]["bf16"]["elementwise"][0]
    after = scaled["tables"]["bf16"]["elementwise"][0]
    assert after["efficiency"] == before["efficiency"]
    assert after["ideal_s"] == pytest.approx(before["ideal_s"] * 3350 / 4800)
    assert derived["roofs"]["memory"] == oct_.tables_from_ceilings(h100_ceilings)["roofs"]["memory"]


# --------------------------------------------------------------------------- the sweep


@pytest.fixture(scope="module")
def quick_sweep(tmp_path_factory, module_cpu_flags):
    """The quick ceilings of this CPU in fp32 and bf16, then the efficiency CLI in quick
    mode on them, asked for both: once under each set of CPU flags (tests/cpu_flags.py),
    which both see, so the sweep finds a roof for each precision the ceilings measured."""
    from dnnroofline.measure.ceilings import build_ceilings

    tmp = tmp_path_factory.mktemp("eff")
    os.environ["OMP_NUM_THREADS"] = "1"
    ceilings = build_ceilings("local", "cpu", ["fp32", "bf16"], quick=True, expect_threads=1)
    (tmp / "ceilings.json").write_text(json.dumps(ceilings))
    out = tmp / "results" / "local" / "efficiency.json"
    cmd = [sys.executable, str(SCRIPT), "--env", "local", "--device", "cpu", "--precisions",
           "fp32", "bf16", "--ceilings", str(tmp / "ceilings.json"), "--quick", "--no-cache",
           "--expect-threads", "1", "--out", str(out)]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(SCRIPT.parent))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), ceilings, module_cpu_flags, proc.stderr


def test_the_quick_sweep_measures_bf16_where_the_cpu_runs_it_and_says_why_not_elsewhere(
    quick_sweep,
):
    eff, ceilings, flags, stderr = quick_sweep
    if has_bf16(flags):
        assert list(eff["tables"]) == ["fp32", "bf16"] and eff["skipped"] == []
        assert set(eff["tables"]["bf16"]) == set(TABLE_KEYS)
        bf16 = roofline.select_roof(roofline.parse_roofs(ceilings), "compute", "bf16").value
        assert eff["roofs"]["compute"]["bf16"] == bf16
    else:
        assert list(eff["tables"]) == ["fp32"]
        assert [s["precision"] for s in eff["skipped"]] == ["bf16"]
        assert "AVX512_BF16 or AMX" in eff["skipped"][0]["reason"]
        assert "efficiency: skipped bf16: cpu: bf16 on CPU needs AVX512_BF16" in stderr
        assert "bf16" not in eff["roofs"]["compute"]


def test_the_quick_sweep_writes_every_table_as_shares_of_the_measured_roofs(quick_sweep):
    eff, ceilings = quick_sweep[:2]
    assert eff["source"] == "sweep" and eff["env"] == "local" and eff["device"] == "cpu"
    assert eff["schema_version"] == 2 and eff["cache"] == {"hit": False, "kept": False}
    roofs = roofline.parse_roofs(ceilings)
    compute = roofline.select_roof(roofs, "compute", "fp32").value
    memory = roofline.select_roof(roofs, "memory").value
    assert eff["roofs"] == {
        "compute": {p: roofline.select_roof(roofs, "compute", p).value for p in eff["tables"]},
        "memory": memory,
    }
    assert set(eff["tables"]["fp32"]) == set(TABLE_KEYS)
    for rows in eff["tables"]["fp32"].values():
        assert rows == sorted(rows, key=lambda r: r["ideal_s"])
        for r in rows:
            ideal = max(r["flops"] / compute, r["bytes"] / memory)
            assert r["ideal_s"] == pytest.approx(ideal)
            assert r["seconds"] > 0 and r["efficiency"] == pytest.approx(ideal / r["seconds"])
    tables = oct_.load_tables(eff)  # the model reads it
    for key in TABLE_KEYS:
        assert tables.table_used("fp32", key) == key


def test_the_quick_sweep_measures_the_hosts_costs(quick_sweep):
    dispatch = quick_sweep[0]["dispatch"]
    for phase in ("forward", "backward"):
        costs = dispatch["host_s"][phase]
        assert set(costs) >= {"conv", "elementwise", "normalization", "optimizer"}
        # differences of two timings, clipped at 0: on a loaded host one may come out 0
        assert all(math.isfinite(v) and v >= 0 for v in costs.values())
    fixed = dispatch["fixed"]["fp32"]
    assert fixed["intercept_s"] > 0 and fixed["per_param_tensor_s"] >= 0
    assert [p["param_tensors"] for p in fixed["points"]] == [8, 64]
    assert dispatch["launch_s_per_op"] is None  # a CPU has no launch queue
    # what an output fresh from the OS costs per byte, and from which size (none may pay)
    fresh = dispatch["fresh_pages"]
    assert fresh["s_per_byte"] >= 0 and len(fresh["probes"]) >= len(fresh_pages.PROBE_MIB)
    assert fresh["threshold_bytes"] is None or fresh["threshold_bytes"] >= 2**20
    tables = oct_.load_tables(quick_sweep[0], "efficiency.json")  # the model reads it
    assert tables.rows["fp32"]["gemm"]


def test_every_sweep_row_has_its_classes_inventory_features_and_its_flops(quick_sweep):
    from dnnroofline.perfmodel.shape_features import feature_vector

    tables = quick_sweep[0]["tables"]
    for key, rows in [(k, rows) for t in tables.values() for k, rows in t.items()]:
        for r in rows:  # the fit reads a row as it reads an op of the step
            feature_vector(key, r["shape"], r["phase"], r["ideal_s"], r["flops"], r["bytes"])
            s = r["shape"]
            if key.startswith("conv"):
                fwd = 2 * s["n"] * s["c_out"] * s["h_out"] * s["w_out"] * (
                    s["c_in"] // s["groups"]) * s["kh"] * s["kw"]  # fmt: skip
                grads = 2 if key.endswith("bwd") and s["input_grad"] else 1
                assert r["flops"] == fwd * grads, r["what"]
                assert ("depthwise" in key) == (s["groups"] == s["c_in"] == s["c_out"] > 1)
            if key == "gemm":
                assert r["flops"] == 2 * s.get("batch", 1) * s["m"] * s["n"] * s["k"]


def test_the_sweep_draws_over_ranges_seeded():
    from dnnroofline.measure import sweep_ops

    draw = sweep_ops.Draw(random.Random("fp32"), sweep_ops.RANGES["quick"])
    shapes = [sweep_ops.conv_shape(draw, False, False) for _ in range(20)]
    again = sweep_ops.Draw(random.Random("fp32"), sweep_ops.RANGES["quick"])
    assert shapes == [sweep_ops.conv_shape(again, False, False) for _ in range(20)]
    assert len({(s["n"], s["c_in"], s["kh"], s["h"]) for s in shapes}) > 10  # drawn, not listed
    low, high = sweep_ops.RANGES["quick"]["n"]
    assert all(low <= s["n"] <= high for s in shapes)


@pytest.mark.parametrize("depthwise", [False, True])
def test_the_sweep_draws_maps_smaller_than_the_kernel_as_a_last_stage_runs_them(depthwise):
    """A 3x3 on 2x2, a 5x5 depthwise on 4x4: what a network's last stages run at small
    images, and the slowest per FLOP on a CPU. Such a layer is drawn, and it runs with
    the output size the row records."""
    import torch

    from dnnroofline.measure import sweep_ops

    draw = sweep_ops.Draw(random.Random("fp32"), sweep_ops.RANGES["cpu"])
    shapes = [sweep_ops.conv_shape(draw, depthwise, True) for _ in range(400)]
    inside = [s for s in shapes if s["h"] < s["kh"]]
    assert 0.03 < len(inside) / len(shapes) < 0.5, len(inside)
    pool = sweep_ops.Pool(torch, "cpu", 2**20)
    setting = sweep_ops.Setting(torch, pool, "fp32", False)
    s = min(inside, key=lambda s: s["n"] * s["c_in"] * s["c_out"])
    y = sweep_ops.conv_op(setting, s, False, "conv").call()
    assert tuple(y.shape) == (s["n"], s["c_out"], s["h_out"], s["w_out"])
    _, grad_weight, _ = sweep_ops.conv_op(setting, s, True, "conv").call()
    assert tuple(grad_weight.shape) == (s["c_out"], s["c_in"] // s["groups"], s["kh"], s["kw"])


def test_a_sweep_is_kept_per_machine_and_a_second_study_reuses_it(tmp_path, monkeypatch):
    from dnnroofline.measure import op_class_sweep as efficiency

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def measured():
        calls.append(1)
        return {"rows": {"fp32": {}}, "notes": [], "contended": None, "n": len(calls)}

    key = {"device": "cpu", "threads": 2, "precisions": ["fp32"]}
    first = efficiency.cached_measure(key, measured)
    second = efficiency.cached_measure(key, measured)
    other = efficiency.cached_measure({**key, "threads": 1}, measured)
    assert calls == [1, 1] and first["n"] == second["n"] == 1 and other["n"] == 2
    assert first["cache"] == {"hit": False, "kept": True}
    assert second["cache"] == {"hit": True, "kept": True}


def test_a_sweep_measured_on_a_busy_machine_is_not_kept(tmp_path, monkeypatch):
    from dnnroofline.measure import op_class_sweep as efficiency

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def busy():
        calls.append(1)
        return {"rows": {}, "notes": [], "contended": 0.9}

    key = {"device": "cpu"}
    assert efficiency.cached_measure(key, busy)["cache"] == {"hit": False, "kept": False}
    efficiency.cached_measure(key, busy)
    assert len(calls) == 2


def test_a_precision_the_cpu_does_not_run_is_skipped_with_its_reason():
    from dnnroofline.measure.op_class_sweep import _supported

    run, skipped = _supported("cpu", ["fp32", "bf16"], None, cpu_flags=["avx2"])
    assert run == ["fp32"] and [s["precision"] for s in skipped] == ["bf16"]
    assert skipped[0]["reason"].startswith("cpu: ") and "AVX512_BF16" in skipped[0]["reason"]
    assert _supported("cpu", ["bf16"], None, cpu_flags=["avx512_bf16"]) == (["bf16"], [])


def test_the_cli_refuses_a_missing_ceilings_file_naming_it(tmp_path):
    missing = tmp_path / "results" / "local" / "ceilings.json"
    cmd = [sys.executable, str(SCRIPT), "--env", "local", "--device", "cpu", "--ceilings",
           str(missing), "--out", str(tmp_path / "eff.json")]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(SCRIPT.parent))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    assert f"--ceilings {missing}: no such file" in proc.stderr
    assert not (tmp_path / "eff.json").exists()


def test_the_sweep_refuses_roofs_of_another_device_naming_the_file(h100_ceilings):
    from dnnroofline.measure.op_class_sweep import sweep_env

    with pytest.raises(InputError, match=r"h100/ceilings.json: roofs of device 'cuda'"):
        sweep_env("h100", "cpu", ["fp32"], h100_ceilings, where="h100/ceilings.json")


def test_a_supported_precision_without_a_compute_roof_is_refused():
    from dnnroofline.measure.op_class_sweep import measure

    roofs = {"compute": {"bf16": 1e11}, "memory": 1e10}
    with pytest.raises(InputError, match=r"x/ceilings.json: no compute roof .* 'fp32'"):
        measure("cpu", ["fp32"], 1, roofs, 10.0, quick=True, roofs_from="x/ceilings.json")


def test_an_op_that_fails_is_left_out_with_its_error_and_the_sweep_goes_on(monkeypatch):
    from dnnroofline.measure import op_class_sweep as efficiency
    from dnnroofline.measure import sweep_ops

    real = sweep_ops.draw_op

    def failing(key, draw, setting, foreach):
        if key == "pooling":
            raise RuntimeError("CUDA out of memory (stand-in)")
        return real(key, draw, setting, foreach)

    monkeypatch.setattr(sweep_ops, "draw_op", failing)
    roofs = {"compute": {"fp32": 1e11}, "memory": 1e10}
    rows, notes = efficiency.time_rows("cpu", ["fp32"], roofs, math.inf, mode="quick",
                                       channels_last=False, foreach=False)  # fmt: skip
    assert "pooling" not in rows["fp32"] and len(rows["fp32"]) == len(TABLE_KEYS) - 1
    failed = [n for n in notes if "pooling: failed" in n]
    assert len(failed) == 3 and all("CUDA out of memory (stand-in)" in n for n in failed)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_table_can_draw_inside_its_devices_window(device):
    """At an env's typical roofs, every table finds ops inside its window (shapes only:
    nothing is built)."""
    from dnnroofline.measure import op_class_sweep as efficiency
    from dnnroofline.measure import sweep_ops

    roofs = {"cpu": (2e11, 3e10), "cuda": (7e14, 3e12)}[device]
    admit = efficiency._admit(*roofs, efficiency.WINDOW_S[device])

    class Shapes:  # a Setting that builds nothing: the drawn op stops at admit
        def __init__(self):
            import torch

            self.torch, self.item, self.half = torch, 2, torch.float16
            self.channels_last = False

        def admit(self, flops, nbytes):
            raise sweep_ops.Rejected("kept") if admit(flops, nbytes) else sweep_ops.Rejected("")

    for key in TABLE_KEYS:
        draw = sweep_ops.Draw(random.Random(key), sweep_ops.RANGES[device])
        kept = 0
        for _ in range(200):
            try:
                sweep_ops.draw_op(key, draw, Shapes(), foreach=device == "cuda")
            except sweep_ops.Rejected as why:
                kept += str(why) == "kept"
        assert kept >= 10, key


class FakeStream:
    """A device queue on two clocks: the host issues calls (``host_s`` each) and the
    device runs them (``kernel_s`` each) in order, after any sleep queued before."""

    def __init__(self, host_s: float, kernel_s: float):
        self.host_s, self.kernel_s = host_s, kernel_s
        self.host = self.device = 0.0

    def sleep(self, cycles: int) -> None:
        self.device = max(self.device, self.host) + cycles / 1e9  # a 1 GHz clock

    def call(self) -> None:
        self.host += self.host_s
        self.device = max(self.device, self.host) + self.kernel_s

    def event(self, **_):
        stream = self

        class Event:
            def record(self):
                self.at = max(stream.device, stream.host)

            def query(self):
                return stream.host >= self.at  # reached already: nothing queued behind it

            def synchronize(self):
                stream.host = max(stream.host, stream.device)

            def elapsed_time(self, end):
                return (end.at - self.at) * 1e3  # ms, as CUDA's

        return Event()


@pytest.mark.parametrize("host_s, kernel_s", [(1e-5, 1e-4), (2e-4, 1e-4)])
def test_a_cuda_row_is_timed_at_the_devices_pace_behind_a_sleep(monkeypatch, host_s, kernel_s):
    """The calls of a repeat are queued behind a sleeping kernel: their CUDA-event time is
    the kernels' own, even where the host issues them slower than they run."""
    import torch

    from dnnroofline.measure import op_class_sweep as efficiency

    stream = FakeStream(host_s, kernel_s)
    monkeypatch.setattr(torch.cuda, "Event", stream.event)
    monkeypatch.setattr(torch.cuda, "_sleep", stream.sleep)
    monkeypatch.setattr(efficiency, "time_repeats", lambda device, fn, **t: ([1e-4], 20))
    seconds, behind = efficiency._device_paced(stream.call, efficiency.TIMING["cuda"])
    cycles_per_call = efficiency.SLEEP_CYCLES_PER_CALL / 1e9
    assert behind == (host_s < cycles_per_call)  # the host queued all 20 within the sleep
    if behind:
        assert seconds == pytest.approx(kernel_s)  # the device's pace
    else:  # the host fell behind: an upper bound, and the sweep notes it
        assert seconds > kernel_s


def test_no_op_is_priced_beyond_its_tables_best_row():
    rows = conv_rows(lambda s: 1.3 if s["kh"] == 1 else 0.4, count=60)
    tables = oct_.load_tables(doc({"conv_fwd": rows}))
    ones = [conv_item(conv(n, 64, 64, 14, 1)) for n in (1, 8, 64, 512)]
    effs, _, _ = tables.efficiencies("fp32", "conv_fwd", ones)
    assert all(e <= 1.3 + 1e-9 for e in effs) and max(effs) > 1.0


def test_the_host_costs_count_ops_as_the_device_dispatches_them(monkeypatch):
    """A CUDA env's chains are counted on fake CUDA tensors (no GPU here): its batch
    norms are cuDNN's, the ops the device really runs."""
    from dnnroofline.estimate import op_inventory as oi
    from dnnroofline.measure import dispatch

    recorded = []
    real = oi.op_inventory

    def keep(*args, **kwargs):
        recorded.append(real(*args, **kwargs))
        return recorded[-1]

    monkeypatch.setattr(oi, "op_inventory", keep)
    chain = dispatch._chain("normalization", 4)
    cpu, cuda = (dispatch._phase_ops(chain, device) for device in ("cpu", "cuda"))
    assert min(cpu.values()) > 0 and min(cuda.values()) > 0
    names = [{op["name"] for op in inv["ops"]} for inv in recorded]
    assert "aten.native_batch_norm.default" in names[0]
    assert "aten.cudnn_batch_norm.default" in names[1] and recorded[1]["step"]["device"] == "cuda"


@pytest.mark.parametrize("backward", [False, True])
def test_a_layer_norm_row_runs_as_autocast_runs_it_and_has_the_inventorys_features(backward):
    """Transformers and ConvNeXt normalize with layer norm (issue 40): the sweep times it
    in float32, as autocast runs it under amp and bf16, over rows of channels, with the
    features the op inventory records for aten.native_layer_norm."""
    import torch

    from dnnroofline.estimate import op_rules
    from dnnroofline.measure import sweep_ops

    s = sweep_ops.Setting(torch, sweep_ops.Pool(torch, "cpu", 2**18), "bf16", False)
    op = sweep_ops.layer_norm_op(s, (2, 64, 4, 4), backward)
    out = op.call()
    assert (op.key, op.phase) == ("normalization", "backward" if backward else "forward")
    assert out[0].shape == (32, 64) and out[0].dtype == torch.float32
    x = torch.zeros(32, 64)
    assert op.shape == op_rules._norm_shape("native_layer_norm", (x, [64])) == {
        "n": 32, "c": 64, "spatial": 1,
    }  # fmt: skip
    per_element = op_rules.NORM_BWD_FLOPS if backward else op_rules.NORM_FWD_FLOPS
    assert op.flops == per_element * 32 * 64
