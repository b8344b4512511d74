"""The op-class sweep before and after it covered a network's last stages, side by side.

    python benchmarks/bench_sweep_coverage.py [--workdir /tmp/sweep-coverage] \\
        [--out benchmarks/results/sweep_coverage.json]

The change under test (``dnnroofline.measure``): a convolution's map may be smaller than
its kernel (it was drawn at least kernel-sized, so a 3x3 on 2x2 or a 5x5 depthwise on 4x4,
which a network's last stages run at small images, was never timed), and more rows for
the tables that were thinnest for what a CNN spends there (depthwise 30 -> 60 each way,
normalization 20 -> 48). The arm ``before`` is the sweep as it was: :data:`BEFORE_ROWS`
and :func:`conv_shape_before`, patched in for its measurement alone.

Two real studies, each measured once: bench_model_error.py's ``zoo`` (12 models, whose
layers motivated the change) and :data:`HOLDOUT` (7 torchvision models no issue or
benchmark had run before this one, none looked at while the change was made). Then four
sweeps on this machine, one after the other, in the order before, after, before, after
(the host is shared: a drift shows as the gap between an arm's two rounds), and each
study's predictions and check made again from each sweep (snakemake reruns them; the
runs are not measured again). So every arm reads the same runs. Between the rounds,
every convolution, batch norm and GEMM shape of both studies' steps is timed the sweep's
way (its builders, inputs and timer): each arm's tables are scored on those shapes as
well, per table.

Writes per arm and round the model's and model_loo's summary on each study and the
tables' errors on the held-out shapes, and prints markdown for BENCHMARKS.md. Run it
alone on the machine: it measures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

from bench_model_error import run_study, study_config, summary_table

from dnnroofline.estimate.op_classes import table_key
from dnnroofline.estimate.op_rules import fresh_outputs
from dnnroofline.measure import fresh_pages, op_class_sweep, sweep_ops
from dnnroofline.perfmodel import op_class_tables
from dnnroofline.perfmodel.scoring import check_summary

#: Models of 7 families beside the zoo's, trainable at 64 px.
HOLDOUT = [
    "mobilenet_v3_large", "regnet_y_400mf", "mnasnet1_0", "shufflenet_v2_x0_5",
    "efficientnet_b1", "resnet34", "squeezenet1_0",
]  # fmt: skip
#: The CPU tables' rows before the change (the others are as they are).
BEFORE_ROWS = {"conv_depthwise_fwd": 30, "conv_depthwise_bwd": 30, "normalization": 20}
SCORED = ("conv_fwd", "conv_bwd", "conv_depthwise_fwd", "conv_depthwise_bwd", "normalization",
          "gemm")  # fmt: skip


def conv_shape_before(d: sweep_ops.Draw, depthwise: bool, backward: bool) -> dict:
    """The draw as it was: the map at least as large as the kernel."""
    shape = None
    while shape is None or shape["h"] < shape["kh"]:
        shape = CONV_SHAPE(d, depthwise, backward)
    return shape


CONV_SHAPE = sweep_ops.conv_shape


@contextlib.contextmanager
def arm(name: str):
    """The sweep's code as arm ``name`` measures it."""
    if name == "after":
        yield
        return
    rows = op_class_sweep.ROWS["cpu"]
    op_class_sweep.ROWS["cpu"] = {**rows, **BEFORE_ROWS}
    sweep_ops.conv_shape = conv_shape_before
    try:
        yield
    finally:
        op_class_sweep.ROWS["cpu"], sweep_ops.conv_shape = rows, CONV_SHAPE


def sweep(name: str, results: Path) -> dict:
    ceilings = json.loads((results / "local" / "ceilings.json").read_text())
    with arm(name):
        return op_class_sweep.sweep_env("local", "cpu", ["fp32"], ceilings, where="ceilings.json",
                                        budget_s=None, quick=False, channels_last=False,
                                        expect_threads=None, use_cache=False)  # fmt: skip


def held_out_rows(inventories: list[Path]) -> list[dict]:
    """Every convolution, batch norm and GEMM shape of the inventories, timed as the
    sweep times its rows (a shape the sweep's builders cannot make is left out)."""
    import torch

    pool = sweep_ops.Pool(torch, "cpu", op_class_sweep.POOL_ELEMENTS["cpu"])
    setting = sweep_ops.Setting(torch, pool, "fp32", False,
                                cold_bytes=2 * op_class_sweep.DEFAULT_CACHE_BYTES)  # fmt: skip
    out, seen = [], set()
    for path in inventories:
        for op in json.loads(path.read_text())["ops"]:
            key, shape, backward = table_key(op), op["shape"], op["phase"] == "backward"
            ident = json.dumps([key, shape, op["phase"]], sort_keys=True)
            if ident in seen:
                continue
            seen.add(ident)
            try:
                with torch.no_grad():
                    if key.startswith("conv"):
                        built = sweep_ops.conv_op(setting, shape, backward, key)
                    elif op.get("layer") == "batchnorm":
                        act = (shape["n"], shape["c"], shape["spatial"], 1)
                        built = sweep_ops.batch_norm_op(setting, act, backward)
                    elif key == "gemm" and op["name"] in ("aten.mm.default", "aten.addmm.default"):
                        built = sweep_ops.gemm_op(setting, {k: shape[k] for k in "mnk"})
                    else:
                        continue
                    seconds, _ = op_class_sweep._time_op("cpu", built, op_class_sweep.TIMING["cpu"])
                    fresh = fresh_outputs(built.call(), pool.buffers())
            except (sweep_ops.Rejected, RuntimeError):  # e.g. a patchify conv: no padding
                continue
            out.append({"key": key, "phase": built.phase, "shape": built.shape,
                        "flops": built.flops, "bytes": built.nbytes, "seconds": seconds,
                        **({"fresh_bytes": fresh} if fresh else {})})  # fmt: skip
    return out


def table_errors(doc: dict, held_out: list[dict]) -> dict:
    """Per table: the median |log(measured / predicted)| over the held-out shapes, and the
    predicted sum of their times against the measured one."""
    tables = op_class_tables.load_tables(doc, "efficiency.json")
    roof_c, roof_m = doc["roofs"]["compute"]["fp32"], doc["roofs"]["memory"]
    bare, paging = doc["dispatch"]["bare_s"], doc["dispatch"].get("fresh_pages")
    out = {}
    for key in SCORED:
        rows = [r for r in held_out if r["key"] == key]
        if not rows:
            continue
        items, took = [], []
        for r in rows:
            items.append({**r, "ideal_s": max(r["flops"] / roof_c, r["bytes"] / roof_m)})
            device = (r["seconds"] - bare[op_class_tables.TABLE_CLASS.get(key, key)]
                      - fresh_pages.seconds(r.get("fresh_bytes") or (), paging))  # fmt: skip
            took.append(max(device, r["seconds"] * op_class_tables.MIN_DEVICE_SHARE))
        effs, _, _ = tables.efficiencies("fp32", key, items)
        predicted = [i["ideal_s"] / e for i, e in zip(items, effs, strict=True)]
        errors = [abs(math.log(t / p)) for t, p in zip(took, predicted, strict=True)]
        out[key] = {"n": len(rows), "median_abs_log": statistics.median(errors),
                    "sum_error_pct": (sum(predicted) / sum(took) - 1) * 100}  # fmt: skip
    return out


def model_summary(check) -> list[dict]:
    return [s for s in check_summary(check.to_dict("records"))
            if s["method"] in ("model", "model_loo")]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out", default="sweep_coverage.json")
    args = ap.parse_args()
    base = Path(args.workdir or tempfile.mkdtemp(prefix="sweep-coverage-"))
    studies = {"zoo": study_config("zoo"), "holdout": study_config("zoo")}
    studies["holdout"]["study"]["models"] = HOLDOUT
    works = {name: base / name for name in studies}
    for name, config in studies.items():
        run_study(name, works[name], args.cores, config=config)
    report: dict = {"holdout_models": HOLDOUT, "before_rows": BEFORE_ROWS,
                    "after_rows": {k: op_class_sweep.ROWS["cpu"][k] for k in BEFORE_ROWS},
                    "rounds": []}  # fmt: skip
    held_out: list[dict] = []
    for round_no in (1, 2):
        if round_no == 2:
            steps = [w / "results" / "complexity" for w in works.values()]
            inventories = sorted(p for d in steps for p in d.glob("*_cpu_ops.json"))
            held_out = held_out_rows(inventories)
            report["held_out_rows"] = len(held_out)
        for name in ("before", "after"):
            doc = sweep(name, works["zoo"] / "results")
            entry = {"round": round_no, "arm": name, "sweep_wall_s": doc["wall_s"],
                     "rows": {k: len(v) for k, v in doc["tables"]["fp32"].items()},
                     "studies": {}}  # fmt: skip
            for study, work in works.items():
                (work / "results" / "local" / "efficiency.json").write_text(json.dumps(doc))
                check, _, _ = run_study(study, work, args.cores, config=studies[study])
                entry["studies"][study] = model_summary(check)
            entry["_doc"] = doc
            report["rounds"].append(entry)
    for entry in report["rounds"]:
        entry["tables_on_held_out"] = table_errors(entry.pop("_doc"), held_out)
        print(f"\n### round {entry['round']}, {entry['arm']} (sweep {entry['sweep_wall_s']:.0f} s)")
        for study, summary in entry["studies"].items():
            print(f"\n{study}:\n\n{summary_table(summary)}")
        print("\n| table | held-out shapes | median abs log error | sum error |")
        print("|---|---:|---:|---:|")
        for key, t in entry["tables_on_held_out"].items():
            print(f"| {key} | {t['n']} | {t['median_abs_log']:.2f} | {t['sum_error_pct']:+.0f}% |")
    Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"\n-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
