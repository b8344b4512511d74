"""Aggregation: run JSONs -> metrics.csv -> roofline_points.csv, and their CLIs."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dnnroofline.aggregate.inputs import key_by_identity, key_ceilings, key_complexity
from dnnroofline.aggregate.metrics import METRICS_COLUMNS, METRICS_DTYPES, metrics_frame
from dnnroofline.aggregate.points import POINTS_COLUMNS, plottable_points, roofline_points_frame
from dnnroofline.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "workflow" / "scripts"


# ----------------------------------------------------------------------------- builders


def make_run(env, model, precision, batch, n, status="ok", median=0.1, message=None):
    run_id = f"{env}_{model}_{precision}_bs{batch}_run{n}"
    run = {
        "schema_version": 1,
        "status": status,
        "message": message,
        "run_id": run_id,
        "env": env,
        "config": {
            "arch": model,
            "batch_size": batch,
            "image_size": 224,
            "precision": precision,
            "backend": "auto",
            "device": "cpu",
            "threads": 2,
        },
        "start_time": 1_700_000_000.0 + n,
        "end_time": 1_700_000_010.0 + n,
        "device_name": "Test CPU",
    }
    if status == "ok":
        run.update(
            step_time_s={
                "median": median,
                "mean": median,
                "p5": median * 0.9,
                "p95": median * 1.1,
                "cv": 0.02,
                "all": [median] * 3,
            },
            data_wait_s={"median": 0.001, "total": 0.003, "all": [0.001] * 3},
            images_per_s=batch / median,
            wall_s=2.5,
            user_s=4.0,
            sys_s=0.5,
            max_rss_bytes=123_456_789,
            peak_device_memory_bytes=None,
        )
    else:
        run.update(
            step_time_s=None,
            data_wait_s=None,
            images_per_s=None,
            wall_s=None,
            user_s=None,
            sys_s=None,
            max_rss_bytes=None,
            peak_device_memory_bytes=None,
        )
    return run


def make_complexity(model, batch, train_step=1.1e10, min_dram=1e9, by_precision=None):
    return {
        "arch": model,
        "batch_size": batch,
        "image_size": 224,
        "params": 11_000_000,
        "flops": {
            "forward": train_step / 3,
            "backward": 2 * train_step / 3,
            "optimizer": 0,
            "train_step": train_step,
            "by_layer_type": {},
        },
        "min_dram_bytes_per_step": min_dram,
        "by_precision": by_precision
        if by_precision is not None
        else {"fp32": {"min_dram_bytes_per_step": min_dram}},
    }


def roof(kind, precision, source, value):
    return {"kind": kind, "precision": precision, "source": source, "value": value}


def make_ceilings(env, roofs=None):
    if roofs is None:
        roofs = [
            roof("compute", "fp32", "measured", 2e11),
            roof("compute", "fp32", "datasheet", 3e11),
            roof("memory", None, "measured", 1e10),
            roof("memory", None, "datasheet", 2e10),
        ]
    return {"env": env, "device": "cpu", "device_name": "Test CPU", "threads": 2, "roofs": roofs}


def contract_columns(title: str) -> list[str]:
    """The column list documented under ``## `title` `` in docs/contracts.md."""
    text = (ROOT / "docs" / "contracts.md").read_text()
    m = re.search(r"## `" + re.escape(title) + r"`[^\n]*\n`([^`]*)`", text)
    assert m, f"{title} not documented in contracts.md"
    cols = re.sub(r"\([^)]*\)", "", m.group(1))
    return [c.strip() for c in cols.split(",") if c.strip()]


# three ok repeats (medians 0.10, 0.12, 0.11) and one OOM for local/resnet18/fp32/bs16
LOCAL_RUNS = [
    make_run("local", "resnet18", "fp32", 16, 2, median=0.12),
    make_run("local", "resnet18", "fp32", 16, 1, median=0.10),
    make_run("local", "resnet18", "fp32", 16, 4, status="oom", message="CUDA out of memory"),
    make_run("local", "resnet18", "fp32", 16, 3, median=0.11),
]


# ----------------------------------------------------------------------------- metrics


def test_columns_match_the_documented_contract():
    assert contract_columns("results/metrics.csv") == METRICS_COLUMNS
    assert contract_columns("results/roofline_points.csv") == POINTS_COLUMNS


def test_metrics_frame_one_row_per_run_failed_included_with_nan_timings():
    df = metrics_frame(LOCAL_RUNS)
    assert list(df.columns) == METRICS_COLUMNS
    assert list(df["run"]) == [1, 2, 3, 4]
    oom = df[df["status"] == "oom"].iloc[0]
    assert oom["run_id"] == "local_resnet18_fp32_bs16_run4"
    assert oom["message"] == "CUDA out of memory"
    for col in ["images_per_s", "step_median_s", "step_p5_s", "step_p95_s", "step_cv"]:
        assert math.isnan(oom[col])
    ok = df[df["run"] == 1].iloc[0]
    assert ok["step_median_s"] == 0.10
    assert ok["images_per_s"] == pytest.approx(160.0)
    assert ok["step_p95_s"] == pytest.approx(0.11)
    assert ok["data_wait_median_s"] == 0.001
    assert ok["max_rss_bytes"] == 123_456_789
    assert ok["device"] == "cpu"
    assert ok["threads"] == 2
    assert pd.isna(ok["peak_device_memory_bytes"])


def test_failed_run_timings_forced_to_nan_even_if_present():
    run = make_run("local", "resnet18", "fp32", 16, 1)
    run.update(status="error", message="boom")
    df = metrics_frame([run])
    assert math.isnan(df.loc[0, "step_median_s"])
    assert math.isnan(df.loc[0, "images_per_s"])
    assert df.loc[0, "wall_s"] == 2.5  # how long it ran before failing is kept


ENERGY = {
    "available": True,
    "reason": None,
    "source": "nvml",
    "joules": 120.0,
    "seconds": 0.2,
    "mean_power_w": 600.0,
    "joules_per_step": 40.0,
    "joules_per_image": 2.5,
    "peak_power_w": 690.0,
}


def test_metrics_carry_the_runs_energy_its_source_and_why_not():
    measured = make_run("local", "resnet18", "fp32", 16, 1)
    measured["energy"] = ENERGY
    off = make_run("local", "resnet18", "fp32", 16, 2)
    off["energy"] = {"available": False, "reason": "no powercap", "source": None, "joules": None}
    before = make_run("local", "resnet18", "fp32", 16, 3)  # recorded before energy was
    failed = make_run("local", "resnet18", "fp32", 16, 4)
    failed.update(status="error", message="boom", energy=ENERGY)
    df = metrics_frame([measured, off, before, failed]).set_index("run")
    energy_cols = ["joules_per_step", "joules_per_image", "mean_power_w", "peak_power_w"]
    assert (
        METRICS_COLUMNS.index("joules_per_step") == METRICS_COLUMNS.index("data_wait_median_s") + 1
    )
    assert list(df.loc[1, energy_cols]) == [40.0, 2.5, 600.0, 690.0]
    assert list(df["energy_source"]) == ["nvml", "unavailable", "", "nvml"]
    for run in (2, 3, 4):  # unavailable, not recorded, failed: NaN
        assert df.loc[run, energy_cols].isna().all()
    assert df[energy_cols].dtypes.eq("float64").all()


@pytest.mark.parametrize(
    ("energy", "pattern"),
    [
        ([1.0], r"run #0: energy must be an object or null"),
        ({"available": "yes"}, r"run #0: energy\.available must be true or false"),
        ({"available": True, "source": None}, r"run #0: energy\.source must name the counter"),
        (
            dict(ENERGY, joules_per_image="2.5"),
            r"run #0: energy\.joules_per_image must be a number",
        ),
    ],
)
def test_bad_energy_names_the_key(energy, pattern):
    run = make_run("local", "resnet18", "fp32", 16, 1)
    run["energy"] = energy
    with pytest.raises(InputError, match=pattern):
        metrics_frame([run])


def test_metrics_sorted_by_env_model_precision_batch_run():
    runs = [
        make_run("local", "resnet18", "fp32", 16, 1),
        make_run("gcp_l4", "resnet18", "fp32", 8, 2),
        make_run("local", "mobilenet_v2", "fp32", 16, 1),
        make_run("gcp_l4", "resnet18", "amp", 8, 1),
        make_run("gcp_l4", "resnet18", "fp32", 8, 1),
        make_run("local", "resnet18", "fp32", 8, 1),
    ]
    df = metrics_frame(runs)
    assert list(df["run_id"]) == [
        "gcp_l4_resnet18_amp_bs8_run1",
        "gcp_l4_resnet18_fp32_bs8_run1",
        "gcp_l4_resnet18_fp32_bs8_run2",
        "local_mobilenet_v2_fp32_bs16_run1",
        "local_resnet18_fp32_bs8_run1",
        "local_resnet18_fp32_bs16_run1",
    ]
    assert list(df["env"])[:3] == ["gcp_l4"] * 3
    assert list(df["model"])[3] == "mobilenet_v2"


def test_metrics_of_no_runs_is_an_empty_table_with_the_columns():
    df = metrics_frame([])
    assert list(df.columns) == METRICS_COLUMNS
    assert len(df) == 0


def test_run_id_must_match_env_and_config():
    run = make_run("local", "resnet18", "fp32", 16, 1)
    run["config"]["batch_size"] = 32
    with pytest.raises(InputError, match=r"a\.json.*expected 'local_resnet18_fp32_bs32_run1'"):
        metrics_frame([run], sources=["a.json"])


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"status": "crashed"}, "status must be one of"),
        ({"env": None}, "run_id and env must be set"),
        ({"config": None}, "missing 'config'"),
        ({"step_time_s": None}, "step_median_s of an ok run"),
        ({"images_per_s": "fast"}, "images_per_s must be a number"),
    ],
)
def test_bad_runs_are_refused_naming_the_file(change, pattern):
    run = make_run("local", "resnet18", "fp32", 16, 1)
    run.update(change)
    with pytest.raises(InputError, match=r"results/local/runs/x\.json: .*" + pattern):
        metrics_frame([run], sources=["results/local/runs/x.json"])


def test_duplicate_run_ids_are_refused():
    run = make_run("local", "resnet18", "fp32", 16, 1)
    with pytest.raises(InputError, match="duplicate run_id"):
        metrics_frame([run, dict(run)], sources=["a.json", "b.json"])


# ----------------------------------------------------------------------------- points


def points_for(runs, complexity=None, ceilings=None, ncu=None, **kw):
    metrics = metrics_frame(runs)
    if complexity is None:
        complexity = {("resnet18", 16): make_complexity("resnet18", 16)}
    if ceilings is None:
        ceilings = {"local": make_ceilings("local")}
    return roofline_points_frame(metrics, complexity, ceilings, ncu, **kw)


def test_points_by_hand():
    pts = points_for(LOCAL_RUNS)
    assert list(pts.columns) == POINTS_COLUMNS
    assert len(pts) == 1
    p = pts.iloc[0]
    assert (p["env"], p["model"], p["precision"], p["batch_size"]) == (
        "local",
        "resnet18",
        "fp32",
        16,
    )
    assert (p["runs_ok"], p["runs_failed"]) == (3, 1)
    assert p["step_median_s"] == 0.11
    assert p["step_spread_s"] == pytest.approx(0.02)
    assert p["images_per_s"] == pytest.approx(16 / 0.11)
    assert p["images_per_s_min"] == pytest.approx(16 / 0.12)
    assert p["images_per_s_max"] == pytest.approx(160.0)
    assert p["ai_source"] == "analytic"
    assert p["flop_per_step"] == 1.1e10
    assert p["bytes_per_step"] == 1e9
    assert p["ai"] == pytest.approx(11.0)
    assert p["attained_flops"] == pytest.approx(1e11)
    # measured roofs win: 2e11 FLOP/s, 1e10 B/s -> ridge 20, roof at AI 11 = 1.1e11
    assert p["peak_flops"] == 2e11
    assert p["peak_bandwidth"] == 1e10
    assert p["ridge_ai"] == 20.0
    assert p["roof_flops"] == pytest.approx(1.1e11)
    assert p["roof_source"] == "measured"
    assert p["efficiency"] == pytest.approx(1 / 1.1)
    assert p["bound"] == "memory"
    assert not p["above_roof"]


def test_data_parallel_point_is_one_ranks_and_images_count_every_rank():
    # 2 ranks of batch 16: the run's images/s is 2 x 16 / the slowest rank's median step
    runs = [make_run("ddp", "resnet18", "fp32", 16, 1, median=0.2)]
    runs[0]["config"]["nproc"] = 2
    runs[0]["images_per_s"] = 2 * 16 / 0.2
    metrics = metrics_frame(runs)
    assert list(metrics["nproc"]) == [2]
    assert list(metrics_frame(LOCAL_RUNS)["nproc"]) == [1] * 4  # runs that predate nproc
    pts = roofline_points_frame(
        metrics, {("resnet18", 16): make_complexity("resnet18", 16)}, {"ddp": make_ceilings("ddp")}
    )
    p = pts.iloc[0]
    assert p["nproc"] == 2
    assert p["images_per_s"] == pytest.approx(160.0)
    # one rank's FLOPs at its batch over the step: 1.1e10 / 0.2 s
    assert p["flop_per_step"] == 1.1e10
    assert p["attained_flops"] == pytest.approx(5.5e10)


def test_images_per_s_comes_from_the_median_step_even_with_an_even_count_of_runs():
    # two ok runs (0.1 s and 0.3 s) and an oom: the point's step is 0.2 s, so 32 / 0.2 =
    # 160 images/s; the median of the runs' rates (320, 106.7) would say 213.3
    runs = [
        make_run("local", "resnet18", "fp32", 32, 1, median=0.1),
        make_run("local", "resnet18", "fp32", 32, 2, median=0.3),
        make_run("local", "resnet18", "fp32", 32, 3, status="oom", message="OOM"),
    ]
    pts = roofline_points_frame(
        metrics_frame(runs),
        {("resnet18", 32): make_complexity("resnet18", 32)},
        {"local": make_ceilings("local")},
    )
    p = pts.iloc[0]
    assert (p["runs_ok"], p["runs_failed"]) == (2, 1)
    assert p["step_median_s"] == pytest.approx(0.2)
    assert p["images_per_s"] == pytest.approx(160.0)
    assert (p["images_per_s_min"], p["images_per_s_max"]) == pytest.approx((32 / 0.3, 320.0))
    assert p["attained_flops"] == pytest.approx(p["flop_per_step"] / 0.2)


@pytest.mark.parametrize("nproc", [0, "2", True])
def test_bad_nproc_in_a_run_is_refused_naming_it(nproc):
    run = make_run("local", "resnet18", "fp32", 16, 1)
    run["config"]["nproc"] = nproc
    with pytest.raises(InputError, match=r"run #0: config.nproc must be a positive integer"):
        metrics_frame([run])


def test_group_without_ok_runs_is_a_row_but_never_a_point():
    runs = LOCAL_RUNS + [
        make_run("local", "resnet18", "bf16", 16, 1, status="oom", message="OOM"),
        make_run("local", "resnet18", "bf16", 16, 2, status="error", message="bad"),
    ]
    # no bf16 peak and no bf16 complexity entry: not needed for a group with nothing to plot
    pts = points_for(runs)
    assert len(pts) == 2
    bad = pts[pts["precision"] == "bf16"].iloc[0]
    assert (bad["runs_ok"], bad["runs_failed"]) == (0, 2)
    for col in ["ai", "attained_flops", "roof_flops", "efficiency", "step_median_s"]:
        assert math.isnan(bad[col])
    assert pd.isna(bad["ai_source"]) and pd.isna(bad["bound"])
    assert not bad["above_roof"]
    assert list(plottable_points(pts)["precision"]) == ["fp32"]


#: The ncu stage's record of where its totals come from (ncu_profile.PROVENANCE).
STEP_BYTES = {"provenance": {"totals.flop": "kernel", "totals.bytes": "step"}}


def test_ai_source_switches_to_ncu_when_totals_exist():
    totals = {"flop": {"total": 2.2e10}, "bytes": {"dram": 1e9, "l2": None, "l1": None}}
    ncu = {("local", "resnet18", "fp32", 16): {"totals": totals, **STEP_BYTES}}
    p = points_for(LOCAL_RUNS, ncu=ncu).iloc[0]
    assert p["ai_source"] == "ncu"
    assert p["flop_per_step"] == 2.2e10
    assert p["bytes_per_step"] == 1e9
    assert p["ai"] == pytest.approx(22.0)
    # attained 2.2e10 / 0.11 = 2e11 = the compute peak: on the roof, not above it
    assert p["bound"] == "compute"
    assert p["roof_flops"] == 2e11
    assert p["efficiency"] == pytest.approx(1.0)
    assert not p["above_roof"]


@pytest.mark.parametrize(
    "ncu_doc, note",
    [
        (
            {"status": "error", "message": "boom", "totals": {"flop": {"total": 2.2e10}}},
            "ncu error: boom",
        ),
        (
            {"totals": {"flop": {"total": 2.2e10}, "bytes": {"dram": None}}, **STEP_BYTES},
            "ncu capture without DRAM bytes: the AI is analytic",
        ),
        (
            {"totals": {"flop": {"total": None}, "bytes": {"dram": 1e9}}, **STEP_BYTES},
            "ncu capture without FLOP total: the AI is analytic",
        ),
        # a bare parse_ncu.py table: kernel replay's DRAM bytes, caches flushed per kernel
        (
            {"totals": {"flop": {"total": 2.2e10}, "bytes": {"dram": 1e9}}},
            "ncu capture without the step pass: its DRAM bytes are of kernels replayed alone",
        ),
        (None, None),
    ],
)
def test_unusable_ncu_falls_back_to_analytic_and_says_why(ncu_doc, note):
    p = points_for(LOCAL_RUNS, ncu={("local", "resnet18", "fp32", 16): ncu_doc}).iloc[0]
    assert p["ai_source"] == "analytic"
    assert p["flop_per_step"] == 1.1e10
    assert (p["ai_note"] or "").startswith(note or "") and (note or pd.isna(p["ai_note"]))


def test_ncu_counters_missing_on_some_kernels_are_said_not_hidden():
    totals = {"flop": {"total": 2.2e10}, "bytes": {"dram": 1e9}, "incomplete": {"flop.total": 3}}
    ncu = {("local", "resnet18", "fp32", 16): {"status": "ok", "totals": totals, **STEP_BYTES}}
    p = points_for(LOCAL_RUNS, ncu=ncu).iloc[0]
    assert p["ai_source"] == "ncu" and p["ai"] == pytest.approx(22.0)
    assert p["ai_note"] == "ncu: 3 kernel(s) without FLOP counters (n/a): the AI leaves them out"


def test_ncu_dram_bytes_under_the_analytic_minimum_are_said():
    # the minimum is 1e9 bytes a step; a large L2 (or missed kernels) can read under it
    def note(dram, incomplete=None):
        totals = {"flop": {"total": 2.2e10}, "bytes": {"dram": dram}}
        if incomplete:
            totals["incomplete"] = incomplete
        ncu = {("local", "resnet18", "fp32", 16): {"totals": totals, **STEP_BYTES}}
        p = points_for(LOCAL_RUNS, ncu=ncu).iloc[0]
        assert p["ai_source"] == "ncu" and p["bytes_per_step"] == dram  # ncu's AI is kept
        return None if pd.isna(p["ai_note"]) else p["ai_note"]

    assert note(4e8) == (
        "ncu's DRAM bytes (4e+08) are 60% under the analytic minimum (1e+09), so its AI is "
        "above the analytic range: the cache kept data the minimum moves once per step, or "
        "the capture missed kernels"
    )
    assert note(0.96e9) is None and note(3e9) is None  # within 5%, or above
    both = note(4e8, {"bytes.dram": 2})
    assert both.startswith("ncu: 2 kernel(s) without DRAM counters") and "; ncu's DRAM" in both


def test_zero_ncu_flops_is_a_broken_capture():
    ncu = {
        ("local", "resnet18", "fp32", 16): {
            "totals": {"flop": {"total": 0}, "bytes": {"dram": 1}},
            **STEP_BYTES,
        }
    }
    with pytest.raises(InputError, match=r"n\.json: totals\.flop\.total.*0"):
        points_for(LOCAL_RUNS, ncu=ncu, ncu_sources={("local", "resnet18", "fp32", 16): "n.json"})


def test_analytic_bytes_by_precision_with_top_level_fallback():
    runs = [make_run("local", "resnet18", "amp", 16, 1, median=0.1)]
    ceil = make_ceilings(
        "local", [roof("compute", "amp", "measured", 1e12), roof("memory", None, "measured", 1e10)]
    )
    comp = make_complexity(
        "resnet18", 16, min_dram=1e9, by_precision={"amp": {"min_dram_bytes_per_step": 5e8}}
    )
    p = points_for(runs, {("resnet18", 16): comp}, {"local": ceil}).iloc[0]
    assert p["bytes_per_step"] == 5e8
    comp = make_complexity("resnet18", 16, min_dram=1e9, by_precision={})
    p = points_for(runs, {("resnet18", 16): comp}, {"local": ceil}).iloc[0]
    assert p["bytes_per_step"] == 1e9


def test_amp_uses_an_fp16_roof_when_no_amp_roof():
    runs = [make_run("local", "resnet18", "amp", 16, 1, median=0.1)]
    ceil = make_ceilings(
        "local",
        [
            roof("compute", "fp32", "measured", 1e11),
            roof("compute", "fp16", "datasheet", 4e11),
            roof("memory", None, "measured", 1e10),
        ],
    )
    comp = make_complexity("resnet18", 16, by_precision={})
    p = points_for(runs, {("resnet18", 16): comp}, {"local": ceil}).iloc[0]
    assert p["peak_flops"] == 4e11
    assert p["roof_source"] == "compute=datasheet;memory=measured"


def test_datasheet_only_ceilings():
    ceil = make_ceilings(
        "local",
        [roof("compute", "fp32", "datasheet", 3e11), roof("memory", None, "datasheet", 2e10)],
    )
    p = points_for(LOCAL_RUNS, ceilings={"local": ceil}).iloc[0]
    assert p["roof_source"] == "datasheet"
    assert (p["peak_flops"], p["peak_bandwidth"], p["ridge_ai"]) == (3e11, 2e10, 15.0)


def test_missing_compute_peak_raises_naming_env_precision_and_file():
    runs = [make_run("gcp_l4", "resnet18", "tf32", 16, 1)]
    ceil = make_ceilings("gcp_l4")  # fp32 only
    comp = make_complexity("resnet18", 16, by_precision={"tf32": {"min_dram_bytes_per_step": 1e9}})
    with pytest.raises(InputError) as exc:
        points_for(
            runs,
            {("resnet18", 16): comp},
            {"gcp_l4": ceil},
            ceilings_sources={"gcp_l4": "results/gcp_l4/ceilings.json"},
        )
    msg = str(exc.value)
    assert "'gcp_l4'" in msg and "'tf32'" in msg and "results/gcp_l4/ceilings.json" in msg


def test_missing_memory_peak_and_missing_env_raise():
    ceil = make_ceilings("local", [roof("compute", "fp32", "measured", 2e11)])
    with pytest.raises(InputError, match="'local' has no memory-bandwidth roof"):
        points_for(LOCAL_RUNS, ceilings={"local": ceil})
    with pytest.raises(
        InputError, match=r"no ceilings for env 'local'.*results/local/ceilings\.json"
    ):
        points_for(LOCAL_RUNS, ceilings={"other": make_ceilings("other")})


def test_cpu_runs_on_other_threads_than_their_roofs_are_refused():
    # roofs measured on 1 thread (snakemake --cores 1), runs on 2: efficiency would double
    one_thread = dict(make_ceilings("local"), threads=1)
    with pytest.raises(InputError) as exc:
        points_for(
            LOCAL_RUNS,
            ceilings={"local": one_thread},
            ceilings_sources={"local": "results/local/ceilings.json"},
        )
    msg = str(exc.value)
    assert msg.startswith("results/local/ceilings.json: the roofs of env 'local' were")
    assert "measured on 1 thread(s), but 3 ok run(s) ran on 2 (" in msg
    assert "local_resnet18_fp32_bs16_run1" in msg and "--cores" in msg
    # a GPU's roofs do not depend on the CPU threads
    gpu = dict(one_thread, device="cuda")
    assert len(points_for(LOCAL_RUNS, ceilings={"local": gpu})) == 1
    assert len(points_for(LOCAL_RUNS, ceilings={"local": make_ceilings("local")})) == 1


@pytest.mark.parametrize(("key", "counted"), [("image_size", 128), ("num_classes", 10)])
def test_runs_of_another_step_than_their_complexity_count_are_refused(key, counted):
    # runs at 224 px and 1000 classes (copied from another study, say) under a count of
    # another step: the point's FLOPs would not be theirs
    runs = [make_run("local", "resnet18", "fp32", 16, n) for n in (1, 2)]
    for run in runs:
        run["config"]["num_classes"] = 1000
    comp = {**make_complexity("resnet18", 16), "num_classes": 1000, key: counted}
    with pytest.raises(InputError) as exc:
        points_for(runs, complexity={("resnet18", 16): comp})
    ran = {"image_size": 224, "num_classes": 1000}[key]
    assert str(exc.value).startswith(
        f"results/local/runs/local_resnet18_fp32_bs16_run1.json ran resnet18 with {key} "
        f"{ran}, but results/complexity/resnet18_bs16.json counts {key} {counted}"
    )
    assert f"study.{key}" in str(exc.value)
    same = dict(make_complexity("resnet18", 16), num_classes=1000)
    assert len(points_for(runs, complexity={("resnet18", 16): same})) == 1


def test_missing_complexity_raises_naming_model_and_batch():
    with pytest.raises(
        InputError, match=r"'resnet18' batch 16.*results/complexity/resnet18_bs16\.json"
    ):
        points_for(LOCAL_RUNS, complexity={})


def test_point_above_its_roof_is_kept_and_flagged():
    ceil = make_ceilings(
        "local",
        [roof("compute", "fp32", "measured", 5e10), roof("memory", None, "measured", 1e10)],
    )
    p = points_for(LOCAL_RUNS, ceilings={"local": ceil}).iloc[0]
    assert p["above_roof"]
    assert p["attained_flops"] == pytest.approx(1e11)  # untouched
    assert p["efficiency"] == pytest.approx(2.0)  # not clipped
    assert len(plottable_points(points_for(LOCAL_RUNS, ceilings={"local": ceil}))) == 1


def test_points_survive_a_csv_round_trip(tmp_path):
    metrics = metrics_frame(LOCAL_RUNS)
    path = tmp_path / "metrics.csv"
    metrics.to_csv(path, index=False)
    back = pd.read_csv(path, dtype=METRICS_DTYPES)
    comp = {("resnet18", 16): make_complexity("resnet18", 16)}
    ceil = {"local": make_ceilings("local")}
    a = roofline_points_frame(metrics, comp, ceil)
    b = roofline_points_frame(back, comp, ceil)
    pd.testing.assert_frame_equal(a, b, check_dtype=False)


# ----------------------------------------------------------------------------- file keying


def driver_run(env: str, model: str, precision: str, batch: int) -> dict:
    """The run record a capture keeps of its driver: the run identity it holds."""
    config = {"arch": model, "precision": precision, "batch_size": batch}
    return {"driver_run": {"status": "ok", "env": env, "config": config}}


def test_key_by_identity_reads_the_content_not_the_name():
    groups = [("a_b", "c", "fp32", 8), ("a", "b_c", "fp32", 8)]
    # both identities spell a_b_c_fp32_bs8: only the content tells them apart
    docs = [
        ("x.json", driver_run("a", "b_c", "fp32", 8)),
        ("y.json", driver_run("a_b", "c", "fp32", 8)),
    ]
    matched, unmatched = key_by_identity(docs, groups)
    assert {key: where for key, (where, _) in matched.items()} == {
        ("a", "b_c", "fp32", 8): "x.json",
        ("a_b", "c", "fp32", 8): "y.json",
    }
    assert unmatched == []
    other = [("z.json", driver_run("gcp_l4", "resnet50", "amp", 32))]
    assert key_by_identity(other, groups) == ({}, ["z.json"])
    with pytest.raises(InputError, match=r"described twice: x\.json and w\.json"):
        key_by_identity([*docs, ("w.json", driver_run("a", "b_c", "fp32", 8))], groups)


def test_key_by_identity_refuses_an_ok_file_without_one_and_passes_over_a_failed_one():
    groups = [("local", "resnet18", "fp32", 8)]
    with pytest.raises(
        InputError, match=r"results/local/ncu/local_resnet18_fp32_bs8\.json: cannot"
    ):
        key_by_identity(
            [("results/local/ncu/local_resnet18_fp32_bs8.json", {"status": "ok", "totals": {}})],
            groups,
        )
    failed = {"status": "unavailable", "reason": "profiler_not_loaded", "driver_run": None}
    assert key_by_identity([("f.json", failed)], groups) == ({}, ["f.json"])


def test_key_complexity_and_ceilings():
    comp = key_complexity([("c.json", make_complexity("resnet18", 16))])
    assert list(comp) == [("resnet18", 16)]
    with pytest.raises(InputError, match="given twice"):
        key_complexity([("a.json", make_complexity("m", 8)), ("b.json", make_complexity("m", 8))])
    ceil, sources = key_ceilings([("results/local/ceilings.json", make_ceilings("local"))])
    assert list(ceil) == ["local"] and sources == {"local": "results/local/ceilings.json"}
    with pytest.raises(InputError, match=r"x\.json: ceilings JSON needs a string 'env'"):
        key_ceilings([("x.json", {"roofs": []})])


# ----------------------------------------------------------------------------- CLIs


def run_script(name, *args):
    return subprocess.run(
        [sys.executable, str(SCRIPTS / name), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def write_json(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


def test_cli_pipeline_metrics_then_points(tmp_path):
    runs = LOCAL_RUNS + [
        make_run("gcp_l4", "mobilenet_v2", "amp", 8, 1, median=0.05),
    ]
    run_files = [write_json(tmp_path / r["env"] / "runs" / f"{r['run_id']}.json", r) for r in runs]
    metrics_csv = tmp_path / "metrics.csv"
    res = run_script("aggregate_metrics.py", "--runs", *run_files, "--out", metrics_csv)
    assert res.returncode == 0, res.stderr
    header = metrics_csv.read_text().splitlines()[0]
    assert header == ",".join(contract_columns("results/metrics.csv"))
    assert len(pd.read_csv(metrics_csv)) == 5

    comp = [
        write_json(tmp_path / "complexity" / "resnet18_bs16.json", make_complexity("resnet18", 16)),
        write_json(
            tmp_path / "complexity" / "mobilenet_v2_bs8.json",
            make_complexity("mobilenet_v2", 8, by_precision={}),
        ),
    ]
    l4 = make_ceilings(
        "gcp_l4",
        [roof("compute", "amp", "datasheet", 121e12), roof("memory", None, "datasheet", 300e9)],
    )
    ceil = [
        write_json(tmp_path / "local" / "ceilings.json", make_ceilings("local")),
        write_json(tmp_path / "gcp_l4" / "ceilings.json", l4),
    ]
    ncu_doc = {"totals": {"flop": {"total": 4e10}, "bytes": {"dram": 2e9}}, **STEP_BYTES}
    # keyed by the identity each holds: the file names say nothing
    ncu = [
        write_json(
            tmp_path / "ncu" / "a.json",
            {**ncu_doc, **driver_run("gcp_l4", "mobilenet_v2", "amp", 8)},
        ),
        write_json(
            tmp_path / "ncu" / "b.json", {**ncu_doc, **driver_run("gcp_l4", "resnet50", "amp", 8)}
        ),
    ]
    points_csv = tmp_path / "points.csv"
    res = run_script(
        "roofline_points.py",
        "--metrics", metrics_csv,
        "--complexity", *comp,
        "--ceilings", *ceil,
        "--ncu", *ncu,
        "--out", points_csv,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "ncu/b.json matches no run group" in res.stderr
    pts = pd.read_csv(points_csv)
    assert list(pts.columns) == POINTS_COLUMNS
    l4_row = pts[pts["env"] == "gcp_l4"].iloc[0]
    assert l4_row["ai_source"] == "ncu"
    assert l4_row["ai"] == pytest.approx(20.0)
    assert l4_row["attained_flops"] == pytest.approx(8e11)
    assert pts[pts["env"] == "local"].iloc[0]["ai_source"] == "analytic"

    # a missing peak: refused with a clear message and exit status 2, no output written
    bad_out = tmp_path / "bad.csv"
    res = run_script(
        "roofline_points.py",
        "--metrics", metrics_csv,
        "--complexity", *comp,
        "--ceilings", ceil[0],
        "--out", bad_out,
    )  # fmt: skip
    assert res.returncode == 2
    assert "no ceilings for env 'gcp_l4'" in res.stderr
    assert not bad_out.exists()


def test_cli_aggregate_reports_a_broken_json(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    res = run_script("aggregate_metrics.py", "--runs", bad, "--out", tmp_path / "m.csv")
    assert res.returncode == 2
    assert "broken.json: not valid JSON (line 1" in res.stderr
