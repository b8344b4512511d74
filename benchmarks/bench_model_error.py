"""Issue 28: how wrong is the model, beside the roofline baselines, on every study.

    python benchmarks/bench_model_error.py [--workdir /tmp/model-error] \\
        [--studies default four_models unseen h100] [--out model_error.json]

Studies (each a real workflow run in its own folder under --workdir, env ``local``):

* ``default``: config/config.yaml as it is (resnet18, mobilenet_v2, resnet50 at batch 8
  and 16, fp32, 128 px, 3 runs); its whole default target is timed (``make study``'s
  jobs without the install and the report).
* ``four_models``: resnet18, resnet50, mobilenet_v2 and vgg16 at batch 8 and 16, the
  default study's other settings.
* ``unseen``: models the model was not built or tuned on (efficientnet_b0,
  shufflenet_v2_x1_0, densenet121) at batch 8 and 16.
* ``h100``: the five committed points of examples/h100, predicted from that env's
  ceilings.json (no sweep ran there) and inventories computed here, checked against its
  metrics.csv.

Per study: every method's n, MAPE, max |error|, Kendall tau and interval coverage
(``check_summary``), the model's error per point and the wall time. Prints markdown for
BENCHMARKS.md and writes the JSON to --out. Run it alone on the machine: it measures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from dnnroofline.model.scoring import check_summary

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "examples" / "h100"
H100_POINTS = [
    ("h100", "resnet18", "fp32", 128),
    ("h100", "resnet18", "amp", 128),
    ("h100", "resnet18", "bf16", 128),
    ("h100", "resnet50", "amp", 256),
    ("h100", "resnet50", "bf16", 256),
]
STUDY_MODELS = {
    "four_models": ["resnet18", "resnet50", "mobilenet_v2", "vgg16"],
    "unseen": ["efficientnet_b0", "shufflenet_v2_x1_0", "densenet121"],
}
TARGETS = ["results/prediction_check.csv", "results/predictions.csv"]


def study_config(name: str) -> dict:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    if name != "default":
        config["study"]["models"] = STUDY_MODELS[name]
    return config


def run_study(name: str, work: Path, cores: int) -> tuple[pd.DataFrame, float]:
    """The study's prediction_check.csv and the wall seconds of its snakemake call."""
    work.mkdir(parents=True, exist_ok=True)
    cfg = work / "config.yaml"
    cfg.write_text(yaml.safe_dump(study_config(name), sort_keys=False))
    snakemake = str(Path(sys.executable).parent / "snakemake")
    cmd = [snakemake, "-s", str(ROOT / "Snakefile"), "-d", str(work), "--configfile", str(cfg)]
    cmd += ["--cores", str(cores)] + ([] if name == "default" else TARGETS)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"{name}: snakemake failed:\n{proc.stderr[-4000:]}")
    return pd.read_csv(work / "results" / "prediction_check.csv"), wall


def run_h100(work: Path) -> tuple[pd.DataFrame, float]:
    """The five H100 points predicted through the entry scripts (as the H100 test)."""
    sys.path.insert(0, str(ROOT / "workflow" / "scripts"))  # the entry scripts' main()
    import check_predictions
    import predict
    from dnnroofline.model import complexity as cx
    from dnnroofline.model.op_inventory import op_inventory

    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    inventories, complexity = [], []
    for _, model, precision, batch in H100_POINTS:
        # the step as the H100 ran it: on CUDA, channels_last (examples/h100/config.yaml)
        path = work / f"{model}_{precision}_bs{batch}_cuda_cl_ops.json"
        doc = op_inventory(
            model,
            precision=precision,
            batch_size=batch,
            image_size=224,
            device="cuda",
            channels_last=True,
        )
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
    return pd.read_csv(check), time.monotonic() - t0


def summary_table(summary: list[dict]) -> str:
    rows = [
        "| method | n | MAPE | max abs error | Kendall tau | coverage |",
        "|---|---|---|---|---|---|",
    ]
    for s in summary:
        cov = "" if s["coverage"] != s["coverage"] else f"{s['coverage']:.0%}"
        rows.append(
            f"| {s['method']} | {s['n']} | {s['mape_pct']:.1f}% | {s['max_abs_error_pct']:.1f}% "
            f"| {s['kendall_tau']:.2f} | {cov} |"
        )
    return "\n".join(rows)


def points_table(check: pd.DataFrame) -> str:
    model = check[check["method"] == "model"]
    rows = ["| point | predicted img/s | measured img/s | error |", "|---|---|---|---|"]
    for r in model.itertuples():
        rows.append(
            f"| {r.env} {r.model} {r.precision} bs{r.batch} | {r.predicted_images_per_s:.1f} "
            f"| {r.measured_images_per_s:.1f} | {r.error_pct:+.1f}% |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default=None)
    ap.add_argument(
        "--studies", nargs="+", default=["default", "four_models", "unseen", "h100"],
        choices=["default", "four_models", "unseen", "h100"],
    )  # fmt: skip
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out", default="model_error.json")
    args = ap.parse_args()
    base = Path(args.workdir or tempfile.mkdtemp(prefix="model-error-"))
    report: dict[str, dict] = {}
    for name in args.studies:
        work = base / name
        check, wall = run_h100(work) if name == "h100" else run_study(name, work, args.cores)
        summary = check_summary(check.to_dict("records"))
        report[name] = {"wall_s": wall, "summary": summary, "rows": check.to_dict("records")}
        print(f"\n### {name} ({wall:.0f} s)\n\n{summary_table(summary)}\n\n{points_table(check)}")
    Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"\n-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
