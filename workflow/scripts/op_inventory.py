#!/usr/bin/env python
"""The op inventory of one training step: every operator, its class, FLOPs and bytes.

    python workflow/scripts/op_inventory.py --arch resnet18 --precision bf16 \\
        --batch-size 32 --image-size 224 [--num-classes 1000] \\
        [--device cpu|cuda] [--channels-last] --out ops.json

Writes the ops JSON (docs/contracts.md): one training step (forward, loss, backward,
SGD; GradScaler under amp) run on fake tensors as the device runs it (``--device cuda``
needs no GPU, only a CUDA build of torch) and recorded at dispatch, so any batch costs
the same; the method is in its ``method`` key and in ``dnnroofline.estimate.op_inventory``.
Nothing is downloaded (``weights=None``). A model that cannot train at this image size
is a result, not a crash: the JSON then holds ``status: "error"`` and the reason (no
totals, no ops) and the exit status is 0, as for complexity.py. Exit status 2 on bad
arguments (unknown model, precision or device, batch size below 1; a torch that cannot
make fake CUDA tensors for ``--device cuda``), with the reason on stderr and nothing
written.
"""

from __future__ import annotations

import argparse
import sys

from dnnroofline.errors import InputError
from dnnroofline.estimate.op_classes import parse_step_variant, step_variant
from dnnroofline.io import write_json_atomic
from dnnroofline.study.models import add_model_args
from dnnroofline.study.precisions import PRECISIONS, require_known


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_args(ap)
    ap.add_argument("--precision", required=True, help=f"one of {', '.join(PRECISIONS)}")
    ap.add_argument(
        "--device", default="cpu", help="the device the step runs on: cpu or cuda (mps: cpu)"
    )
    ap.add_argument(
        "--channels-last", action="store_true", help="images and 4-d weights channels_last"
    )
    ap.add_argument("--out", required=True, help="output JSON path (written atomically)")
    return ap.parse_args(argv)


def step_variant_arg(device: str, channels_last: bool) -> str:
    try:
        return step_variant(device, channels_last)
    except ValueError:
        raise InputError(f"--device {device!r}: expected cpu, cuda or mps") from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        require_known(args.precision, "--precision")  # before torch is imported: fast
        variant = step_variant_arg(args.device, args.channels_last)
        from dnnroofline.estimate.op_inventory import inventory_line, inventory_or_failure
        from dnnroofline.estimate.op_recorder import StepSpec

        device, channels_last = parse_step_variant(variant)
        result = inventory_or_failure(args, StepSpec(args.precision, device, channels_last))
    except InputError as exc:
        print(f"op_inventory.py: error: {exc}", file=sys.stderr)
        return 2
    write_json_atomic(args.out, result)
    line = inventory_line(result, args.out)
    if result["status"] == "ok":
        print(line)
    else:
        print(f"op_inventory.py: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
