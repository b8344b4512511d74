"""The model with and without the CPU's cost of pages fresh from the OS, side by side.

    python benchmarks/bench_fresh_pages.py [--workdir /tmp/fresh-pages] \\
        [--out benchmarks/results/fresh_pages.json]

One real run of bench_model_error.py's ``zoo`` study (12 torchvision models of 10
families at 64 px, batch 8 and 16, fp32, 2 runs each; its own ceilings, sweep and timed
runs). Its check is the model with fresh pages (``dispatch.fresh_pages`` of the env's
efficiency.json: each op's outputs at or above the threshold charged per byte, and the
same charge taken out of the swept ops' times). Then the same files with that block
taken out of efficiency.json, predictions and check made again (snakemake reruns them,
nothing is measured again): the model as it was before it. Both arms read the same
sweep and the same runs, so the difference is the charge alone. Writes each arm's
summary (``check_summary``) and the model's error per point, and prints markdown for
BENCHMARKS.md. Run it alone on the machine: it measures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd
from bench_model_error import run_study, summary_table

from dnnroofline.perfmodel.scoring import check_summary


def model_rows(check: pd.DataFrame) -> pd.DataFrame:
    rows = check[check["method"] == "model"]
    return rows.set_index(["model", "precision", "batch"])[["measured_step_s", "predicted_step_s",
                                                             "error_pct"]]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out", default="fresh_pages.json")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="fresh-pages-")) / "zoo"
    with_check, _, times = run_study("zoo", work, args.cores)
    efficiency = work / "results" / "local" / "efficiency.json"
    doc = json.loads(efficiency.read_text())
    block = doc["dispatch"].pop("fresh_pages")
    efficiency.write_text(json.dumps(doc, indent=1))
    without_check, _, _ = run_study("zoo", work, args.cores)  # reruns predictions and check
    arms = {"with": with_check, "without": without_check}
    report = {
        **times,
        "fresh_pages": {k: block[k] for k in ("threshold_bytes", "s_per_byte")},
        "arms": {
            name: {
                "summary": [
                    s
                    for s in check_summary(c.to_dict("records"))
                    if s["method"] in ("model", "model_loo")
                ],  # fmt: skip
                "model_rows": model_rows(c).reset_index().to_dict("records"),
            }
            for name, c in arms.items()
        },
    }
    for name, arm in report["arms"].items():
        print(f"\n### {name} fresh pages\n\n{summary_table(arm['summary'])}")
    side = model_rows(with_check).merge(model_rows(without_check)[["error_pct"]], left_index=True,
                                        right_index=True, suffixes=("", "_without"))  # fmt: skip
    print("\n| point | measured step | error with | error without |\n|---|---:|---:|---:|")
    for key, r in side.iterrows():
        print(f"| {' '.join(map(str, key))} | {r.measured_step_s * 1e3:.0f} ms "
              f"| {r.error_pct:+.1f}% | {r.error_pct_without:+.1f}% |")  # fmt: skip
    Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"\n-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
