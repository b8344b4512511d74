"""The model's arithmetic on small hand-checked cases (issue 28, items 3 and 5).

Two ops, tables of known efficiency, known host costs: the step, its bound and images/s
by hand, on a CPU (the sum) and on a GPU (the host's issue replayed ahead of the device,
a sync, the launch floor); the dispatch term of many small ops; the baselines by hand;
Kendall tau, MAPE and coverage by hand, on step time and on images/s (issue 36); the
rule that no point predicts itself; and the prediction check's rows per method.
"""

from __future__ import annotations

import inspect
import json
import math

import pandas as pd
import pytest
from scipy.stats import kendalltau

from dnnroofline.aggregate import check as ac
from dnnroofline.aggregate import perfmodel_files as mf
from dnnroofline.aggregate import predictions as ap
from dnnroofline.errors import InputError
from dnnroofline.perfmodel import predict as pr
from dnnroofline.perfmodel import scoring

# Roofs: 1 TFLOP/s, 10 GB/s. A convolution: 4 GFLOP (4 ms) over 20 MB (2 ms), compute
# bound; a ReLU: 1 MFLOP (1 us) over 40 MB (4 ms), memory bound.
ROOF_C, ROOF_M = 1e12, 1e10
CONV = {
    "name": "aten.convolution.default",
    "phase": "forward",
    "class": "conv",
    "kind": "dense",
    "dtype": "float32",
    "flops": 4_000_000_000,
    "bytes_read": 10_000_000,
    "bytes_written": 10_000_000,
    "count": 2,
}
RELU = {
    "name": "aten.relu.default",
    "phase": "forward",
    "class": "elementwise",
    "kind": None,
    "dtype": "float32",
    "flops": 1_000_000,
    "bytes_read": 20_000_000,
    "bytes_written": 20_000_000,
    "count": 3,
}
INVENTORY = {
    "schema_version": 1,
    "status": "ok",
    "arch": "toy",
    "precision": "fp32",
    "batch_size": 8,
    "param_tensors": 4,
    "ops": [CONV, RELU],
}
EFFICIENCY = {"conv_fwd": 0.5, "elementwise": 0.25, "optimizer": 0.25}


class FixedTables:
    """Tables with one efficiency per key, whatever the op's shape."""

    def __init__(self, residuals=None):
        self._residuals = residuals or {}

    def efficiencies(self, precision, key, items):
        return [EFFICIENCY[key]] * len(items), key, 0

    def residuals(self, precision, key):
        return self._residuals.get(key, [])


def host_costs(per_op=1e-5, fixed=(1e-4, 1e-6), launch=None):
    classes = ("conv", "elementwise")
    return pr.HostCosts(
        per_op={"forward": dict.fromkeys(classes, per_op), "backward": {}},
        fixed_s={"fp32": fixed},
        launch_s=launch,
    )


def machine(device="cpu", host=None, residuals=None):
    return pr.Machine(
        device=device,
        compute={"fp32": ROOF_C},
        memory=ROOF_M,
        tables=FixedTables(residuals),
        host=host,
        source="toy tables",
    )


# conv: 4 ms / 0.5 = 8 ms per call, 2 calls: 16 ms; relu: 4 ms / 0.25 = 16 ms, 3 calls: 48 ms
DEVICE_S = 0.016 + 0.048
CALLS = 5
FIXED_S = 1e-4 + 4 * 1e-6  # intercept + 4 parameter tensors x slope


def test_cpu_step_is_the_sum_of_device_host_and_fixed_times():
    p = pr.predict_step(INVENTORY, machine("cpu", host_costs()), "fp32")
    assert p.device_s == pytest.approx(DEVICE_S)
    assert p.calls == CALLS
    assert p.fixed_s == pytest.approx(FIXED_S)
    assert p.host_s == pytest.approx(CALLS * 1e-5 + FIXED_S)
    assert p.step_s == pytest.approx(DEVICE_S + CALLS * 1e-5 + FIXED_S)
    assert p.images_per_s == pytest.approx(8 / p.step_s)
    assert p.bound == "memory"  # 48 ms of memory-bound ops against 16 ms and 0.15 ms
    assert p.time_by_bound == pytest.approx(
        {"compute": 0.016, "memory": 0.048, "host": CALLS * 1e-5 + FIXED_S}
    )
    assert p.time_by_class == pytest.approx({"conv": 0.016, "elementwise": 0.048})
    assert [c for c, _ in p.top_classes] == ["elementwise", "conv"]
    assert p.class_shares == pytest.approx({"conv": 0.25, "elementwise": 0.75})
    assert pr.format_top_classes(p.top_classes) == "elementwise 75%; conv 25%"


def test_the_dispatch_term_of_a_model_of_many_small_ops():
    """A thousand tiny ReLUs: each costs the host its measured 5 us, the device ~nothing;
    on a CPU the step is their dispatch, and it says so."""
    tiny = {**RELU, "flops": 4_000, "bytes_read": 16_000, "bytes_written": 16_000, "count": 1000}
    many = {**INVENTORY, "ops": [tiny]}
    device = 1000 * (32_000 / ROOF_M) / 0.25  # 12.8 ms at a quarter of the bandwidth
    p = pr.predict_step(many, machine("cpu", host_costs(per_op=5e-6, fixed=(0.0, 0.0))), "fp32")
    assert p.step_s == pytest.approx(device + 1000 * 5e-6)
    assert p.host_s == pytest.approx(5e-3)
    assert p.bound == "memory"
    slow_host = host_costs(per_op=50e-6, fixed=(0.0, 0.0))
    p = pr.predict_step(many, machine("cpu", slow_host), "fp32")
    assert p.step_s == pytest.approx(device + 0.05) and p.bound == "host"
    assert p.time_by_bound["host"] == pytest.approx(0.05)
    # on a GPU the device runs behind the host: the step is the host's, the device waits
    gpu = pr.predict_step(many, machine("cuda", slow_host), "fp32")
    assert gpu.step_s == pytest.approx(0.05) and gpu.bound == "host"
    assert gpu.busy_share == pytest.approx(device / 0.05)


def test_gpu_step_replays_the_host_ahead_of_the_device():
    device_bound = pr.predict_step(INVENTORY, machine("cuda", host_costs(launch=4e-6)), "fp32")
    # device 64 ms against a host of 5 x 10 us + 0.1 ms: the device's time, the host hidden
    assert device_bound.step_s == pytest.approx(DEVICE_S)
    assert device_bound.bound == "memory" and device_bound.busy_share == pytest.approx(1.0)
    assert device_bound.time_by_bound == pytest.approx(
        {"compute": 0.016, "memory": 0.048, "host": 0}
    )
    slow = pr.predict_step(INVENTORY, machine("cuda", host_costs(per_op=0.02)), "fp32")
    # host 5 x 20 ms + fixed: longer than the device's 64 ms; the last op's kernel runs
    # after its issue, so the step is the host's issue time plus nothing the device adds
    assert slow.step_s == pytest.approx(0.1 + FIXED_S)
    assert slow.bound == "host"
    assert slow.images_per_s == pytest.approx(8 / (0.1 + FIXED_S))


def test_gpu_launch_cost_is_a_floor_under_each_call():
    # launch 10 ms: a conv call (8 ms) waits for it, 2 x 10 ms; the relu (16 ms) does not
    p = pr.predict_step(INVENTORY, machine("cuda", host_costs(launch=0.010)), "fp32")
    assert p.step_s == pytest.approx(0.020 + 0.048)
    assert p.time_by_bound == pytest.approx({"compute": 0.0, "memory": 0.048, "host": 0.020})
    assert p.bound == "memory"


def test_a_sync_makes_the_host_wait_for_the_device():
    """amp: GradScaler reads its inf check back before the optimizer step. The host's
    fixed costs then run with the device idle."""
    opt = {**RELU, "phase": "optimizer", "class": "optimizer", "count": 1}
    inv = {**INVENTORY, "ops": [CONV, opt], "sequence": [0, 0, "sync", 1]}
    costs = host_costs(per_op=1e-3, fixed=(0.005, 0.0))
    p = pr.predict_step(inv, machine("cuda", costs), "fp32")
    # steady state: convs issued at 1 and 2 ms run back to back (16 ms); the host waits,
    # then 5 ms of fixed costs with the device idle, then the optimizer's 16 ms kernel
    assert p.step_s == pytest.approx(0.016 + 0.005 + 0.016, rel=1e-6)
    without = {**inv, "sequence": [0, 0, 1]}  # no sync: the fixed costs hide under the convs
    assert pr.predict_step(without, machine("cuda", costs), "fp32").step_s == pytest.approx(0.032)


def test_without_host_costs_the_step_is_the_devices_and_says_so():
    p = pr.predict_step(INVENTORY, machine("cuda", None), "fp32")
    assert p.step_s == pytest.approx(DEVICE_S)
    assert p.host_s is None and p.fixed_s is None
    assert any("no host costs measured" in n for n in p.notes)


def test_an_inventory_that_does_not_count_its_parameters_leaves_the_fixed_costs_out():
    inv = {k: v for k, v in INVENTORY.items() if k != "param_tensors"}
    p = pr.predict_step(inv, machine("cpu", host_costs()), "fp32")
    assert p.fixed_s is None and p.step_s == pytest.approx(DEVICE_S + CALLS * 1e-5)
    assert any("parameter tensors" in n for n in p.notes)


def test_interval_scales_each_table_together_by_its_residuals_around_the_prediction():
    host = CALLS * 1e-5 + FIXED_S
    same = {"conv_fwd": [0.2, 0.2], "elementwise": [0.2, 0.2]}
    p = pr.predict_step(INVENTORY, machine("cpu", host_costs(), residuals=same), "fp32")
    # every draw is the same: the interval is the prediction itself (its spread is none)
    assert p.interval == pytest.approx((p.step_s, p.step_s))
    spread = {"conv_fwd": [-0.3, 0.0, 0.3], "elementwise": [0.0, 0.0, 0.0]}
    p = pr.predict_step(INVENTORY, machine("cpu", host_costs(), residuals=spread), "fp32")
    # the convolutions (one table: both calls together) at e^-0.3 and e^0.3; the median
    # draw is the prediction, so the ends are the steps at those factors
    low, high = (0.048 + 0.016 * math.exp(r) + host for r in (-0.3, 0.3))
    assert p.interval == pytest.approx((low, high))
    again = pr.predict_step(INVENTORY, machine("cpu", host_costs(), residuals=spread), "fp32")
    assert again.interval == p.interval  # seeded: the same every time


def test_no_residuals_no_interval():
    p = pr.predict_step(INVENTORY, machine(), "fp32")
    assert p.interval is None
    assert any("no interval" in n for n in p.notes)


def test_missing_roof_and_bad_inventory_are_refused():
    with pytest.raises(InputError, match="no measured compute roof for precision 'bf16'"):
        pr.predict_step(INVENTORY, machine(), "bf16")
    bad = {**INVENTORY, "ops": [{**CONV, "count": 0}]}
    with pytest.raises(InputError, match=r"ops\[0\]: count must be >= 1"):
        pr.predict_step(bad, machine(), "fp32", "toy_ops.json")
    with pytest.raises(InputError, match="toy_ops.json: status 'error'"):
        pr.predict_step({**INVENTORY, "status": "error"}, machine(), "fp32", "toy_ops.json")


def test_baselines_by_hand():
    # whole step: 10 GFLOP and 30 MB at 1 TFLOP/s, 10 GB/s: max(10 ms, 3 ms)
    assert pr.roofline_step_s(1e10, 3e7, ROOF_C, ROOF_M) == pytest.approx(0.010)
    # memory side: 1 GFLOP over 30 MB: max(1 ms, 3 ms)
    assert pr.roofline_step_s(1e9, 3e7, ROOF_C, ROOF_M) == pytest.approx(0.003)
    # per op at the roofline, no efficiency, no dispatch: 2 x 4 ms + 3 x 4 ms
    assert pr.per_op_roofline_step_s(INVENTORY, ROOF_C, ROOF_M) == pytest.approx(0.020)


def test_kendall_tau_is_scipys_tau_b():
    # one swapped pair of six: (5 - 1) / 6
    assert scoring.kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    assert scoring.kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # a tie in x: tau-b = (2 - 0) / sqrt(3 x 2)
    assert scoring.kendall_tau([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    # ties on both sides, against scipy's own tau-b
    xs, ys = [1, 1, 2, 3, 3, 4, 5], [2, 1, 1, 3, 4, 4, 4]
    assert scoring.kendall_tau(xs, ys) == pytest.approx(kendalltau(xs, ys).statistic)
    assert scoring.kendall_tau(xs, ys) != pytest.approx(kendalltau(xs, ys, variant="c").statistic)
    assert math.isnan(scoring.kendall_tau([1], [2]))
    assert math.isnan(scoring.kendall_tau([1, 1, 1], [1, 2, 3]))  # no order on one side


def test_errors_are_scored_on_step_time():
    # twice too slow: the step +100%, images/s -50%; twice too fast: -50% and +100%
    assert scoring.error_pct(0.2, 0.1) == pytest.approx(100.0)
    assert scoring.error_pct(8 / 0.2, 8 / 0.1) == pytest.approx(-50.0)
    assert scoring.error_pct(0.05, 0.1) == pytest.approx(-50.0)
    assert math.isnan(scoring.error_pct(math.nan, 0.1))
    assert math.isnan(scoring.error_pct(0.1, 0.0))
    # an images/s interval as a step interval: the slow end of the rate is the long step
    assert scoring.step_interval(8, 80.0, 160.0) == pytest.approx((0.05, 0.1))
    assert scoring.step_interval(8, math.nan, 160.0) is None


def scored_row(method, predicted_s, measured_s, inside=None, batch=8):
    """A check row as check_rows writes it, from a predicted and a measured step."""
    p, m = batch / predicted_s, batch / measured_s
    return {
        "method": method,
        "predicted_step_s": predicted_s,
        "measured_step_s": measured_s,
        "error_pct": scoring.error_pct(predicted_s, measured_s),
        "predicted_images_per_s": p,
        "measured_images_per_s": m,
        "images_per_s_error_pct": scoring.error_pct(p, m),
        "in_interval": inside,
        "images_per_s_in_interval": inside,
    }


def test_check_summary_by_hand_on_both_units():
    rows = [
        scored_row("model", 0.2, 0.1, True),  # step +100%, images/s -50%
        scored_row("model", 0.1, 0.2, False),  # step -50%, images/s +100%
        scored_row("model", 0.3, 0.25, True),  # step +20%, images/s -16.7%
        scored_row("roofline_measured", 0.01, 0.1),  # step -90%, images/s +900%
        scored_row("roofline_measured", 0.04, 0.2),  # step -80%, images/s +400%
        {"method": "roofline_datasheet", "error_pct": math.nan},  # no prediction: left out
    ]
    model, roof = scoring.check_summary(rows)
    assert model["method"] == "model" and model["n"] == 3
    assert model["mape_pct"] == pytest.approx((100 + 50 + 20) / 3)
    assert model["max_abs_error_pct"] == pytest.approx(100.0)
    assert model["images_per_s_mape_pct"] == pytest.approx((50 + 100 + 100 / 6) / 3)
    assert model["images_per_s_max_abs_error_pct"] == pytest.approx(100.0)
    # predicted steps 0.2, 0.1, 0.3 against 0.1, 0.2, 0.25: the first pair is ordered
    # the other way round, the other two pairs the same way: (2 - 1) / 3
    assert model["kendall_tau"] == pytest.approx(1 / 3)
    assert model["images_per_s_kendall_tau"] == pytest.approx(1 / 3)  # one batch: same order
    assert model["coverage"] == pytest.approx(2 / 3)
    assert model["images_per_s_coverage"] == pytest.approx(2 / 3)
    assert roof["mape_pct"] == pytest.approx(85.0)
    assert roof["images_per_s_mape_pct"] == pytest.approx(650.0)
    assert math.isnan(roof["coverage"]) and math.isnan(roof["images_per_s_coverage"])


def test_kendall_tau_differs_between_the_units_across_batches():
    # batch 8 at 0.1 s (80 img/s) and batch 64 at 0.4 s (160 img/s): the longer step is
    # the faster rate, so a model right on steps and wrong on rates shows in the two taus
    rows = [
        scored_row("model", 0.1, 0.1, batch=8),
        scored_row("model", 0.4, 0.4, batch=64),
        scored_row("model", 0.3, 0.2, batch=8),
    ]
    (model,) = scoring.check_summary(rows)
    steps = ([0.1, 0.4, 0.3], [0.1, 0.4, 0.2])
    rates = ([80, 160, 8 / 0.3], [80, 160, 40])
    assert model["kendall_tau"] == pytest.approx(kendalltau(*steps).statistic)
    assert model["images_per_s_kendall_tau"] == pytest.approx(kendalltau(*rates).statistic)


# --------------------------------------------------------------------------- files


def efficiency_doc(host=1e-5):
    """A CPU env's efficiency.json with one row per table: a constant efficiency; host
    costs of ``host`` per op and of FIXED_S for the step."""

    def row(eff):
        return {"flops": 1, "bytes": 1, "seconds": 1e-3 / eff, "ideal_s": 1e-3,
                "efficiency": eff, "what": "toy"}  # fmt: skip

    return {
        "schema_version": 2,
        "env": "local",
        "device": "cpu",
        "source": "sweep",
        "roofs": {"compute": {"fp32": ROOF_C}, "memory": ROOF_M},
        "dispatch": {
            "host_s": {"forward": {"conv": host, "elementwise": host}, "backward": {}},
            "fixed": {"fp32": {"intercept_s": 1e-4, "per_param_tensor_s": 1e-6}},
            "launch_s_per_op": None,
            "method": "toy",
        },
        "tables": {"fp32": {k: [row(e)] for k, e in EFFICIENCY.items()}},
    }


CEILINGS = {
    "env": "local",
    "device": "cpu",
    "roofs": [
        {"kind": "compute", "precision": "fp32", "source": "measured", "value": ROOF_C},
        {"kind": "memory", "precision": None, "source": "measured", "value": ROOF_M},
        {"kind": "compute", "precision": "fp32", "source": "datasheet", "value": 2 * ROOF_C},
        {"kind": "memory", "precision": None, "source": "datasheet", "value": 2 * ROOF_M},
    ],
}
# the complexity JSON's whole step: 10 GFLOP and 30 MB (baselines), 1 GB peak memory
COMPLEXITY = {
    "arch": "toy",
    "batch_size": 8,
    "status": "ok",
    "flops": {"train_step": 10_000_000_000},
    "by_precision": {
        "fp32": {"traffic_bytes_per_step": 30_000_000, "peak_memory_bytes": 1_000_000_000}
    },
}
ENV_INFO = {"env": "local", "device": "cpu", "ram_bytes": 2_000_000_000}
POINT = ("local", "toy", "fp32", 8)


def predicted_rows(efficiency=None):
    envs = {"local": ap.EnvFiles("local", CEILINGS, efficiency or efficiency_doc(), ENV_INFO)}
    inventories = {("toy", "fp32", 8, "cpu"): ("toy_fp32_bs8_cpu_ops.json", INVENTORY)}
    complexity = {("toy", 8): ("toy_bs8.json", COMPLEXITY)}
    return ap.prediction_rows([POINT], [], inventories, complexity, envs)


def test_prediction_row_from_files():
    (row,) = predicted_rows()
    assert row["kind"] == "measured" and row["method"] == "model"
    step = DEVICE_S + CALLS * 1e-5 + FIXED_S
    assert row["predicted_step_s"] == pytest.approx(step)
    assert row["predicted_images_per_s"] == pytest.approx(8 / step)
    assert row["predicted_device_s"] == pytest.approx(DEVICE_S)
    assert row["predicted_host_s"] == pytest.approx(CALLS * 1e-5 + FIXED_S)
    assert row["bound"] == "memory"
    assert row["top_classes"] == "elementwise 75%; conv 25%"
    assert mf.parse_shares(row["class_shares"]) == pytest.approx(
        {"conv": 0.25, "elementwise": 0.75}
    )
    assert row["predicted_peak_memory_bytes"] == 1_000_000_000
    assert row["device_memory_bytes"] == 2_000_000_000 and row["fits"] is True
    assert math.isnan(row["interval_low_images_per_s"])  # one row per table: no residuals
    assert set(row) == set(ap.PREDICTION_COLUMNS)


def test_a_point_of_an_env_not_copied_in_yet_gets_a_row_without_figures():
    # env lab_box is measured on another machine; its results/lab_box/ is not here yet
    rows = ap.prediction_rows([("lab_box", "toy", "fp32", 8)], [], {}, {}, {})
    (row,) = rows
    assert set(row) == set(ap.PREDICTION_COLUMNS) and row["env"] == "lab_box"
    assert math.isnan(row["predicted_images_per_s"])
    assert row["notes"] == "no prediction: env lab_box has no ceilings.json here"


def test_no_point_predicts_itself(tmp_path):
    """The predicting path takes no metrics and no runs, and its output does not move
    when they change."""
    for fn in (ap.prediction_rows, ap.predict_point, pr.predict_step):
        params = set(inspect.signature(fn).parameters)
        assert not params & {"metrics", "runs", "measured"}, fn.__name__
    import predict as script

    files = {
        "ceilings": CEILINGS,
        "efficiency": efficiency_doc(),
        "env_info": ENV_INFO,
        "complexity": COMPLEXITY,
        "ops": INVENTORY,
    }
    for name, doc in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    args = [
        "--point", *map(str, POINT),
        "--inventories", str(tmp_path / "ops.json"),
        "--complexity", str(tmp_path / "complexity.json"),
        "--ceilings", str(tmp_path / "ceilings.json"),
        "--efficiency", str(tmp_path / "efficiency.json"),
        "--env-info", str(tmp_path / "env_info.json"),
    ]  # fmt: skip
    metrics = tmp_path / "metrics.csv"
    runs = tmp_path / "local" / "runs"
    runs.mkdir(parents=True)
    outs = []
    for speed in (100.0, 1.0):  # the measured throughput changes a hundredfold
        metrics.write_text(f"run_id,env,images_per_s\nlocal_toy_fp32_bs8_run1,local,{speed}\n")
        (runs / "local_toy_fp32_bs8_run1.json").write_text(json.dumps({"images_per_s": speed}))
        out = tmp_path / f"predictions_{speed}.csv"
        assert script.main([*args, "--out", str(out)]) == 0
        outs.append(out.read_text())
    assert outs[0] == outs[1]
    with pytest.raises(SystemExit):  # no way to hand it the runs
        script.main([*args, "--metrics", str(metrics), "--out", str(tmp_path / "x.csv")])


def metrics_frame(speeds, device="cpu", batch=8, rss_before=None, **point):
    """Runs of one point: (status, images/s) each, their median step batch / images/s."""
    return pd.DataFrame(
        [
            {"env": "local", "model": "toy", "precision": "fp32", "batch_size": batch,
             "status": s, "images_per_s": v, "step_median_s": batch / v if v else None,
             "device": device, "max_rss_bytes": 900_000_000 + i,
             "rss_before_model_bytes": rss_before, "peak_device_memory_bytes": None, **point}
            for i, (s, v) in enumerate(speeds)
        ]
    )  # fmt: skip


def model_prediction(step=0.06405, low=math.nan, high=math.nan):
    """The model's row of predictions.csv for POINT, as prediction_rows writes it (made
    by hand: the check's tests stand apart from the predicting half)."""
    env, model, precision, batch = POINT
    return {"env": env, "model": model, "precision": precision, "batch": batch,
            "kind": "measured", "env_source": "study", "method": "model",
            "predicted_step_s": step, "predicted_images_per_s": batch / step,
            "interval_low_images_per_s": low, "interval_high_images_per_s": high,
            "notes": "toy tables"}  # fmt: skip


def check_of(metrics, predictions=None):
    return ac.check_rows(
        [model_prediction()] if predictions is None else predictions,
        metrics,
        {("toy", 8): ("toy_bs8.json", COMPLEXITY)},
        {"local": ("ceilings.json", CEILINGS)},
        {("toy", "fp32", 8, "cpu"): ("toy_fp32_bs8_cpu_ops.json", INVENTORY)},
    )


def model_row(rows):
    (row,) = [r for r in rows if r["method"] == "model"]
    return row


def test_prediction_check_rows_per_method():
    # ok runs at 100, 160, 80 images/s (median 100; steps 80, 50, 100 ms, median 80 ms);
    # the failed one is not counted
    metrics = metrics_frame([("ok", 100.0), ("ok", 160.0), ("ok", 80.0), ("error", None)])
    rows = check_of(metrics)
    assert [r["method"] for r in rows] == list(ac.METHODS)
    by = {r["method"]: r for r in rows}
    assert all(r["measured_images_per_s"] == 100.0 for r in rows)
    assert all(r["measured_step_s"] == pytest.approx(0.08) for r in rows)
    # datasheet roofs 2 TFLOP/s, 20 GB/s: max(5 ms, 1.5 ms); measured: max(10 ms, 3 ms)
    assert by["roofline_datasheet"]["predicted_step_s"] == pytest.approx(0.005)
    assert by["roofline_measured"]["predicted_step_s"] == pytest.approx(0.010)
    assert by["per_op_roofline"]["predicted_step_s"] == pytest.approx(0.020)
    # the toy ceilings hold roofs only, no roof GEMM or convolution to derive tables from
    assert math.isnan(by["model_ceilings"]["predicted_step_s"])
    assert by["model_ceilings"]["note"].startswith(
        "model_ceilings: op-class tables derived from ceilings.json (no sweep): fp32 has no"
    )
    assert by["model"]["predicted_step_s"] == pytest.approx(0.06405)
    assert by["model"]["predicted_images_per_s"] == pytest.approx(8 / 0.06405)
    # errors on step time, images/s beside them: 10 ms for 80 ms is -87.5%, and 800
    # images/s for 100 is +700%
    assert by["roofline_measured"]["error_pct"] == pytest.approx(-87.5)
    assert by["roofline_measured"]["images_per_s_error_pct"] == pytest.approx(700.0)
    assert by["model"]["error_pct"] == pytest.approx(100 * (0.06405 - 0.08) / 0.08)
    # model_loo has one point of one family on this env: no fit, and it says why
    assert math.isnan(by["model_loo"]["predicted_step_s"])
    assert math.isnan(by["model_loo"]["error_pct"])
    assert by["model_loo"]["note"].startswith("no prediction: ")
    # peak memory: the complexity JSON's against the runs' highest max RSS (a CPU; runs
    # without the RSS before the model: the runtime is in it, and the note says so)
    assert by["model"]["measured_peak_memory_bytes"] == 900_000_002
    assert by["model"]["measured_peak_memory_source"] == "max_rss_bytes"
    assert "runs without rss_before_model_bytes" in by["model"]["note"]
    assert by["model"]["predicted_peak_memory_bytes"] == 1_000_000_000
    assert by["model"]["in_interval"] is None and set(rows[0]) == set(ac.CHECK_COLUMNS)


def test_a_prediction_twice_too_slow_scores_plus_100_on_step_time():
    # the model predicts 64.05 ms; runs of 32.025 ms (twice as fast) score +100% on step
    # time and -50% on images/s; 249.8 img/s is inside an interval of [50, 300] img/s,
    # and its step inside [26.7, 160] ms
    row = model_prediction(low=50.0, high=300.0)
    speed = 8 / (0.06405 / 2)
    model = model_row(check_of(metrics_frame([("ok", speed)]), [row]))
    assert model["measured_step_s"] == pytest.approx(0.06405 / 2)
    assert model["error_pct"] == pytest.approx(100.0)
    assert model["images_per_s_error_pct"] == pytest.approx(-50.0)
    assert model["in_interval"] is True and model["images_per_s_in_interval"] is True
    fast = model_prediction(low=50.0, high=200.0)
    model = model_row(check_of(metrics_frame([("ok", speed)]), [fast]))
    # 249.8 img/s is above the interval's 200: the step, 32 ms, is under its 40 ms
    assert model["in_interval"] is False and model["images_per_s_in_interval"] is False


def test_a_cpu_points_measured_peak_leaves_the_runtime_out():
    runs = metrics_frame([("ok", 100.0), ("ok", 100.0)], rss_before=600_000_000)
    row = model_row(check_of(runs))
    # the larger of max RSS less the RSS before the model: 900_000_001 - 600_000_000
    assert row["measured_peak_memory_bytes"] == 300_000_001
    assert row["measured_peak_memory_source"] == ac.RSS_ABOVE_RUNTIME
    assert "rss_before_model" not in row["note"]
    # on CUDA the peak device memory, whatever the RSS
    cuda = metrics_frame([("ok", 100.0)], device="cuda:0", rss_before=600_000_000).assign(
        peak_device_memory_bytes=5_000
    )
    row = model_row(check_of(cuda))
    assert row["measured_peak_memory_bytes"] == 5_000
    assert row["measured_peak_memory_source"] == "peak_device_memory_bytes"


def test_check_refuses_a_measured_point_without_a_prediction():
    metrics = metrics_frame([("ok", 100.0)])
    with pytest.raises(InputError, match="predictions.csv has no model row"):
        ac.check_rows(
            [],
            metrics,
            {("toy", 8): ("c", COMPLEXITY)},
            {"local": ("ceilings.json", CEILINGS)},
            {("toy", "fp32", 8, "cpu"): ("i", INVENTORY)},
        )


def test_a_model_that_cannot_run_gets_a_row_without_figures():
    failed = {"status": "error", "message": "too small for its kernels", "arch": "toy"}
    row = ap.predict_point(POINT, failed, None, complexity=None, device_memory=None, where="x.json")
    assert set(row) == set(ap.PREDICTION_COLUMNS)
    assert math.isnan(row["predicted_images_per_s"])
    assert row["notes"] == "no prediction: x.json: too small for its kernels"


def test_check_summary_reads_interval_flags_from_a_csv(tmp_path):
    path = tmp_path / "check.csv"
    pd.DataFrame([scored_row("model", 0.1, 0.1, True), scored_row("model", 0.2, 0.1, None)]).to_csv(
        path, index=False
    )
    (model,) = scoring.check_summary(pd.read_csv(path).to_dict("records"))
    assert model["coverage"] == 1.0 and model["n"] == 2
    assert model["images_per_s_coverage"] == 1.0


def test_check_refuses_runs_of_another_image_size():
    metrics = metrics_frame([("ok", 100.0)]).assign(image_size=128, run_id="r1")
    with pytest.raises(InputError, match="image_size 128"):
        ac.check_rows(
            [model_prediction()],
            metrics,
            {("toy", 8): ("c", {**COMPLEXITY, "image_size": 224})},
            {"local": ("ceilings.json", CEILINGS)},
            {("toy", "fp32", 8, "cpu"): ("i", INVENTORY)},
        )


def test_a_point_the_model_could_not_predict_keeps_its_reason_in_the_check():
    unpredicted = {**model_prediction(), "predicted_step_s": math.nan,
                   "predicted_images_per_s": math.nan,
                   "notes": "no prediction: toy_ops.json: too small for its kernels"}  # fmt: skip
    row = model_row(check_of(metrics_frame([("ok", 100.0)]), [unpredicted]))
    assert math.isnan(row["error_pct"]) and math.isnan(row["images_per_s_error_pct"])
    assert row["note"].startswith("no prediction: toy_ops.json: too small for its kernels")
