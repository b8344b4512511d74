"""Before and after (issue 37): a study compared with a baseline study, point by point, with
what else changed; the regression gate. Crafted run JSONs with known changes."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dnnroofline.aggregate import compare, compare_files, compare_where
from dnnroofline.aggregate.metrics import metrics_frame
from dnnroofline.errors import InputError
from dnnroofline.study.baseline import check_env_map, resolve_baseline

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "workflow" / "scripts"
H100 = ROOT / "examples" / "h100"


# --------------------------------------------------------------------------- crafting


def steps_of(median: float, n: int = 20, jitter: float = 0.002, seed: int = 0) -> list[float]:
    """``n`` step times around ``median`` (a relative jitter), median exactly ``median``."""
    rng = np.random.default_rng(seed)
    s = median * (1.0 + jitter * rng.uniform(-1, 1, n))
    s = s - np.median(s) + median
    return [float(v) for v in s]


def run_doc(env, model, precision, batch, run, steps=None, status="ok", nproc=1):
    """A run JSON as run_train.py writes it (the keys the comparison reads)."""
    doc = {
        "schema_version": 1,
        "status": status,
        "message": None if status == "ok" else "CUDA out of memory",
        "run_id": f"{env}_{model}_{precision}_bs{batch}_run{run}",
        "env": env,
        "config": {
            "arch": model,
            "batch_size": batch,
            "image_size": 64,
            "num_classes": 10,
            "precision": precision,
            "threads": 2,
            "nproc": nproc,
            "warmup_iters": 2,
            "iters": len(steps or []),
            "channels_last": False,
            "compile": False,
            "data": "synthetic",
            "workers": 0,
        },
        "step_time_s": None,
        "images_per_s": None,
    }
    if status == "ok":
        med = float(np.median(steps))
        doc["step_time_s"] = {
            "median": med,
            "p5": float(np.percentile(steps, 5)),
            "p95": float(np.percentile(steps, 95)),
            "cv": float(np.std(steps) / np.mean(steps)),
            "all": list(steps),
        }
        doc["images_per_s"] = nproc * batch / med
    return doc


def timings(docs):
    return [compare_files.run_timing(d, f"run #{i}") for i, d in enumerate(docs)]


def point_runs(env, model, batch, medians, precision="fp32", jitter=0.002, seed=0, **kw):
    return [
        run_doc(
            env, model, precision, batch, i + 1, steps_of(m, jitter=jitter, seed=seed + i), **kw
        )
        for i, m in enumerate(medians)
    ]


def write_study(folder: Path, docs, config=None, metrics=True, env_info=None, ceilings=None):
    """A finished study's files under ``folder/results``: runs, metrics.csv, study_config."""
    results = folder / "results"
    for d in docs:
        path = results / d["env"] / "runs" / f"{d['run_id']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(d))
    if metrics:
        metrics_frame(docs).to_csv(results / "metrics.csv", index=False)
    cfg = config or {"envs": {d["env"]: {"threads": 2} for d in docs}, "study": {"iters": 20}}
    (results / "study_config.json").write_text(json.dumps(cfg))
    for env, doc in (env_info or {}).items():
        (results / env / "env_info.json").write_text(json.dumps(doc))
    for env, doc in (ceilings or {}).items():
        (results / env / "ceilings.json").write_text(json.dumps(doc))
    return results


def run_script(name, *args, cwd=None):
    return subprocess.run(
        [str(Path(sys.executable).absolute()), str(SCRIPTS / name), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def by_point(rows):
    return {(r["env"], r["model"], r["precision"], r["batch"]): r for r in rows}


# --------------------------------------------------------------------------- the points


def test_twenty_percent_slower_is_slower_and_fails_the_gate():
    base = point_runs("local", "resnet18", 8, [0.100, 0.1005, 0.0995])
    cur = point_runs("local", "resnet18", 8, [0.125, 0.1255, 0.1245], seed=10)
    rows, unmatched = compare.compare_points(timings(base), timings(cur))
    assert unmatched == []
    (row,) = rows
    assert list(row) == compare.COMPARE_COLUMNS
    assert row["change_pct"] == pytest.approx(-20.0, abs=0.01)  # 0.100 -> 0.125 s per step
    assert row["baseline_images_per_s"] == pytest.approx(80.0)
    assert row["images_per_s"] == pytest.approx(64.0)
    assert row["verdict"] == "slower"
    assert row["ci_low_pct"] < row["change_pct"] < row["ci_high_pct"] < 0
    assert (row["baseline_runs"], row["runs"]) == (3, 3)
    assert compare.regressions(rows, 5.0) == [row]
    assert compare.regressions(rows, 25.0) == []  # within the tolerance
    assert "local resnet18 fp32 bs8: -20.0%" in compare.describe(row)


def test_faster_point_is_faster_and_never_fails_the_gate():
    base = point_runs("local", "resnet18", 8, [0.125, 0.1255, 0.1245])
    cur = point_runs("local", "resnet18", 8, [0.100, 0.1005, 0.0995], seed=10)
    rows, _ = compare.compare_points(timings(base), timings(cur))
    assert rows[0]["verdict"] == "faster" and rows[0]["ci_low_pct"] > 0
    assert compare.regressions(rows, 0.0) == []


def test_two_percent_inside_the_studies_own_spread_is_same():
    # runs spread 8% in both studies; the change is 2%
    base = point_runs("local", "mobilenet_v2", 16, [0.100, 0.104, 0.108])
    cur = point_runs("local", "mobilenet_v2", 16, [0.102, 0.106, 0.110], seed=10)
    rows, _ = compare.compare_points(timings(base), timings(cur))
    (row,) = rows
    assert row["change_pct"] == pytest.approx(100 * (0.104 / 0.106 - 1))
    assert row["verdict"] == "same"
    assert compare.regressions(rows, 5.0) == []


def test_an_interval_below_zero_within_the_run_spread_is_same():
    # one baseline run 10% faster than its other four: the bootstrap median rarely sees it,
    # so the interval lies below 0, but the studies' own spread (10%) covers the -2%
    base = point_runs("local", "resnet18", 8, [0.100, 0.100, 0.100, 0.100, 0.100 / 1.1])
    cur = point_runs("local", "resnet18", 8, [0.102] * 5, seed=10)
    (row,), _ = compare.compare_points(timings(base), timings(cur))
    assert row["ci_high_pct"] < 0
    assert row["verdict"] == "same"
    assert "run-to-run spread (10.0%)" in row["note"]
    assert compare.regressions([row], 5.0) == []  # -2% is within the tolerance
    assert compare.regressions([row], 1.0) == [row]  # the gate reads change and interval


def test_verdict_rule():
    assert compare.verdict_of(-20.0, -22.0, -18.0, 3.0) == "slower"
    assert compare.verdict_of(20.0, 18.0, 22.0, 3.0) == "faster"
    assert compare.verdict_of(-20.0, -40.0, 1.0, 3.0) == "same"  # interval holds 0
    assert compare.verdict_of(-2.0, -3.0, -1.0, 4.0) == "same"  # within the noise
    assert compare.verdict_of(-5.0, -6.0, -4.0, 4.0) == "slower"


def test_a_study_compared_with_itself_is_same_everywhere():
    docs = []
    for i, (model, batch, med) in enumerate(
        [("resnet18", 8, 0.2), ("resnet18", 16, 0.35), ("mobilenet_v2", 8, 0.15)]
    ):
        docs += point_runs(
            "local", model, batch, [med, med * 1.03, med * 0.98], jitter=0.05, seed=i
        )
    rows, unmatched = compare.compare_points(timings(docs), timings(docs))
    assert len(rows) == 3 and unmatched == []
    for row in rows:
        assert row["change_pct"] == 0.0
        assert row["verdict"] == "same"
        assert row["ci_low_pct"] < 0 < row["ci_high_pct"]
    assert compare.regressions(rows, 0.0) == []


def test_a_point_in_one_study_only_is_unmatched_with_why():
    base = point_runs("local", "resnet18", 8, [0.1, 0.1]) + point_runs(
        "local", "resnet50", 8, [0.3, 0.3]
    )
    cur = (
        point_runs("local", "resnet18", 8, [0.1, 0.1])
        + point_runs("local", "resnet18", 32, [0.3, 0.3])
        + point_runs("local", "resnet18", 8, [0.1, 0.1], precision="bf16")
        + point_runs("cpu2", "resnet18", 8, [0.1, 0.1])
    )
    rows, unmatched = compare.compare_points(timings(base), timings(cur))
    assert [r["batch"] for r in rows] == [8]
    assert all(list(u) == compare.UNMATCHED_COLUMNS for u in unmatched)
    why = {(u["env"], u["model"], u["precision"], u["batch"], u["in"]): u["why"] for u in unmatched}
    assert why == {
        ("local", "resnet18", "fp32", 32, "current"): "batch 32 not measured in the baseline",
        ("local", "resnet18", "bf16", 8, "current"): "precision bf16 not measured in the baseline",
        ("cpu2", "resnet18", "fp32", 8, "current"): (
            "env cpu2 not in the baseline (map it with compare.envs)"
        ),
        ("local", "resnet50", "fp32", 8, "baseline"): (
            "model resnet50 not measured in the current study"
        ),
    }


def test_envs_that_differ_need_compare_envs():
    base = point_runs("h100", "resnet18", 8, [0.1, 0.1])
    cur = point_runs("gpu_new", "resnet18", 8, [0.1, 0.1])
    with pytest.raises(InputError) as err:
        compare.compare_points(timings(base), timings(cur))
    text = str(err.value)
    assert "baseline (envs: h100)" in text and "this study (envs: gpu_new)" in text
    assert "compare.envs" in text and "{gpu_new: h100}" in text
    rows, unmatched = compare.compare_points(timings(base), timings(cur), {"gpu_new": "h100"})
    assert unmatched == []
    assert rows[0]["env"] == "gpu_new" and rows[0]["verdict"] == "same"
    assert "baseline env h100" in rows[0]["note"]


def test_failed_runs_are_not_counted_and_are_said():
    base = point_runs("local", "resnet18", 8, [0.1, 0.1])
    base.append(run_doc("local", "resnet18", "fp32", 8, 3, status="oom"))
    base += [run_doc("local", "resnet50", "fp32", 8, i, status="oom") for i in (1, 2)]
    cur = point_runs("local", "resnet18", 8, [0.1, 0.1, 0.1]) + point_runs(
        "local", "resnet50", 8, [0.3]
    )
    cur.append(run_doc("local", "resnet18", "fp32", 8, 4, status="error"))
    rows, unmatched = compare.compare_points(timings(base), timings(cur))
    (row,) = rows
    assert (row["baseline_runs"], row["runs"]) == (2, 3)
    assert "1 failed run in the baseline not counted (oom)" in row["note"]
    assert "1 failed run in the current not counted (error)" in row["note"]
    (u,) = unmatched
    assert (u["model"], u["in"]) == ("resnet50", "current")
    assert u["why"] == "no ok run in the baseline (oom x2)"


def test_one_run_has_no_spread_and_says_so():
    base = point_runs("local", "resnet18", 8, [0.1])
    cur = point_runs("local", "resnet18", 8, [0.1], seed=3)
    (row,), _ = compare.compare_points(timings(base), timings(cur))
    assert compare.run_spread_pct(timings(base)) == 0.0
    assert "one ok run in the baseline: no run-to-run spread" in row["note"]
    assert "of one run each: the steps alone" in row["note"]


def test_bootstrap_is_seeded_two_level_and_handles_runs_of_other_lengths():
    rng = np.random.default_rng(0)
    runs = [list(rng.normal(0.1, 0.002, 20)), list(rng.normal(0.1, 0.002, 7)), [0.1]]
    a = compare.resample_median_steps(runs, np.random.default_rng(1), 500)
    b = compare.resample_median_steps(runs, np.random.default_rng(1), 500)
    assert np.array_equal(a, b) and a.shape == (500,)
    assert a.min() > 0.095 and a.max() < 0.105
    # run level: two runs far apart, one step each: draws are their medians only
    c = compare.resample_median_steps([[1.0], [3.0]], np.random.default_rng(2), 2000)
    assert set(np.round(c, 6)) == {1.0, 2.0, 3.0}
    # step level: one run, its steps drawn: the median moves
    d = compare.resample_median_steps([[1.0, 2.0, 3.0, 4.0, 5.0]], np.random.default_rng(3), 2000)
    assert len(set(d)) > 2
    assert "bootstrap" in compare.CI_METHOD and "2,000" in compare.CI_METHOD


def test_runs_from_metrics_alone_are_compared_by_their_medians():
    base = [
        compare.RunTiming("local", "resnet18", "fp32", 8, i, "ok", (m,), 8 / m, has_steps=False)
        for i, m in enumerate([0.100, 0.1001, 0.0999])
    ]
    cur = timings(point_runs("local", "resnet18", 8, [0.125, 0.125, 0.125]))
    (row,), _ = compare.compare_points(base, cur)
    assert row["verdict"] == "slower"
    assert "without per-step times" in row["note"]


def test_run_json_steps_and_settings_are_read_or_refused():
    doc = run_doc("gpu", "resnet50", "amp", 256, 1, steps_of(0.1))
    doc["gpu_telemetry"] = {"limits": {"sm_max_mhz": 1980, "power_limit_w": 700.0}}
    doc["gpu_telemetry"]["sm_mhz"] = {"median": 1755}
    assert compare_files.run_clocks([doc]) == {
        "gpu": {"gpu_sm_max_mhz": 1980, "gpu_power_limit_w": 700.0, "gpu_sm_mhz_median": 1755}
    }
    settings = compare_files.run_settings([doc, doc | {"status": "oom"}])
    assert settings["envs"]["gpu"]["threads"] == 2 and settings["study"]["iters"] == 20
    merged = compare_files.with_fallback({"envs": {"gpu": {"threads": 8}}}, settings)
    assert merged["envs"]["gpu"]["threads"] == 8 and merged["envs"]["gpu"]["nproc"] == 1
    bad = doc | {"step_time_s": doc["step_time_s"] | {"all": [0.1, None]}}
    with pytest.raises(InputError, match=r"^run\.json: step_time_s\.all"):
        compare_files.run_timing(bad, "run.json")
    newer = doc | {"schema_version": 2}
    with pytest.raises(InputError, match=r"^run\.json: run JSON schema_version 2 is newer"):
        compare_files.run_timing(newer, "run.json")


# --------------------------------------------------------------------------- baseline


def test_resolve_baseline_takes_a_study_folder_or_its_results(tmp_path):
    results = write_study(tmp_path / "old", point_runs("local", "resnet18", 8, [0.1, 0.1]))
    a = resolve_baseline({"baseline": "old"}, cwd=tmp_path)
    b = resolve_baseline({"baseline": str(results), "label": "torch 2.13"})
    assert a.root == b.root == results
    assert (a.label, b.label) == ("old", "torch 2.13")
    assert a.envs == ("local",)
    assert a.metrics() == results / "metrics.csv"
    assert [p.name for p in a.run_files("local")] == [
        "local_resnet18_fp32_bs8_run1.json",
        "local_resnet18_fp32_bs8_run2.json",
    ]
    assert a.study_config() == results / "study_config.json"
    assert a.env_info("local") is None and a.ceilings("local") is None
    assert a.trace_ops("local") == [] and a.ncu_files("local") == []
    assert a.roofline_points() is None


def test_resolve_baseline_reads_the_committed_h100_example():
    # examples/h100: its ledgers beside results/, a metrics.csv of before
    # rss_before_model_bytes, parsed ncu captures
    base = resolve_baseline({"baseline": str(H100)})
    assert base.root == H100 / "results" and base.label == "h100" and base.envs == ("h100",)
    assert base.metrics() == H100 / "metrics.csv"
    assert "rss_before_model_bytes" not in pd.read_csv(base.metrics()).columns
    assert len(base.run_files("h100")) == 15 and len(base.ncu_files("h100")) == 5
    study = compare_files.baseline_study(base)
    assert len(study.runs) == 15 and all(r.has_steps for r in study.runs)
    assert study.config["envs"]["h100"]["threads"] == 16  # from its runs: no study_config
    only = compare_files.runs_from_metrics(base.metrics(), "compare.baseline")
    assert len(only) == 15 and not only[0].has_steps


def test_resolve_baseline_refuses_a_missing_folder(tmp_path):
    with pytest.raises(InputError, match=r"^compare\.baseline /x/y: no such folder$"):
        resolve_baseline({"baseline": "/x/y"})
    with pytest.raises(InputError, match=r"compare\.baseline gone \(.*/gone\): no such folder"):
        resolve_baseline({"baseline": "gone"}, cwd=tmp_path)


def test_resolve_baseline_refuses_a_folder_without_a_study(tmp_path):
    (tmp_path / "empty" / "results" / "local").mkdir(parents=True)
    with pytest.raises(InputError) as err:
        resolve_baseline({"baseline": str(tmp_path / "empty")})
    assert f"compare.baseline {tmp_path / 'empty'}: holds no study" in str(err.value)


def test_resolve_baseline_refuses_a_newer_run_schema(tmp_path):
    docs = point_runs("local", "resnet18", 8, [0.1, 0.1])
    docs[1]["schema_version"] = 99
    results = write_study(tmp_path / "old", docs)
    with pytest.raises(InputError) as err:
        resolve_baseline({"baseline": str(tmp_path / "old")})
    text = str(err.value)
    assert text.startswith("compare.baseline")
    assert str(results / "local" / "runs" / "local_resnet18_fp32_bs8_run2.json") in text
    assert "schema_version 99" in text


def test_resolve_baseline_refuses_metrics_without_a_needed_column(tmp_path):
    results = write_study(tmp_path / "old", point_runs("local", "resnet18", 8, [0.1]))
    frame = pd.read_csv(results / "metrics.csv").drop(columns=["step_median_s"])
    frame.to_csv(results / "metrics.csv", index=False)
    with pytest.raises(InputError) as err:
        resolve_baseline({"baseline": str(results)})
    assert f"compare.baseline: {results / 'metrics.csv'}" in str(err.value)
    assert "step_median_s" in str(err.value)


def test_an_older_metrics_csv_without_later_columns_is_read(tmp_path):
    docs = point_runs("local", "resnet18", 8, [0.1, 0.1])
    results = write_study(tmp_path / "old", docs)
    frame = pd.read_csv(results / "metrics.csv")
    frame.drop(columns=["rss_before_model_bytes", "contention_cpus", "nproc"]).to_csv(
        results / "metrics.csv", index=False
    )
    for p in (results / "local" / "runs").glob("*.json"):
        p.unlink()  # the metrics.csv alone
    base = resolve_baseline({"baseline": str(results)})
    study = compare_files.baseline_study(base)
    assert [(r.run, r.steps) for r in study.runs] == [(1, (0.1,)), (2, (0.1,))]


def test_check_env_map_refuses_envs_by_name(tmp_path):
    write_study(tmp_path / "old", point_runs("h100", "resnet18", 8, [0.1]))
    base = resolve_baseline({"baseline": str(tmp_path / "old")})
    assert check_env_map({"envs": {"gpu": "h100"}}, ["gpu"], base) == {"gpu": "h100"}
    with pytest.raises(InputError, match=r"compare\.envs: 'gpx' is not an env of this study"):
        check_env_map({"envs": {"gpx": "h100"}}, ["gpu"], base)
    with pytest.raises(InputError, match=r"compare\.envs\.gpu: 'a100' is not an env of the base"):
        check_env_map({"envs": {"gpu": "a100"}}, ["gpu"], base)


# --------------------------------------------------------------------------- where


def env_info(**over):
    doc = {
        "env": "local",
        "torch": "2.13.0",
        "torchvision": "0.28.0",
        "cuda": None,
        "cudnn": None,
        "driver": None,
        "python": "3.11.7",
        "cpu_model": "AMD EPYC",
        "cpu_cores_physical": 2,
        "cpu_cores_logical": 2,
        "cpu_flags": ["avx2", "fma", "avx512f"],
        "gpus": [],
    }
    return doc | over


def test_fingerprint_diff_shows_what_differs_only():
    b_cfg = {"envs": {"local": {"threads": 2}}, "study": {"iters": 10, "image_size": 128}}
    c_cfg = {"envs": {"local": {"threads": 4}}, "study": {"iters": 10, "image_size": 128}}
    rows = compare_where.fingerprint_diff(
        {"local": env_info()},
        {"local": env_info(torch="2.14.1", cpu_flags=["avx2", "fma", "amx_tile"])},
        b_cfg,
        c_cfg,
    )
    assert all(list(r) == compare_where.FINGERPRINT_COLUMNS for r in rows)
    got = {r["key"]: (r["baseline"], r["current"]) for r in rows}
    assert got == {
        "torch": ("2.13.0", "2.14.1"),
        "cpu_flags": ("removed: avx512f", "added: amx_tile"),
        "threads": ("2", "4"),
    }
    assert {(r["env"], r["baseline_env"]) for r in rows} == {("local", "local")}


def test_fingerprint_diff_says_no_difference_and_unknown():
    same = compare_where.fingerprint_diff(
        {"old": env_info()}, {"local": env_info()}, {}, {}, {"local": "old"}
    )
    assert same == [
        {"env": "local", "baseline_env": "old", "key": "no difference"}
        | {
            "baseline": "",
            "current": "",
        }
    ]
    rows = compare_where.fingerprint_diff(
        {"local": env_info()}, {"local": env_info()}, None, {"study": {"iters": 20}}
    )
    assert {r["key"]: (r["baseline"], r["current"]) for r in rows} == {"iters": ("unknown", "20")}


def ops_doc(env, model, ops, basis="self_cpu_s"):
    doc = run_doc(env, model, "fp32", 8, 1, steps_of(0.1))
    rows = [{"name": n, "per_step_s": t, "calls": 3} for n, t in ops.items()]
    return doc | {"kind": "trace", "table": {"basis": basis, "top": 3, "ops": rows}}


def test_op_diff_aligns_ops_by_name():
    base = ops_doc(
        "local", "resnet18", {"aten::conv": 0.050, "aten::bn": 0.010, "aten::relu": 0.004}
    )
    cur = ops_doc("local", "resnet18", {"aten::conv": 0.065, "aten::bn": 0.010, "aten::add": 0.003})
    rows = compare_where.op_diff(base, cur)
    assert all(list(r) == compare_where.OP_COLUMNS for r in rows)
    got = {r["name"]: r for r in rows}
    assert rows[0]["name"] == "aten::conv"  # the largest change first
    assert got["aten::conv"]["change_ms"] == pytest.approx(15.0)
    assert got["aten::conv"]["change_pct"] == pytest.approx(30.0)
    assert got["aten::bn"]["change_ms"] == pytest.approx(0.0)
    assert got["aten::relu"]["only_in"] == "baseline" and got["aten::relu"]["per_step_s"] is None
    assert got["aten::add"]["only_in"] == "current"
    assert "top 3" in got["aten::add"]["note"]
    assert (got["aten::conv"]["env"], got["aten::conv"]["batch"]) == ("local", 8)
    # all points: paired by what each file says it is, through the env map
    other = ops_doc("old", "resnet18", {"aten::conv": 0.05})
    assert len(compare_where.op_diffs([other], [cur], {"local": "old"})) == 3
    assert compare_where.op_diffs([other], [cur], None) == []


def ncu_doc(env, kernels):
    driver = run_doc(env, "resnet50", "amp", 256, 1, steps_of(0.1))
    return {"kernels": [{"name": n, "time_s": t} for n, t in kernels], "driver_run": driver}


def test_kernel_diff_sums_time_per_name():
    base = ncu_doc("h100", [("gemm", 1e-3), ("gemm", 1e-3), ("relu", 2e-4)])
    cur = ncu_doc("h100", [("gemm", 3e-3), ("relu", 2e-4), ("copy", 1e-4)])
    rows = compare_where.kernel_diff(base, cur)
    assert all(list(r) == compare_where.KERNEL_COLUMNS for r in rows)
    got = {r["name"]: r for r in rows}
    assert rows[0]["name"] == compare_where.ALL_KERNELS
    assert got[compare_where.ALL_KERNELS]["baseline_time_s"] == pytest.approx(2.2e-3)
    assert got[compare_where.ALL_KERNELS]["time_s"] == pytest.approx(3.3e-3)
    assert got["gemm"]["change_ms"] == pytest.approx(1.0)
    assert (got["gemm"]["baseline_calls"], got["gemm"]["calls"]) == (2, 1)
    assert got["copy"]["only_in"] == "current" and got["copy"]["baseline_time_s"] is None
    assert got["relu"]["change_pct"] == pytest.approx(0.0)
    assert len(compare_where.kernel_diffs([base], [cur], None)) == 4


def test_roof_diff_lists_the_roofs_that_moved():
    def ceil(env, fp32, triad, bf16=None):
        roofs = [
            {"kind": "compute", "precision": "fp32", "source": "measured", "value": fp32},
            {"kind": "compute", "precision": "fp32", "source": "datasheet", "value": 1.0e11},
            {"kind": "memory", "precision": None, "source": "measured", "value": triad}
            | {"benchmark": "triad"},
        ]
        if bf16:
            roofs.append(
                {"kind": "compute", "precision": "bf16", "source": "measured", "value": bf16}
            )
        return {"env": env, "roofs": roofs}

    rows = compare_where.roof_diff(ceil("old", 2.0e11, 4.0e10), ceil("new", 1.8e11, 4.0e10, 3e11))
    assert all(list(r) == compare_where.ROOF_COLUMNS for r in rows)
    got = {(r["kind"], r["precision"], r["source"]): r for r in rows}
    assert set(got) == {("compute", "fp32", "measured"), ("compute", "bf16", "measured")}
    assert got[("compute", "fp32", "measured")]["change_pct"] == pytest.approx(-10.0)
    assert got[("compute", "bf16", "measured")]["note"] == "only in the current study"
    assert (rows[0]["env"], rows[0]["baseline_env"]) == ("new", "old")
    both = compare_where.roof_diffs(
        {"old": ceil("old", 2e11, 4e10)}, {"new": ceil("new", 2e11, 3e10)}, {"new": "old"}
    )
    assert [(r["kind"], r["benchmark"], round(r["change_pct"], 6)) for r in both] == [
        ("memory", "triad", -25.0)
    ]


# --------------------------------------------------------------------------- the CLIs


def make_pair(tmp_path, slower=1.0):
    """A baseline study folder and a current results folder with its study_config."""
    base_docs = point_runs("local", "resnet18", 8, [0.100, 0.1005, 0.0995]) + point_runs(
        "local", "resnet50", 8, [0.300, 0.301, 0.299]
    )
    cur_docs = point_runs("local", "resnet18", 8, [0.125, 0.1255, 0.1245], seed=5) + point_runs(
        "local", "resnet50", 8, [0.300 * slower, 0.301, 0.299], seed=6
    )
    ceilings = {
        "env": "local",
        "roofs": [{"kind": "compute", "precision": "fp32", "source": "measured", "value": 2e11}],
    }
    write_study(
        tmp_path / "old", base_docs, env_info={"local": env_info()}, ceilings={"local": ceilings}
    )
    cfg = {
        "envs": {"local": {"threads": 4}},
        "study": {"iters": 20},
        "compare": {"baseline": "old"},
    }
    current = write_study(
        tmp_path / "new",
        cur_docs,
        config=cfg,
        env_info={"local": env_info(torch="2.14.1")},
        ceilings={"local": ceilings | {"roofs": [ceilings["roofs"][0] | {"value": 1.5e11}]}},
    )
    (current / "study_config.json").write_text(
        json.dumps(cfg | {"compare": {"baseline": "../old"}})
    )
    return tmp_path / "old", current


def compare_args(current: Path, outdir: Path):
    return [
        "--config",
        current / "study_config.json",
        "--metrics",
        current / "metrics.csv",
        "--runs",
        *sorted(current.glob("*/runs/*.json")),
        "--env-info",
        *current.glob("*/env_info.json"),
        "--ceilings",
        *current.glob("*/ceilings.json"),
        "--outdir",
        outdir,
    ]


def tree_state(folder: Path) -> dict:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(folder.rglob("*"))}


def test_cli_writes_the_six_files_and_never_touches_the_baseline(tmp_path):
    old, current = make_pair(tmp_path)
    before = tree_state(old)
    for p in [old, *old.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        # relative to the current directory (the workflow's, above results/): ../old
        res = run_script("compare_studies.py", *compare_args(current, current), cwd=current.parent)
    finally:
        for p in [old, *old.rglob("*")]:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    assert res.returncode == 0, res.stderr
    assert tree_state(old) == before
    assert "1 faster, 1 same, 0 slower" not in res.stdout
    assert "2 point(s) compared: 0 faster, 1 same, 1 slower" in res.stdout
    assert "slowest change: local resnet18 fp32 bs8: -20.0%" in res.stdout
    for name, columns in compare_files.TABLES.items():
        frame = pd.read_csv(current / name)
        assert list(frame.columns) == columns, name
    verdicts = pd.read_csv(current / "compare.csv").set_index("model")["verdict"]
    assert verdicts.to_dict() == {"resnet18": "slower", "resnet50": "same"}
    fp = pd.read_csv(current / "compare_fingerprints.csv", keep_default_na=False)
    assert {k: (b, c) for k, b, c in fp[["key", "baseline", "current"]].values} == {
        "torch": ("2.13.0", "2.14.1"),
        "threads": ("2", "4"),
    }
    roofs = pd.read_csv(current / "compare_roofs.csv")
    assert roofs["change_pct"].round(6).tolist() == [-25.0]
    for empty in ("compare_unmatched.csv", "compare_ops.csv", "compare_kernels.csv"):
        assert len(pd.read_csv(current / empty)) == 0  # the header alone


def test_cli_refuses_an_outdir_inside_the_baseline_and_bad_baselines(tmp_path):
    old, current = make_pair(tmp_path)
    res = run_script(
        "compare_studies.py", *compare_args(current, old / "results"), cwd=current.parent
    )
    assert res.returncode == 2
    assert res.stderr.startswith("compare_studies: error: --outdir")
    assert "the baseline is read, never written" in res.stderr
    res = run_script("compare_studies.py", *compare_args(current, old), cwd=current.parent)
    assert res.returncode == 2 and "never written" in res.stderr  # the study folder too
    cfg = json.loads((current / "study_config.json").read_text())
    (current / "study_config.json").write_text(json.dumps(cfg | {"compare": {"baseline": "/x/y"}}))
    res = run_script("compare_studies.py", *compare_args(current, current), cwd=current.parent)
    assert res.returncode == 2
    assert "compare_studies: error: compare.baseline /x/y: no such folder" in res.stderr


def test_gate_exit_codes_and_output(tmp_path):
    old, current = make_pair(tmp_path)
    assert (
        run_script(
            "compare_studies.py", *compare_args(current, current), cwd=current.parent
        ).returncode
        == 0
    )
    csv = current / "compare.csv"
    res = run_script("regression_gate.py", csv)
    assert res.returncode == 1
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("local resnet18 fp32 bs8: -20.0% [")
    assert lines[0].endswith("] slower")
    res = run_script("regression_gate.py", csv, "--tolerance-pct", "25")
    assert res.returncode == 0
    assert "2 point(s) passed" in res.stdout
    # the config's regression.tolerance_pct, when no flag says
    cfg = json.loads((current / "study_config.json").read_text())
    (current / "study_config.json").write_text(
        json.dumps(cfg | {"regression": {"tolerance_pct": 30}})
    )
    assert (
        run_script("regression_gate.py", csv, "--config", current / "study_config.json").returncode
        == 0
    )
    assert run_script("regression_gate.py", csv, "--config", current / "study_config.json",
                      "--tolerance-pct", "1").returncode == 1  # fmt: skip
    bad = tmp_path / "bad.csv"
    bad.write_text("env,model\nlocal,resnet18\n")
    res = run_script("regression_gate.py", bad)
    assert res.returncode == 2 and str(bad) in res.stderr and "lacks" in res.stderr
    res = run_script("regression_gate.py", tmp_path / "none.csv")
    assert res.returncode == 2 and str(tmp_path / "none.csv") in res.stderr


def test_gate_passes_a_study_compared_with_itself(tmp_path):
    old, current = make_pair(tmp_path)
    same = tmp_path / "same"
    docs = [json.loads(p.read_text()) for p in sorted((old / "results").glob("*/runs/*.json"))]
    results = write_study(same, docs, config={"compare": {"baseline": str(old)}})
    res = run_script("compare_studies.py", *compare_args(results, results))
    assert res.returncode == 0, res.stderr
    frame = pd.read_csv(results / "compare.csv")
    assert (frame["verdict"] == "same").all() and (frame["change_pct"] == 0).all()
    assert ((frame["ci_low_pct"] <= 0) & (frame["ci_high_pct"] >= 0)).all()
    assert (
        run_script("regression_gate.py", results / "compare.csv", "--tolerance-pct", "0").returncode
        == 0
    )


def test_bench_compare_runs_and_writes_its_json(tmp_path):
    """benchmarks/bench_compare.py at a small size (5 points x 4 runs x 5 steps a side):
    it runs and writes its result; its times are the benchmark's, not the test's."""
    out = tmp_path / "bench.json"
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_compare.py"), "--points", "5",
         "--runs", "4", "--steps", "5", "--out", out],
        capture_output=True, text=True, env=os.environ | {"PYTHONPATH": str(SCRIPTS)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    result = json.loads(out.read_text())
    assert result["runs_per_side"] == 20 and result["compared_points"] == 5
    assert not math.isnan(result["cli_wall_s"])
