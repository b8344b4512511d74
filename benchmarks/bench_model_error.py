"""Issue 36: how wrong is the model on what it never saw, beside the baselines.

    python benchmarks/bench_model_error.py [--workdir /tmp/model-error] \\
        [--studies default zoo h100] [--out model_error.json]

Studies (each a real workflow run in its own folder under --workdir, env ``local``, its
own ceilings, op-class sweep and timed runs; nothing shared between them):

* ``default``: config/config.yaml as it is (resnet18, mobilenet_v2, resnet50 at batch 8
  and 16, fp32, 128 px, 3 runs); its whole default target is timed.
* ``zoo``: :data:`ZOO`, 12 torchvision models of 10 families at 64 px, batch 8 and 16,
  fp32, 2 runs each. The sweep draws its shapes over fixed ranges and never from a
  model; none of these models was used to build it, and none of its figures was looked
  at before the sweep, the fit and the dispatch model were fixed (see BENCHMARKS.md).
  ``model_loo`` leaves each point's whole family out of its fit.
* ``h100``: the five committed points of examples/h100, predicted from that env's
  ceilings.json (no sweep ran there: no host costs either) and inventories recorded
  here as the H100 ran the step (CUDA, channels_last), checked against its metrics.csv.

Per study: every method's n, MAPE, max |error|, Kendall tau and interval coverage on
step time and on images/s (``check_summary``), the 80% interval's half-width at its
median, the model's and model_loo's error per point, the sweep's time and the study's
wall time. Prints markdown for BENCHMARKS.md and writes the JSON to --out. Run it alone
on the machine: it measures. ``XDG_CACHE_HOME`` points at the work folder, so that each
study measures its own sweep (none is reused from the user's cache).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from dnnroofline.perfmodel.scoring import check_summary

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "examples" / "h100"
H100_POINTS = [
    ("h100", "resnet18", "fp32", 128),
    ("h100", "resnet18", "amp", 128),
    ("h100", "resnet18", "bf16", 128),
    ("h100", "resnet50", "amp", 256),
    ("h100", "resnet50", "bf16", 256),
]
#: 12 models of 10 families (dnnroofline.study.families), all able to train at 64 px.
ZOO = [
    "resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
    "shufflenet_v2_x1_0", "squeezenet1_1", "densenet121", "regnet_x_400mf", "mnasnet0_5",
    "vgg11", "convnext_tiny",
]  # fmt: skip
TARGETS = ["results/prediction_check.csv", "results/predictions.csv"]


def study_config(name: str) -> dict:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    if name == "zoo":
        config["study"].update(models=ZOO, image_size=64, batch_sizes=[8, 16], runs=2)
    return config


def run_study(
    name: str, work: Path, cores: int, config: dict | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The study's prediction_check.csv, predictions.csv and its times (``config``: the
    study's, else :func:`study_config` of ``name``)."""
    work.mkdir(parents=True, exist_ok=True)
    cfg = work / "config.yaml"
    cfg.write_text(yaml.safe_dump(config or study_config(name), sort_keys=False))
    snakemake = str(Path(sys.executable).parent / "snakemake")
    cmd = [snakemake, "-s", str(ROOT / "Snakefile"), "-d", str(work), "--configfile", str(cfg)]
    cmd += ["--cores", str(cores)] + ([] if name == "default" else TARGETS)
    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"{name}: snakemake failed:\n{proc.stderr[-4000:]}")
    results = work / "results"
    sweep = pd.read_csv(results / "local" / "benchmarks" / "efficiency.tsv", sep="\t")
    times = {"wall_s": wall, "efficiency_job_s": float(sweep["s"].iloc[0])}
    return (
        pd.read_csv(results / "prediction_check.csv"),
        pd.read_csv(results / "predictions.csv"),
        times,
    )


def run_h100(work: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The five H100 points predicted through the entry scripts (as the H100 test)."""
    sys.path.insert(0, str(ROOT / "workflow" / "scripts"))  # the entry scripts' main()
    import check_predictions
    import predict
    from dnnroofline.estimate import complexity as cx
    from dnnroofline.estimate.op_inventory import op_inventory

    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    inventories, complexity = [], []
    for _, model, precision, batch in H100_POINTS:
        # the step as the H100 ran it: on CUDA, channels_last (examples/h100/config.yaml)
        path = work / f"{model}_{precision}_bs{batch}_cuda_cl_ops.json"
        doc = op_inventory(model, precision=precision, batch_size=batch, image_size=224,
                           device="cuda", channels_last=True)  # fmt: skip
        path.write_text(json.dumps(doc))
        inventories.append(str(path))
    for model, batch in sorted({(m, b) for _, m, _, b in H100_POINTS}):
        path = work / f"{model}_bs{batch}.json"
        path.write_text(json.dumps(cx.complexity(model, batch, 224)))
        complexity.append(str(path))
    results = H100 / "results" / "h100"
    points = [a for e, m, p, b in H100_POINTS for a in ("--point", e, m, p, str(b))]
    common = ["--inventories", *inventories, "--complexity", *complexity]
    common += ["--ceilings", str(results / "ceilings.json")]
    pred, check = work / "predictions.csv", work / "prediction_check.csv"
    config = work / "study_config.json"  # the env's layout: its inventories' variant
    config.write_text(json.dumps({"envs": {"h100": {"device": "cuda", "channels_last": True}}}))
    predict.main(
        [*points, *common, "--config", str(config), "--env-info", str(results / "env_info.json")]
        + ["--out", str(pred)]
    )
    check_predictions.main(
        ["--predictions", str(pred), "--metrics", str(H100 / "metrics.csv"), *common]
        + ["--ncu", *map(str, sorted((results / "ncu").glob("h100_*.json")))]
        + ["--classes-out", str(work / "prediction_classes.csv"), "--out", str(check)]
    )
    return pd.read_csv(check), pd.read_csv(pred), {"wall_s": time.monotonic() - t0}


def interval_half_width(predictions: pd.DataFrame) -> float:
    """The model's 80% interval on step time, its half-width over the predicted step,
    the median over the points that have one."""
    rows = predictions[(predictions["method"] == "model") & (predictions["kind"] == "measured")]
    widths = []
    for r in rows.itertuples():
        low_ips, high_ips = r.interval_low_images_per_s, r.interval_high_images_per_s
        if not (math.isfinite(low_ips) and math.isfinite(high_ips)):
            continue
        slow, fast = r.batch / low_ips, r.batch / high_ips  # step seconds at each end
        widths.append((slow - fast) / 2 / r.predicted_step_s)
    return float(pd.Series(widths).median()) if widths else math.nan


def summary_table(summary: list[dict]) -> str:
    rows = [
        "| method | n | step MAPE | step max | τ | coverage | images/s MAPE | images/s max |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        cov = "" if s["coverage"] != s["coverage"] else f"{s['coverage']:.0%}"
        rows.append(
            f"| {s['method']} | {s['n']} | {s['mape_pct']:.1f}% | {s['max_abs_error_pct']:.1f}% "
            f"| {s['kendall_tau']:.2f} | {cov} | {s['images_per_s_mape_pct']:.1f}% "
            f"| {s['images_per_s_max_abs_error_pct']:.1f}% |"
        )
    return "\n".join(rows)


def points_table(check: pd.DataFrame) -> str:
    rows = [
        "| point | measured step | model | error | model_loo | error |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    by = {m: check[check["method"] == m].set_index(["model", "precision", "batch"])
          for m in ("model", "model_loo")}  # fmt: skip
    for key, r in by["model"].iterrows():
        loo = by["model_loo"].loc[key] if key in by["model_loo"].index else None
        loo_step = f"{loo.predicted_step_s * 1e3:.0f} ms" if loo is not None and math.isfinite(
            loo.predicted_step_s) else ""  # fmt: skip
        loo_err = f"{loo.error_pct:+.1f}%" if loo_step else ""
        rows.append(
            f"| {' '.join(map(str, key))} | {r.measured_step_s * 1e3:.0f} ms "
            f"| {r.predicted_step_s * 1e3:.0f} ms | {r.error_pct:+.1f}% | {loo_step} | {loo_err} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--studies", nargs="+", default=["default", "zoo", "h100"],
                    choices=["default", "zoo", "h100"])  # fmt: skip
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out", default="model_error.json")
    args = ap.parse_args()
    base = Path(args.workdir or tempfile.mkdtemp(prefix="model-error-"))
    report: dict[str, dict] = {}
    for name in args.studies:
        work = base / name
        check, preds, times = (
            run_h100(work) if name == "h100" else run_study(name, work, args.cores)
        )
        summary = check_summary(check.to_dict("records"))
        width = interval_half_width(preds)
        report[name] = {**times, "interval_half_width_at_median": width, "summary": summary,
                        "rows": check.to_dict("records")}  # fmt: skip
        print(f"\n### {name} ({times['wall_s']:.0f} s; interval ±{width:.0%} at its median)\n")
        print(f"{summary_table(summary)}\n\n{points_table(check)}")
    Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"\n-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
