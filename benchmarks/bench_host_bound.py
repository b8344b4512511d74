"""Issue 36: is the host's cost per op right? Steps where the device has next to nothing
to do, predicted and measured.

    python benchmarks/bench_host_bound.py --efficiency results/local/efficiency.json \\
        [--models mobilenet_v3_small resnet18 ...] [--out host_bound.json]

At batch 2 and 32 px a training step's arithmetic is small, and its time is mostly the
host's: dispatching each op through autograd, and the step's fixed costs. Per model, the
driver (``run_train.py``, 5 warm-up and 30 timed steps, this machine's threads) measures
the step; the model predicts it from the env's op-class sweep (``--efficiency``, e.g.
the default study's) and an op inventory recorded here. Printed and written: measured
and predicted step, the prediction's device and host parts, the ops, and the time per
op the prediction lacks. Run it alone on the machine: it measures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["mobilenet_v3_small", "shufflenet_v2_x1_0", "efficientnet_b0", "resnet18"]
BATCH, IMAGE = 2, 32


def measured_step_s(arch: str, work: Path) -> float:
    out = work / f"{arch}.json"
    cmd = [sys.executable, str(ROOT / "workflow" / "scripts" / "run_train.py"), "--arch", arch,
           "--batch-size", str(BATCH), "--image-size", str(IMAGE), "--warmup-iters", "5",
           "--iters", "30", "--precision", "fp32", "--backend", "cpu", "--synthetic",
           "--out", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    return json.loads(out.read_text())["step_time_s"]["median"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--efficiency", required=True)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--out", default="host_bound.json")
    args = ap.parse_args()
    from dnnroofline.aggregate.predictions import machine_of
    from dnnroofline.estimate.op_inventory import op_inventory
    from dnnroofline.perfmodel.predict import predict_step

    machine = machine_of(json.loads(Path(args.efficiency).read_text()), args.efficiency)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.models:
            step = measured_step_s(arch, Path(tmp))
            inv = op_inventory(arch, precision="fp32", batch_size=BATCH, image_size=IMAGE)
            p = predict_step(inv, machine, "fp32")
            rows.append({"model": arch, "measured_step_s": step, "predicted_step_s": p.step_s,
                         "predicted_device_s": p.device_s, "predicted_host_s": p.host_s,
                         "ops": p.calls,
                         "missing_s_per_op": (step - p.step_s) / p.calls})  # fmt: skip
    print("| model | measured | predicted | device | host | ops | lacking per op |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['measured_step_s'] * 1e3:.1f} ms | "
              f"{r['predicted_step_s'] * 1e3:.1f} ms | {r['predicted_device_s'] * 1e3:.1f} ms | "
              f"{r['predicted_host_s'] * 1e3:.1f} ms | {r['ops']} | "
              f"{r['missing_s_per_op'] * 1e6:+.1f} µs |")  # fmt: skip
    doc = {"efficiency": args.efficiency, "batch": BATCH, "image_size": IMAGE, "rows": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
