#!/usr/bin/env python
"""The op inventory of one training step: every operator, its class, FLOPs and bytes.

    python workflow/scripts/op_inventory.py --arch resnet18 --precision bf16 \\
        --batch-size 32 --image-size 224 [--num-classes 1000] --out ops.json

Writes the ops JSON (docs/contracts.md): one training step (forward, loss, backward,
SGD; GradScaler under amp) run on fake tensors and recorded at dispatch, so any batch
costs the same; the method is in its ``method`` key and in
``dnnroofline.model.op_inventory``. Nothing is downloaded (``weights=None``). A model
that cannot train at this image size is a result, not a crash: the JSON then holds
``status: "error"`` and the reason (no totals, no ops) and the exit status is 0, as for
complexity.py. Exit status 2 on bad arguments (unknown model or precision, batch size
below 1), with the reason on stderr and nothing written.
"""

from __future__ import annotations

import argparse
import sys

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic
from dnnroofline.study.models import add_model_args
from dnnroofline.study.precisions import PRECISIONS, require_known


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_args(ap)
    ap.add_argument("--precision", required=True, help=f"one of {', '.join(PRECISIONS)}")
    ap.add_argument("--out", required=True, help="output JSON path (written atomically)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        require_known(args.precision, "--precision")  # before torch is imported: fast
        from dnnroofline.model.op_inventory import inventory_line, inventory_or_failure

        result = inventory_or_failure(args, args.precision)
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
