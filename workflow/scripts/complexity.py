#!/usr/bin/env python
"""Analytic complexity of one training step of a torchvision classifier.

    python workflow/scripts/complexity.py --arch mobilenet_v2 --batch-size 32 \\
        --image-size 224 [--num-classes 1000] --out c.json \\
        [--inventory fp32=ops_fp32.json --inventory bf16=ops_bf16.json ...]

Writes the complexity contract (docs/contracts.md): params, bytes, FLOPs (not MACs) of
forward, backward and optimizer by layer type, the analytic minimum DRAM bytes per step
and the estimated peak memory, per precision. The counting method is in the ``method``
key and in ``dnnroofline.model.complexity``. Nothing is downloaded (``weights=None``).
A model that cannot train at this image size (its kernels or pooling need a larger
input, e.g. alexnet or inception_v3 at 32 px) is a result, not a crash: the JSON then
holds ``status: "error"`` and the reason in ``message`` (the counts are null) and the
exit status is 0, as for a failed timed run. Exit status 2 on bad arguments (unknown
model, batch size below 1), with the reason on stderr and nothing written.

Each ``--inventory PRECISION=PATH`` also writes the op inventory of that precision
(op_inventory.py's JSON) from the same process: the study's rule makes a (model, batch)'s
complexity and all its inventories in one job, one Python and torch start instead of one
per file.
"""

from __future__ import annotations

import argparse
import os
import sys

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic
from dnnroofline.study.models import add_model_args, model_step_kwargs
from dnnroofline.study.precisions import require_known

DEFAULT_THREADS = 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_args(ap)
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help=f"CPU threads for the probe forward (default: OMP_NUM_THREADS, else "
        f"{DEFAULT_THREADS})",
    )
    ap.add_argument("--out", required=True, help="output JSON path (written atomically)")
    ap.add_argument(
        "--inventory",
        action="append",
        default=[],
        metavar="PRECISION=PATH",
        help="also write this precision's op inventory to PATH (repeatable)",
    )
    return ap.parse_args(argv)


def _inventories(specs: list[str]) -> list[tuple[str, str]]:
    """(precision, path) of each --inventory PRECISION=PATH, checked before any import."""
    pairs = []
    for spec in specs:
        precision, sep, path = spec.partition("=")
        if not sep or not path:
            raise InputError(f"--inventory {spec!r}: expected PRECISION=PATH")
        pairs.append((require_known(precision, "--inventory"), path))
    return pairs


def _threads(requested: int | None) -> int:
    if requested is not None:
        if requested < 1:
            raise InputError(f"--threads {requested}: must be >= 1")
        return requested
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env:
        try:
            value = int(env)
        except ValueError:
            raise InputError(f"OMP_NUM_THREADS={env!r}: not a positive integer") from None
        if value >= 1:
            return value
    return DEFAULT_THREADS


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        threads = _threads(args.threads)
        inventories = _inventories(args.inventory)
        import torch

        torch.set_num_threads(threads)
        from dnnroofline.model.complexity import ModelCannotRun, complexity, failed_complexity

        try:
            result = complexity(args.arch, **model_step_kwargs(args))
        except ModelCannotRun as exc:
            result = failed_complexity(
                args.arch, args.batch_size, args.image_size, args.num_classes, str(exc)
            )
        if inventories:
            from dnnroofline.model.op_inventory import inventory_line, inventory_or_failure
        for precision, path in inventories:
            ops = inventory_or_failure(args, precision)
            write_json_atomic(path, ops)
            print(
                inventory_line(ops, path), file=sys.stdout if ops["status"] == "ok" else sys.stderr
            )
    except InputError as exc:
        print(f"complexity.py: error: {exc}", file=sys.stderr)
        return 2
    write_json_atomic(args.out, result)
    if result["status"] != "ok":
        print(
            f"complexity.py: {args.arch} bs{args.batch_size} cannot train at "
            f"{args.image_size} px, recorded as status error in {args.out}: {result['message']}",
            file=sys.stderr,
        )
        return 0
    fl = result["flops"]
    print(
        f"{args.arch} bs{args.batch_size} {args.image_size}px: params {result['params']:,}, "
        f"forward {fl['forward'] / 1e9:.3f} GFLOP, train step {fl['train_step'] / 1e9:.3f} "
        f"GFLOP, min DRAM {result['min_dram_bytes_per_step'] / 1e9:.3f} GB -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
