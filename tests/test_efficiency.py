"""Efficiency tables: lookup, fallback, derivation from ceilings, scaling to another GPU,
and the sweep itself (quick sizes, on this CPU)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dnnroofline.errors import InputError
from dnnroofline.model import efficiency_tables as et
from dnnroofline.model import roofline
from dnnroofline.model.op_classes import TABLE_KEYS
from dnnroofline.study import datasheet

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "efficiency.py"
H100_CEILINGS = ROOT / "examples" / "h100" / "results" / "h100" / "ceilings.json"


def row(ideal_s: float, eff: float, what: str = "op") -> dict:
    return {"flops": 0, "bytes": 1, "seconds": ideal_s / eff, "ideal_s": ideal_s,
            "efficiency": eff, "what": what}  # fmt: skip


def doc(tables: dict, precision: str = "fp32") -> dict:
    """A hand-made efficiency document of one precision."""
    return {
        "schema_version": 1,
        "source": "sweep",
        "roofs": {"compute": {precision: 1e11}, "memory": 1e10},
        "dispatch": {"host_s_per_op": 4e-6, "launch_s_per_op": None, "method": "hand-made"},
        "tables": {precision: tables},
    }


# --------------------------------------------------------------------------- lookup


def test_efficiency_interpolates_linearly_in_log_ideal_time_and_clamps_at_the_ends():
    tables = et.load_tables(doc({"gemm": [row(1e-2, 0.6), row(1e-4, 0.2)]}))
    eff, used = tables.efficiency("fp32", "gemm", 1e-3)  # halfway in log time
    assert used == "gemm"
    assert eff == pytest.approx(0.4)
    assert tables.efficiency("fp32", "gemm", 10**-3.5)[0] == pytest.approx(0.3)
    assert tables.efficiency("fp32", "gemm", 1e-9)[0] == pytest.approx(0.2)  # below: clamped
    assert tables.efficiency("fp32", "gemm", 5.0)[0] == pytest.approx(0.6)  # above: clamped


def test_rows_of_one_ideal_time_count_once_at_their_geometric_mean():
    tables = et.load_tables(doc({"elementwise": [row(1e-3, 0.2), row(1e-3, 0.8)]}))
    assert tables.efficiency("fp32", "elementwise", 1e-3)[0] == pytest.approx(0.4)


def test_one_outlying_row_is_outvoted_by_its_neighbours():
    # a microbenchmark slowed 20x by another process between two steady ones
    rows = [row(1e-4, 0.5), row(1e-3, 0.025), row(1e-2, 0.5), row(1e-1, 0.6)]
    tables = et.load_tables(doc({"elementwise": rows}))
    assert tables.efficiency("fp32", "elementwise", 1e-3)[0] == pytest.approx(0.5)
    # at an end, the median of two: their geometric mean
    assert tables.efficiency("fp32", "elementwise", 1e-1)[0] == pytest.approx(math.sqrt(0.3))


def test_a_missing_table_falls_back_along_the_chain_and_says_which_it_used():
    tables = et.load_tables(doc({"elementwise": [row(1e-3, 0.5)], "conv_fwd": [row(1e-3, 0.7)]}))
    assert tables.efficiency("fp32", "gemm", 1e-3) == (pytest.approx(0.7), "conv_fwd")
    # conv_depthwise_bwd -> conv_depthwise_fwd -> elementwise
    assert tables.efficiency("fp32", "conv_depthwise_bwd", 1e-3)[1] == "elementwise"
    assert tables.efficiency("fp32", "normalization", 1e-3)[1] == "elementwise"


def test_no_usable_table_is_an_error_naming_the_file_and_the_chain():
    tables = et.load_tables(doc({"gemm": [row(1e-3, 0.5)]}), where="results/x/efficiency.json")
    with pytest.raises(InputError, match=r"results/x/efficiency.json.*'pooling'.*pooling -> "):
        tables.efficiency("fp32", "pooling", 1e-3)
    with pytest.raises(InputError, match=r"no tables for precision 'bf16'"):
        tables.efficiency("bf16", "gemm", 1e-3)


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
        et.load_tables({**doc({}), **bad}, where="eff.json")


def test_leave_one_out_residuals_predict_each_row_from_the_others():
    rows = [row(1e-4, 0.2, "a"), row(1e-3, 0.4, "b"), row(1e-2, 0.6, "c")]
    tables = et.load_tables(doc({"gemm": rows, "copy": rows[:2]}))
    res = {r["what"]: r for r in et.loo_log_residuals(tables)}
    assert set(res) == {"a", "b", "c"}  # copy has 2 sizes: nothing left to interpolate
    assert res["b"]["log_residual"] == pytest.approx(0.0)  # on the line through a and c
    assert res["a"]["log_residual"] == pytest.approx(math.log(0.4 / 0.2))  # clamped to b
    assert res["c"]["log_residual"] == pytest.approx(math.log(0.4 / 0.6))
    assert {r["key"] for r in res.values()} == {"gemm"}


# --------------------------------------------------------------------------- from ceilings


@pytest.fixture(scope="module")
def h100_ceilings():
    return json.loads(H100_CEILINGS.read_text())


def test_tables_from_h100_ceilings_put_the_roof_setting_gemm_at_efficiency_one(h100_ceilings):
    derived = et.tables_from_ceilings(h100_ceilings, "examples/h100/ceilings.json")
    tables = et.load_tables(derived)
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
        # the lookup smooths each row with its neighbours (a running median): the GEMMs
        # beside the winner are within 5% of it in every precision here
        assert tables.efficiency(p, "gemm", ideal) == (pytest.approx(1.0, abs=0.05), "gemm")
        assert len(gemms) == sum(c["kind"] == "gemm" for c in roof["candidates"])
        assert all(0 < r["efficiency"] <= 1.0 + 1e-12 for r in gemms)


def test_tables_from_h100_ceilings_take_the_memory_tables_from_the_stream_rows(h100_ceilings):
    derived = et.tables_from_ceilings(h100_ceilings)
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
        used = et.load_tables(derived).efficiency(p, "normalization", 1e-4)[1]
        assert used == "elementwise"


def test_scaled_for_gpu_scales_the_h100_memory_roof_to_the_h200s(h100_ceilings):
    derived = et.tables_from_ceilings(h100_ceilings)
    h100, h200 = datasheet.gpu_by_key("h100_sxm5"), datasheet.gpu_by_key("h200_sxm")
    scaled = et.scaled_for_gpu(derived, h100, h200)
    assert scaled["roofs"]["memory"] == pytest.approx(derived["roofs"]["memory"] * 4800 / 3350)
    assert scaled["roofs"]["compute"] == pytest.approx(derived["roofs"]["compute"])  # same peaks
    assert scaled["device_name"] == h200.name
    assert any("scaled from" in n for n in scaled["notes"])
    before = derived["tables"]["bf16"]["elementwise"][0]
    after = scaled["tables"]["bf16"]["elementwise"][0]
    assert after["efficiency"] == before["efficiency"]
    assert after["ideal_s"] == pytest.approx(before["ideal_s"] * 3350 / 4800)
    assert derived["roofs"]["memory"] == et.tables_from_ceilings(h100_ceilings)["roofs"]["memory"]


# --------------------------------------------------------------------------- the sweep


@pytest.fixture(scope="module")
def quick_sweep(tmp_path_factory):
    """The quick ceilings of this CPU, then the efficiency CLI in quick mode on them."""
    from dnnroofline.measure.ceilings import build_ceilings

    tmp = tmp_path_factory.mktemp("eff")
    os.environ["OMP_NUM_THREADS"] = "1"
    ceilings = build_ceilings("local", "cpu", ["fp32"], quick=True, expect_threads=1)
    (tmp / "ceilings.json").write_text(json.dumps(ceilings))
    out = tmp / "results" / "local" / "efficiency.json"
    cmd = [sys.executable, str(SCRIPT), "--env", "local", "--device", "cpu", "--precisions",
           "fp32", "bf16", "--ceilings", str(tmp / "ceilings.json"), "--quick",
           "--expect-threads", "1", "--out", str(out)]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(SCRIPT.parent))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), ceilings


def test_the_quick_sweep_writes_every_table_as_shares_of_the_measured_roofs(quick_sweep):
    eff, ceilings = quick_sweep
    assert eff["source"] == "sweep" and eff["env"] == "local" and eff["device"] == "cpu"
    roofs = roofline.parse_roofs(ceilings)
    compute = roofline.select_roof(roofs, "compute", "fp32").value
    memory = roofline.select_roof(roofs, "memory").value
    assert eff["roofs"] == {"compute": {"fp32": compute}, "memory": memory}
    assert set(eff["tables"]["fp32"]) == set(TABLE_KEYS)
    host = eff["dispatch"]["host_s_per_op"]
    assert host > 0 and eff["dispatch"]["launch_s_per_op"] is None
    for rows in eff["tables"]["fp32"].values():
        assert rows == sorted(rows, key=lambda r: r["ideal_s"])
        for r in rows:
            ideal = max(r["flops"] / compute, r["bytes"] / memory)
            assert r["ideal_s"] == pytest.approx(ideal)
            assert r["seconds"] > 0 and r["efficiency"] == pytest.approx(ideal / r["seconds"])
            assert math.isfinite(r["efficiency"]) and r["efficiency"] > 0
    et.load_tables(eff)  # the model reads it


def test_the_quick_sweep_counts_flops_and_bytes_as_the_inventory_does(quick_sweep):
    rows = {r["what"]: r for t in quick_sweep[0]["tables"]["fp32"].values() for r in t}
    gemm = rows["gemm 8x500x256 (MxNxK)"]
    assert gemm["flops"] == 2 * 8 * 500 * 256
    assert gemm["bytes"] == 4 * (8 * 256 + 256 * 500 + 8 * 500)
    stem = 2 * 2 * 16 * 16 * 16 * 3 * 7 * 7  # n, c_out, 16x16 out, c_in, 7x7
    assert rows["conv 7x7/2 n2 c3->16 32x32 fwd"]["flops"] == stem
    # the first layer's backward computes the weight gradient only: output_mask of a step
    assert rows["conv 7x7/2 n2 c3->16 32x32 bwd (weight grad only)"]["flops"] == stem
    assert rows["conv 3x3/1 n2 c16->16 16x16 bwd (input and weight grads)"]["flops"] == (
        2 * rows["conv 3x3/1 n2 c16->16 16x16 fwd"]["flops"]
    )
    numel = 2 * 32 * 32 * 32
    assert rows["add_ 2x32x32x32"]["bytes"] == 3 * 4 * numel  # in place: target read + written
    assert rows["relu 2x32x32x32"]["bytes"] == 2 * 4 * numel
    assert rows["batch norm 2x32x32x32 train bwd"]["flops"] == 9 * numel
    assert rows["max pool 3x3/2 2x32x32x32 bwd"]["flops"] == numel // 4  # 1 per output


def test_the_quick_sweep_skips_a_precision_the_cpu_does_not_run_with_its_reason(quick_sweep):
    from dnnroofline.measure.envinfo import cpu_info
    from dnnroofline.study.precisions import unsupported_reason

    eff, _ = quick_sweep
    why = unsupported_reason("cpu", "bf16", cpu_flags=cpu_info()["flags_all"])
    skipped = {s["precision"]: s["reason"] for s in eff["skipped"]}
    if why:  # no roof in the quick ceilings either: the CPU lacks native bf16
        assert skipped == {"bf16": f"cpu: {why}"} and "bf16" not in eff["tables"]
    else:
        pytest.skip("this CPU runs bf16: the quick ceilings have no bf16 roof to sweep")


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
    from dnnroofline.measure.efficiency import sweep_env

    with pytest.raises(InputError, match=r"h100/ceilings.json: roofs of device 'cuda'"):
        sweep_env("h100", "cpu", ["fp32"], h100_ceilings, where="h100/ceilings.json")


def test_a_supported_precision_without_a_compute_roof_is_refused():
    from dnnroofline.measure.efficiency import run_sweep

    roofs = {"compute": {"bf16": 1e11}, "memory": 1e10}
    with pytest.raises(InputError, match=r"x/ceilings.json: no compute roof .* 'fp32'"):
        run_sweep("cpu", ["fp32"], 1, roofs, 10.0, quick=True, roofs_from="x/ceilings.json")


@pytest.mark.parametrize("device", ["cpu", "cuda", "quick"])
def test_every_device_sweeps_every_table_at_two_sizes_at_least(device):
    from dnnroofline.measure.efficiency import SIZES, _plan, sweep_specs

    specs = sweep_specs(SIZES[device])
    assert set(specs) == set(TABLE_KEYS)
    for key, ops in specs.items():
        assert len({json.dumps(p, sort_keys=True) for _, p in ops}) >= 2, key
    plan = _plan(["fp32", "bf16"], specs)
    assert len(plan) == 2 * sum(len(v) for v in specs.values())
    first = plan[: 2 * len(TABLE_KEYS)]  # a budget cut keeps every table's first size
    assert {(p, key) for p, key, _, _ in first} == {
        (p, k) for p in ("fp32", "bf16") for k in TABLE_KEYS
    }


def test_an_op_that_fails_is_left_out_with_its_error_and_the_sweep_goes_on(monkeypatch):
    from dnnroofline.measure import efficiency

    real = efficiency.build_op

    def failing(setting, op, params):
        if op == "maxpool_backward":
            raise RuntimeError("CUDA out of memory (stand-in)")
        return real(setting, op, params)

    monkeypatch.setattr(efficiency, "build_op", failing)
    roofs = {"compute": {"fp32": 1e11}, "memory": 1e10}
    eff = efficiency.run_sweep("cpu", ["fp32"], 1, roofs, 30.0, quick=True)
    pooling = [r["what"] for r in eff["tables"]["fp32"]["pooling"]]
    assert pooling and all(w.endswith("fwd") for w in pooling)
    failed = [n for n in eff["notes"] if "maxpool_backward" in n]
    assert len(failed) == 2 and all("CUDA out of memory (stand-in)" in n for n in failed)
    assert set(eff["tables"]["fp32"]) == set(TABLE_KEYS)
