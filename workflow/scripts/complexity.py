#!/usr/bin/env python
"""Analytic complexity of one training step of a torchvision classifier.

    python workflow/scripts/complexity.py --arch mobilenet_v2 --batch-size 32 \\
        --image-size 224 [--num-classes 1000] --out c.json \\
        [--inventory fp32:cpu=ops_fp32.json --inventory amp:cuda_cl=ops_amp.json ...]

Writes the complexity contract (docs/contracts.md): params, bytes, FLOPs (not MACs) of
forward, backward and optimizer by layer type, the analytic minimum DRAM bytes per step
and the estimated peak memory, per precision. The counting method is in the ``method``
key and in ``dnnroofline.estimate.complexity``. Nothing is downloaded (``weights=None``).
A model that cannot train at this image size (its kernels or pooling need a larger
input, e.g. alexnet or inception_v3 at 32 px) is a result, not a crash: the JSON then
holds ``status: "error"`` and the reason in ``message`` (the counts are null) and the
exit status is 0, as for a failed timed run. Exit status 2 on bad arguments (unknown
model, batch size below 1), with the reason on stderr and nothing written.

Each ``--inventory PRECISION:STEP=PATH`` also writes the op inventory of that precision
and step variant (``cpu``, ``cpu_cl``, ``cuda``, ``cuda_cl``: the device and
channels_last; ``PRECISION=PATH`` is ``PRECISION:cpu``), op_inventory.py's JSON, from
the same process: the study's rule makes a (model, batch)'s complexity and all its
inventories in one job, one Python and torch start instead of one per file. The fp32
CPU step the complexity counts is recorded once and serves its inventory too.
"""

from __future__ import annotations

import argparse
import os
import sys

from dnnroofline.errors import InputError
from dnnroofline.estimate.op_classes import STEP_VARIANTS, parse_step_variant
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
        metavar="PRECISION[:STEP]=PATH",
        help="also write the op inventory of this precision and step variant (cpu, "
        "cpu_cl, cuda, cuda_cl; default cpu) to PATH (repeatable)",
    )
    return ap.parse_args(argv)


def _inventories(specs: list[str]) -> list[tuple[str, str, str]]:
    """(precision, step variant, path) of each --inventory PRECISION[:STEP]=PATH,
    checked before any import."""
    found = []
    for spec in specs:
        key, sep, path = spec.partition("=")
        if not sep or not path:
            raise InputError(f"--inventory {spec!r}: expected PRECISION[:STEP]=PATH")
        precision, _, step = key.partition(":")
        if (step or "cpu") not in STEP_VARIANTS:
            raise InputError(
                f"--inventory {spec!r}: unknown step variant {step!r}; expected one of "
                f"{', '.join(STEP_VARIANTS)}"
            )
        found.append((require_known(precision, "--inventory"), step or "cpu", path))
    return found


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


def _counted(args: argparse.Namespace) -> tuple[dict, object]:
    """(complexity JSON, its fp32 CPU step or None where the model cannot train)."""
    from dnnroofline.estimate import op_recorder as rec
    from dnnroofline.estimate.complexity import complexity, failed_complexity

    try:
        step = rec.record_step(
            args.arch,
            rec.StepSpec("fp32"),
            batch_size=args.batch_size,
            image_size=args.image_size,
            num_classes=args.num_classes,
            factory=args.model_factory,
            kwargs=args.model_kwargs,
            traffic=True,
        )
        return complexity(args.arch, **model_step_kwargs(args), step=step), step
    except rec.ModelCannotRun as exc:
        failed = failed_complexity(
            args.arch, args.batch_size, args.image_size, args.num_classes, str(exc)
        )
        return failed, None


def _write_inventories(args: argparse.Namespace, inventories: list, step: object) -> None:
    from dnnroofline.estimate import op_inventory as oi
    from dnnroofline.estimate.op_recorder import StepSpec

    for precision, variant, path in inventories:
        spec = StepSpec(precision, *parse_step_variant(variant))
        if step is not None and spec == step.spec:  # the complexity's own step
            ops = oi.inventory_of(
                step, args.arch, args.batch_size, args.image_size, args.num_classes
            )
        else:
            ops = oi.inventory_or_failure(args, spec)
        write_json_atomic(path, ops)
        out = sys.stdout if ops["status"] == "ok" else sys.stderr
        print(oi.inventory_line(ops, path), file=out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        threads = _threads(args.threads)
        inventories = _inventories(args.inventory)
        import torch

        torch.set_num_threads(threads)
        result, step = _counted(args)
        _write_inventories(args, inventories, step)
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
