"""Inputs of the report tests: a small study's config, ledgers and JSONs, and HTML probes."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from dnnroofline.report.sections import all_sections
from dnnroofline.study.config import Study

EVIL = "CUDA out of memory <script>alert(1)</script>"


def make_config(runs: int = 3, envs: dict | None = None) -> dict:
    return {
        "envs": envs or {"local": {"device": "cpu", "threads": 2}},
        "study": {
            "models": ["resnet50", "mobilenet_v2"],
            "precisions": ["fp32"],
            "batch_sizes": [8, 16],
            "runs": runs,
            "warmup_iters": 3,
            "iters": 10,
            "image_size": 224,
            "data": "synthetic",
        },
    }


def study_matrix(config: dict) -> list[dict]:
    """results/study_matrix.json of ``config``, expanded as the rules expand it."""
    study = Study(config, machine_device="cpu", cpu_flags=[])
    return [{**r.record(), "measured_here": r.env in study.measure_envs} for r in study.runs()]


def _row(env, model, bs, run, ips, cv=0.01, status="ok", message=None, wait=0.0):
    step = bs / ips if ips and status == "ok" else None
    return {
        "run_id": f"{env}_{model}_fp32_bs{bs}_run{run}",
        "env": env,
        "model": model,
        "precision": "fp32",
        "batch_size": bs,
        "run": run,
        "status": status,
        "message": message,
        "device": "cpu",
        "threads": 2,
        "images_per_s": ips,
        "step_median_s": step,
        "step_p5_s": step * 0.98 if step else None,
        "step_p95_s": step * 1.05 if step else None,
        "step_cv": cv if status == "ok" else None,
        "data_wait_median_s": wait * step if step else None,
        "wall_s": 5.0,
        "user_s": 9.0,
        "sys_s": 0.5,
        "max_rss_bytes": 2_000_000_000,
        "peak_device_memory_bytes": None,
        "start_time": 1.7e9,
        "end_time": 1.7e9 + 5,
    }


def make_metrics(env: str = "local", scale: float = 1.0) -> pd.DataFrame:
    rows = [
        _row(env, "resnet50", 8, 1, 20.0 * scale),
        _row(env, "resnet50", 8, 2, 21.0 * scale),
        _row(env, "resnet50", 8, 3, 20.5 * scale),
        _row(env, "resnet50", 16, 1, 24.0 * scale),
        _row(env, "resnet50", 16, 2, 24.0 * scale),
        # failed run: its stray images/s must never reach a table
        _row(env, "resnet50", 16, 3, 999.0, status="oom", message=EVIL),
        _row(env, "mobilenet_v2", 8, 1, 50.0 * scale, cv=0.08),  # noisy within the run
        _row(env, "mobilenet_v2", 8, 2, 52.0 * scale, cv=0.02),
        _row(env, "mobilenet_v2", 8, 3, 51.0 * scale, cv=0.02),
        _row(env, "mobilenet_v2", 16, 1, 60.0 * scale),
        _row(env, "mobilenet_v2", 16, 2, 60.0 * scale),
        # mobilenet_v2 bs16 run3 is missing
    ]
    return pd.DataFrame(rows)


def _point(env, model, bs, ai, attained, above=False, ips=None, runs_ok=2):
    peak, bw = 100e9, 10e9
    roof = min(peak, ai * bw)
    return {
        "env": env,
        "model": model,
        "precision": "fp32",
        "batch_size": bs,
        "runs_ok": runs_ok,
        "runs_failed": 0,
        "flop_per_step": ai * 1e9,
        "bytes_per_step": 1e9,
        "ai": ai,
        "ai_source": "analytic",
        "step_median_s": 0.5,
        "step_spread_s": 0.01,
        "images_per_s": ips or 10.0,
        "images_per_s_min": ips or 10.0,
        "images_per_s_max": ips or 10.0,
        "attained_flops": attained,
        "roof_flops": roof,
        "roof_source": "measured",
        "peak_flops": peak,
        "peak_bandwidth": bw,
        "ridge_ai": peak / bw,
        "efficiency": attained / roof,
        "bound": "memory" if ai < peak / bw else "compute",
        "above_roof": above,
    }


def make_points(env: str = "local") -> pd.DataFrame:
    return pd.DataFrame(
        [
            _point(env, "resnet50", 8, 40.0, 62.5e9),  # compute-bound, 62.5%
            _point(env, "resnet50", 16, 42.0, 120e9, above=True),  # above the roof
            _point(env, "mobilenet_v2", 8, 4.0, 10e9),  # memory-bound, roof 40 -> 25%
            _point(env, "mobilenet_v2", 16, 4.5, 30e9),  # memory-bound, roof 45 -> 66.7%
        ]
    )


def make_complexity() -> list[dict]:
    out = []
    for model, ai in (("resnet50", 40.0), ("mobilenet_v2", 4.0)):
        for bs in (8, 16):
            dram = 2e9 * bs / 8
            fwd = ai * dram / 3.0
            by = (
                {
                    "conv": {"forward": fwd * 0.9, "backward": 1.8 * fwd},
                    "linear": {"forward": fwd * 0.1, "backward": 0.2 * fwd},
                }
                if model == "resnet50"
                else {
                    "conv": {"forward": fwd * 0.7, "backward": 1.4 * fwd},
                    "conv_depthwise": {"forward": fwd * 0.3, "backward": 0.6 * fwd},
                }
            )
            out.append(
                {
                    "arch": model,
                    "batch_size": bs,
                    "image_size": 224,
                    "params": 25_557_032 if model == "resnet50" else 3_504_872,
                    "bytes": {
                        "params": 1e8,
                        "grads": 1e8,
                        "optimizer_state": 1e8,
                        "activations": 5e8,
                    },
                    "flops": {
                        "forward": fwd,
                        "backward": 2 * fwd,
                        "optimizer": 1.5e8,
                        "train_step": ai * dram,
                        "by_layer_type": by,
                    },
                    "min_dram_bytes_per_step": dram,
                    "peak_memory_bytes": 3e9,
                    "by_precision": {
                        "fp32": {
                            "activation_bytes": 5e8,
                            "min_dram_bytes_per_step": dram,
                            "peak_memory_bytes": 3e9,
                        },
                        "bf16": {
                            "activation_bytes": 2.5e8,
                            "min_dram_bytes_per_step": dram * 0.6,
                            "peak_memory_bytes": 2e9,
                        },
                    },
                    "method": "per-layer hooks; FMA = 2 FLOPs",
                }
            )
    return out


def make_ceilings(env: str = "local") -> dict:
    return {
        env: {
            "env": env,
            "device": "cpu",
            "device_name": "Test CPU",
            "threads": 2,
            "roofs": [
                {
                    "kind": "compute",
                    "precision": "fp32",
                    "source": "measured",
                    "value": 100e9,
                    "method": "sgemm 4096^3",
                },
                {
                    "kind": "compute",
                    "precision": "fp32",
                    "source": "datasheet",
                    "value": 200e9,
                    "citation": "cores x clock x 32",
                },
                {
                    "kind": "memory",
                    "precision": None,
                    "source": "measured",
                    "value": 10e9,
                    "method": "STREAM triad",
                },
                {
                    "kind": "memory",
                    "precision": None,
                    "source": "datasheet",
                    "value": 20e9,
                    "citation": "2 channels DDR4",
                },
            ],
        }
    }


def make_env_infos(env: str = "local") -> dict:
    return {
        env: {
            "env": env,
            "device": "cpu",
            "date": "2025-01-01T00:00:00",
            "host": "box<1>",
            "os": "Linux",
            "kernel": "6.1",
            "cpu_model": "Test CPU @ 3 GHz",
            "cpu_cores_physical": 8,
            "cpu_cores_logical": 16,
            "cpu_flags": ["avx2", "fma"],
            "ram_bytes": 32_000_000_000,
            "python": "3.11.4",
            "torch": "2.3.0",
            "torchvision": "0.18.0",
            "cuda": None,
            "cudnn": None,
            "driver": None,
            "gpus": [],
            "container": None,
            "cloud_zone": None,
        }
    }


@pytest.fixture
def inputs():
    return {
        "config": make_config(),
        "metrics": make_metrics(),
        "points": make_points(),
        "complexity": make_complexity(),
        "ceilings": make_ceilings(),
        "env_infos": make_env_infos(),
        "expected_runs": study_matrix(make_config()),
    }


@pytest.fixture
def sections(inputs):
    return all_sections(**inputs)


def block(html: str, heading: str) -> str:
    """The text from the <h3> whose text is ``heading`` to the next heading."""
    start = html.index(f"<h3>{heading}</h3>")
    nxt = re.search(r"<h[23]>", html[start + 4 :])
    return html[start : start + 4 + nxt.start()] if nxt else html[start:]


def table_row(html: str, *cells: str) -> str:
    """The <tr> whose first cells are ``cells``."""
    for tr in re.findall(r"<tr[^>]*>.*?</tr>", html, flags=re.S):
        tds = re.findall(r"<td[^>]*>(.*?)</td>", tr, flags=re.S)
        if tds[: len(cells)] == list(cells):
            return tr
    raise AssertionError(f"no row starting with {cells}")


def two_env_inputs(baseline=None):
    envs = {"local": {"device": "cpu", "threads": 2}, "gcp_l4": {"device": "cuda"}}
    cfg = make_config(envs=envs)
    if baseline:
        cfg["report"] = {"baseline_env": baseline}
    metrics = pd.concat([make_metrics("local"), make_metrics("gcp_l4", scale=4.0)])
    points = pd.concat([make_points("local"), make_points("gcp_l4")])
    return cfg, metrics, points


def section_text(html: str, start: str, end: str) -> str:
    return html[html.index(start) : html.index(end)]
