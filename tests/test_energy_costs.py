"""The ceilings' energy (issue 40, item 4): costs fitted from metered kernels, the
metered kernels themselves with a fake meter, and the record where there is no counter."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dnnroofline.measure import ceilings as cl
from dnnroofline.measure import energy_kernels as ek
from dnnroofline.measure.ceiling_kernels import gemm_flop
from dnnroofline.measure.energy import POWERCAP_ENV, RaplMeter, UnavailableMeter, energy_record
from dnnroofline.measure.energy_costs import fit_energy_costs, gemm_min_bytes

#: Known costs of the synthetic kernels: pJ/FLOP, pJ/B, static W.
EPS = {"fp32": 5.0, "bf16": 0.4}
EPS_MEM = 40.0
STATIC_W = 80.0
NO_PERF = "dnnroofline-test-no-such-perf"


def kernel(kind, seconds, flop=0.0, nbytes=0.0, precision=None, noise=1.0):
    """A kernel whose joules follow the known costs (times ``noise``)."""
    joules = STATIC_W * seconds + EPS_MEM * 1e-12 * nbytes
    if precision:
        joules += EPS[precision] * 1e-12 * flop
    joules *= noise
    return {"kind": kind, "precision": precision, "method": "synthetic", "flop": flop,
            "bytes": nbytes, "seconds": seconds, "calls": 1, "joules": joules,
            "mean_power_w": joules / seconds}  # fmt: skip


def synthetic_kernels(noise=lambda: 1.0, windows=1):
    """An H200-like machine: fp32 GEMMs at 50 TFLOP/s, bf16 at 700, a copy at 4 TB/s."""
    out = []
    for _ in range(windows):
        out += [
            kernel("idle", 1.0, noise=noise()),
            kernel("gemm", 1.1, 5.5e13, gemm_min_bytes(8192, 8192, 8192, 4) * 100, "fp32", noise()),
            kernel("gemm", 1.0, 7e14, gemm_min_bytes(8192, 8192, 8192, 2) * 1000, "bf16", noise()),
            kernel("copy", 1.0, 0.0, 4e12, noise=noise()),
        ]
    return out


def test_gemm_min_bytes_reads_each_operand_and_writes_the_result_once():
    assert gemm_min_bytes(2, 3, 4, 2) == (2 * 4 + 4 * 3 + 2 * 3) * 2
    assert gemm_min_bytes(8192, 8192, 8192, 4) == 3 * 8192**2 * 4


def test_fit_recovers_known_costs():
    costs, why = fit_energy_costs(synthetic_kernels(), ["fp32", "bf16"])
    assert why is None
    assert costs["pj_per_flop"] == pytest.approx(EPS, rel=1e-6)
    assert costs["pj_per_byte"] == pytest.approx(EPS_MEM, rel=1e-6)
    assert costs["static_power_w"] == pytest.approx(STATIC_W, rel=1e-6)
    assert costs["max_residual_pct"] == pytest.approx(0.0, abs=1e-6)
    assert "scipy.optimize.nnls" in costs["method"] and "4 kernels" in costs["method"]
    assert "1 gemm (fp32)" not in costs["method"] and "2 gemm (fp32, bf16)" in costs["method"]


def test_fit_with_noise_stays_near_the_costs_and_reports_its_residual():
    rng = np.random.default_rng(0)
    kernels = synthetic_kernels(noise=lambda: 1.0 + rng.normal(0, 0.01), windows=3)
    costs, why = fit_energy_costs(kernels)
    assert why is None
    assert costs["pj_per_flop"] == pytest.approx(EPS, rel=0.08)
    assert costs["pj_per_byte"] == pytest.approx(EPS_MEM, rel=0.08)
    assert costs["static_power_w"] == pytest.approx(STATIC_W, rel=0.05)
    fitted = [
        costs["static_power_w"] * k["seconds"]
        + costs["pj_per_byte"] * 1e-12 * k["bytes"]
        + costs["pj_per_flop"].get(k["precision"], 0.0) * 1e-12 * k["flop"]
        for k in kernels
    ]
    worst = max(
        abs(f - k["joules"]) / k["joules"] * 100 for f, k in zip(fitted, kernels, strict=True)
    )
    assert costs["max_residual_pct"] == pytest.approx(worst, rel=1e-6)
    assert 0.1 < costs["max_residual_pct"] < 5


def test_fit_never_returns_a_negative_cost():
    # a copy drawing less than idle: least squares would give a negative pJ/B
    kernels = synthetic_kernels()
    kernels[-1] = dict(kernels[-1], joules=0.9 * STATIC_W)
    costs, why = fit_energy_costs(kernels)
    assert why is None and costs["pj_per_byte"] == 0.0
    assert min(costs["pj_per_flop"].values()) >= 0 and costs["static_power_w"] > 0
    assert costs["max_residual_pct"] > 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda ks: [], "no metered kernels"),
        (lambda ks: ks[1:], "no idle window: the static power cannot be told"),
        (lambda ks: ks[:-1], "no copy kernel: the cost per byte cannot be told"),
        (lambda ks: [ks[0], ks[1], ks[3]], "no GEMM for precision(s) bf16"),
        (lambda ks: [ks[0], ks[3]], "no GEMM for precision(s) fp32, bf16"),
        (
            lambda ks: [*ks[:3], dict(ks[3], joules=None, reason="NVML read failed")],
            "kernel 3 (copy): joules None are not positive: NVML read failed",
        ),
        (lambda ks: [dict(ks[0], seconds=0.0), *ks[1:]], "kernel 0 (idle): seconds 0.0"),
        (lambda ks: [*ks[:2], dict(ks[2], joules=-1.0), ks[3]], "kernel 2 (gemm bf16): joules"),
        (lambda ks: [*ks, dict(ks[0], kind="conv")], "kind 'conv' is none of"),
    ],
)
def test_fit_refuses_what_cannot_determine_the_costs(change, reason):
    costs, why = fit_energy_costs(change(synthetic_kernels()), ["fp32", "bf16"])
    assert costs is None and reason in why


def test_fit_refuses_a_rank_deficient_set():
    # a copy that moves no bytes: only the GEMM's bytes are left, tied to its FLOPs
    idle, gemm, _, copy = synthetic_kernels()
    costs, why = fit_energy_costs([idle, gemm, dict(copy, bytes=0.0)])
    assert costs is None
    assert "3 kernels of rank 2 cannot determine 3 unknowns (pJ/FLOP for fp32" in why


# ----------------------------------------------------------------------------- the kernels


class PowerMeter:
    """A meter drawing a fixed power: joules = power x its own measured seconds."""

    source = "fake"

    def __init__(self, power_w: float, log: list):
        self.power_w = power_w
        self.log = log

    def start(self) -> bool:
        self.t0 = time.monotonic()
        return True

    def stop(self) -> dict:
        seconds = time.monotonic() - self.t0
        self.log.append(seconds)
        return energy_record("fake", "fake counter", self.power_w * seconds, seconds)


def roof_with_gemm(precision, m, n, k, set_roof=True):
    gemm = {"kind": "gemm", "params": {"m": m, "n": n, "k": k}, "status": "ok",
            "flops_best": 2e9, "set_roof": set_roof}  # fmt: skip
    conv = {"kind": "conv", "params": {}, "status": "ok", "flops_best": 3e9,
            "set_roof": not set_roof}  # fmt: skip
    return {"kind": "compute", "precision": precision, "source": "measured",
            "candidates": [gemm, conv]}  # fmt: skip


def test_gemm_shape_is_the_roofs_gemm_else_a_fixed_square():
    roofs = [roof_with_gemm("fp32", 64, 32, 48), roof_with_gemm("bf16", 96, 16, 8, False)]
    shape, why = ek.gemm_shape("cpu", "fp32", roofs)
    assert shape == {"m": 64, "n": 32, "k": 48, "library": None} and "set the measured" in why
    shape, why = ek.gemm_shape("cpu", "bf16", roofs)
    assert (shape["m"], shape["n"], shape["k"]) == (96, 16, 8) and "not a GEMM set it" in why
    shape, why = ek.gemm_shape("cuda", "tf32", roofs)
    assert shape == {"m": 8192, "n": 8192, "k": 8192, "library": None}
    assert why == "a fixed 8192^3 square (no measured GEMM for tf32)"
    assert ek.gemm_shape("cpu", "tf32", roofs, quick=True)[0]["n"] == ek.QUICK_GEMM_N


def test_measure_energy_meters_each_kernel_over_its_window():
    windows: list[float] = []
    window = 0.02
    record = ek.measure_energy(
        "cpu",
        ["fp32", "bf16"],
        [roof_with_gemm("fp32", 64, 32, 48)],
        lambda: PowerMeter(50.0, windows),
        window,
        quick=True,
    )
    assert record["available"] is True and record["reason"] is None
    assert record["source"] == "fake" and record["window_s"] == window
    kernels = record["kernels"]
    assert [(k["kind"], k["precision"]) for k in kernels] == [
        ("idle", None), ("gemm", "fp32"), ("gemm", "bf16"), ("copy", None)]  # fmt: skip
    assert len(windows) == 1 + len(kernels)  # the probe, then one fresh meter per window
    for k in kernels:
        assert set(k) == {"kind", "precision", "method", "flop", "bytes", "seconds", "calls",
                          "joules", "mean_power_w"}  # fmt: skip
        assert k["seconds"] >= window
        assert k["joules"] == pytest.approx(50.0 * k["seconds"])
        assert k["mean_power_w"] == pytest.approx(50.0)
    idle, fp32, bf16, copy = kernels
    assert (idle["flop"], idle["bytes"], idle["calls"]) == (0, 0, 0)
    assert fp32["calls"] >= 1 and fp32["flop"] == gemm_flop(64, 32, 48) * fp32["calls"]
    assert fp32["bytes"] == gemm_min_bytes(64, 32, 48, 4) * fp32["calls"]
    assert fp32["method"].startswith("torch.matmul 64x32x48 (MxNxK) float32 through")
    assert "the GEMM that set the measured compute roof" in fp32["method"]
    n = ek.QUICK_GEMM_N
    assert bf16["flop"] == gemm_flop(n, n, n) * bf16["calls"] and "bfloat16" in bf16["method"]
    assert bf16["bytes"] == gemm_min_bytes(n, n, n, 2) * bf16["calls"]
    assert copy["calls"] >= 1 and copy["bytes"] == 2 * 4 * 1024**2 * copy["calls"]
    assert "copy" in copy["method"] and "float64" in copy["method"]
    # a fixed power: all static, nothing per FLOP or per byte
    costs = record["costs"]
    assert record["costs_reason"] is None
    assert costs["static_power_w"] == pytest.approx(50.0, rel=1e-6)
    assert costs["pj_per_flop"]["fp32"] == pytest.approx(0.0, abs=1e-6)
    assert costs["pj_per_flop"]["bf16"] == pytest.approx(0.0, abs=1e-6)
    assert costs["pj_per_byte"] == pytest.approx(0.0, abs=1e-6)
    assert costs["max_residual_pct"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    ("factory", "source", "reason"),
    [
        (lambda: UnavailableMeter("no energy counter is read on backend 'mps'"), None,
         "no energy counter is read on backend 'mps'"),
        (lambda: RaplMeter("/nonexistent/powercap"), "rapl",
         "/nonexistent/powercap does not exist (no powercap driver"),
    ],
)  # fmt: skip
def test_without_a_counter_no_kernel_runs(factory, source, reason):
    made = []

    def counted():
        made.append(1)
        return factory()

    t0 = time.monotonic()
    record = ek.measure_energy("cpu", ["fp32"], [], counted, 5.0, quick=True)
    assert time.monotonic() - t0 < 5.0  # the 5 s window never ran (a window spans its length)
    assert made == [1]
    assert record["available"] is False and record["source"] == source
    assert reason in record["reason"] and record["kernels"] == []
    assert record["costs"] is None
    assert record["costs_reason"] == f"no energy counter: {record['reason']}"


def test_a_window_the_meter_lost_leaves_no_costs_and_says_which():
    windows: list[float] = []

    class LosesTheCopy(PowerMeter):
        def stop(self):
            record = super().stop()
            if len(self.log) == 4:  # probe, idle, GEMM, then the copy
                return {"available": False, "reason": "counter read failed", "joules": None}
            return record

    record = ek.measure_energy(
        "cpu", ["fp32"], [], lambda: LosesTheCopy(30.0, windows), 0.01, quick=True
    )
    copy = record["kernels"][-1]
    assert copy["joules"] is None and copy["reason"] == "counter read failed"
    assert record["available"] is True and record["costs"] is None
    assert record["costs_reason"] == (
        "kernel 2 (copy): joules None are not positive: counter read failed"
    )


# ----------------------------------------------------------------------------- ceilings.json


def fake_roofs(monkeypatch):
    def fake_compute(device, precision, **_kw):
        return {"kind": "compute", "precision": precision, "source": "measured", "value": 1e9}

    memory = {"kind": "memory", "precision": None, "source": "measured", "value": 1e10}
    monkeypatch.setattr(cl, "measure_compute", fake_compute)
    monkeypatch.setattr(cl, "measure_memory", lambda *_a, **_kw: [memory])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_ceilings_record_energy_unavailable_where_there_is_no_counter(tmp_path, monkeypatch):
    fake_roofs(monkeypatch)
    root = tmp_path / "no-powercap"
    monkeypatch.setenv(POWERCAP_ENV, str(root))
    c = cl.build_ceilings("local", "cpu", ["fp32"], quick=True, perf_executable=NO_PERF)
    energy = c["energy"]
    assert energy["available"] is False and energy["source"] == "rapl"
    assert energy["reason"].startswith(f"{root} does not exist")
    assert energy["kernels"] == [] and energy["costs"] is None
    assert energy["window_s"] == ek.QUICK_WINDOW_S
    assert f"energy costs not fitted: no energy counter: {energy['reason']}" in c["notes"]


def test_ceilings_meter_their_kernels_where_rapl_is_readable(tmp_path, monkeypatch):
    """A readable fake RAPL tree whose counter never moves: the kernels run and are
    metered, and the fit refuses zero joules, naming the kernel."""
    fake_roofs(monkeypatch)
    zone = tmp_path / "powercap" / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "energy_uj").write_text("1000\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    monkeypatch.setenv(POWERCAP_ENV, str(tmp_path / "powercap"))
    c = cl.build_ceilings("local", "cpu", ["fp32"], quick=True, perf_executable=NO_PERF)
    energy = c["energy"]
    assert energy["available"] is True and energy["source"] == "rapl"
    assert [k["kind"] for k in energy["kernels"]] == ["idle", "gemm", "copy"]
    n = ek.QUICK_GEMM_N
    assert f"torch.matmul {n}x{n}x{n}" in energy["kernels"][1]["method"]  # no GEMM candidate
    assert all(k["joules"] == 0 and k["seconds"] >= ek.QUICK_WINDOW_S for k in energy["kernels"])
    assert energy["costs"] is None
    assert energy["costs_reason"] == "kernel 0 (idle): joules 0.0 are not positive"
