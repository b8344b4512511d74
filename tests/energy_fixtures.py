"""Hand-written energy inputs (docs/contracts.md, issue 40 item 4): env ``gpu`` with fitted
costs (1 pJ/FLOP fp32, 0.25 pJ/FLOP fp16, 10 pJ/B) and two points with joules, env
``cpu`` whose energy was unavailable (RAPL readable by root only)."""

from __future__ import annotations

import pandas as pd

RAPL_REASON = "RAPL energy_uj is readable by root only (CVE-2020-8694)"
COSTS_REASON = "fewer kernels than costs"


def gpu_energy() -> dict:
    kernels = [
        {"kind": "idle", "precision": None, "method": "sleep", "flop": 0, "bytes": 0,
         "seconds": 2.0, "calls": 1, "joules": 100.0, "mean_power_w": 50.0},
        {"kind": "gemm", "precision": "fp32", "method": "torch.mm 8192", "flop": 1e14,
         "bytes": 8.05e8, "seconds": 2.0, "calls": 90, "joules": 200.0, "mean_power_w": 100.0},
        {"kind": "copy", "precision": None, "method": "tensor copy 1 GiB", "flop": 0,
         "bytes": 4e12, "seconds": 2.0, "calls": 500, "joules": 140.0, "mean_power_w": 70.0},
    ]  # fmt: skip
    return {
        "available": True,
        "reason": None,
        "source": "nvml",
        "window_s": 2.0,
        "kernels": kernels,
        "costs": {
            "pj_per_flop": {"fp32": 1.0, "fp16": 0.25},
            "pj_per_byte": 10.0,
            "static_power_w": 50.0,
            "method": "nnls over 3 kernels",
            "max_residual_pct": 3.25,
        },
        "costs_reason": None,
    }


def ceilings() -> dict:
    unavailable = {"available": False, "reason": RAPL_REASON, "source": None, "kernels": [],
                   "costs": None, "costs_reason": None}  # fmt: skip
    return {
        "gpu": {"env": "gpu", "device": "cuda", "roofs": [], "energy": gpu_energy()},
        "cpu": {"env": "cpu", "device": "cpu", "roofs": [], "energy": unavailable},
    }


def _point(env, bs, ai, flop):
    return {"env": env, "model": "resnet18", "precision": "fp32", "batch_size": bs,
            "runs_ok": 3, "runs_failed": 0, "flop_per_step": flop, "bytes_per_step": flop / ai,
            "ai": ai, "attained_flops": flop / 0.1, "images_per_s": bs / 0.1}  # fmt: skip


def points() -> pd.DataFrame:
    return pd.DataFrame(
        [_point("gpu", 8, 20.0, 2e12), _point("gpu", 16, 40.0, 5e12), _point("cpu", 8, 5.0, 1e11)]
    )


def _run(env, bs, n, joules_per_step=None, status="ok", source="nvml"):
    step = 0.1
    return {
        "run_id": f"{env}_resnet18_fp32_bs{bs}_run{n}", "env": env, "model": "resnet18",
        "precision": "fp32", "batch_size": bs, "run": n, "status": status,
        "images_per_s": bs / step if status == "ok" else None,
        "step_median_s": step if status == "ok" else None,
        "joules_per_step": joules_per_step,
        "joules_per_image": joules_per_step / bs if joules_per_step else None,
        "mean_power_w": joules_per_step / step if joules_per_step else None,
        "peak_power_w": 1.5 * joules_per_step / step if joules_per_step else None,
        "energy_source": source,
    }  # fmt: skip


def metrics() -> pd.DataFrame:
    """gpu bs8: 4, 5 and 6 J per step (median 5); bs16: 8 and 12 J (median 10), and a
    failed run whose joules never count; cpu: unavailable."""
    rows = [
        _run("gpu", 8, 1, 4.0), _run("gpu", 8, 2, 5.0), _run("gpu", 8, 3, 6.0),
        _run("gpu", 16, 1, 8.0), _run("gpu", 16, 2, 12.0),
        _run("gpu", 16, 3, 1000.0, status="oom"),
        _run("cpu", 8, 1, source="unavailable"), _run("cpu", 8, 2, source="unavailable"),
    ]  # fmt: skip
    return pd.DataFrame(rows)


def run_json(row: dict) -> dict:
    """A run JSON's identity and ``energy`` record for a metrics row."""
    if row["energy_source"] == "unavailable":
        energy = {"available": False, "reason": RAPL_REASON, "source": "rapl", "joules": None}
    else:
        j = row["joules_per_step"]
        energy = {
            "available": True, "reason": None, "source": "nvml",
            "counter": "nvmlDeviceGetTotalEnergyConsumption", "joules": 30 * j,
            "seconds": 3.0, "mean_power_w": row["mean_power_w"], "domains": {},
            "joules_per_step": j, "joules_per_image": row["joules_per_image"],
            "peak_power_w": row["peak_power_w"],
            "sm_clock_mhz": 1980.0 if row["batch_size"] == 8 else 1755.0,
            "mem_clock_mhz": 3201.0,
        }  # fmt: skip
    return {"run_id": row["run_id"], "env": row["env"], "status": row["status"], "energy": energy}


def runs() -> list[dict]:
    return [run_json(r) for r in metrics().to_dict("records")]
