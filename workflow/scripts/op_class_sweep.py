"""Measure the op-class sweep of one env: results/{env}/efficiency.json.

    python workflow/scripts/op_class_sweep.py --env local --device auto --precisions fp32 bf16 \\
        --ceilings results/local/ceilings.json --out results/local/efficiency.json \\
        [--channels-last] [--quick] [--budget-s S] [--expect-threads N] [--no-cache]

Ops of every class drawn over shape ranges and timed, as shares of the env's measured
roofs (read from its ceilings.json), and the host's costs: per op with autograd, and the
step's fixed costs (:mod:`dnnroofline.measure.op_class_sweep`). Threads come from
OMP_NUM_THREADS, as for the timed runs. What it measures is kept per machine fingerprint
in the user's cache (``--no-cache``: measure again, keep nothing). Run it alone on the
machine: it is a measurement.
"""

from __future__ import annotations

import argparse
import json
import sys

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic
from dnnroofline.measure.envinfo import DEVICES
from dnnroofline.measure.machine_check import add_machine_check_args, verify_machine_from_args
from dnnroofline.measure.measurement_lock import measurement_lock
from dnnroofline.measure.op_class_sweep import sweep_env
from dnnroofline.study import environment
from dnnroofline.study.environment import start_with_environment
from dnnroofline.study.precisions import PRECISIONS


def read_ceilings(path: str) -> dict:
    """The env's ceilings.json, or an InputError naming the file."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise InputError(f"--ceilings {path}: no such file (run the ceilings rule first)") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"--ceilings {path}: not JSON ({exc})") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--env", required=True, help="env name (the config's envs key)")
    ap.add_argument("--device", default="auto", choices=DEVICES)
    ap.add_argument("--precisions", nargs="+", default=["fp32"], choices=PRECISIONS)
    ap.add_argument("--ceilings", required=True, help="the env's ceilings.json (its roofs)")
    ap.add_argument("--channels-last", action="store_true", help="the env's runs' layout")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and few repeats (tests)")
    ap.add_argument(
        "--budget-s", type=float, help="time guard of the sweep (default: 100 s CPU, 170 s CUDA)"
    )
    ap.add_argument("--expect-threads", type=int, help="the env's threads; others are refused")
    ap.add_argument(
        "--no-cache", action="store_true", help="measure again and keep nothing in the cache"
    )
    ap.add_argument("--out", required=True, help="output JSON path")
    add_machine_check_args(ap)
    environment.add_argument(ap)
    args = ap.parse_args(argv)
    try:
        verify_machine_from_args(args.env, args)
        doc = sweep_env(
            args.env,
            args.device,
            args.precisions,
            read_ceilings(args.ceilings),
            where=args.ceilings,
            budget_s=args.budget_s,
            quick=args.quick,
            channels_last=args.channels_last,
            expect_threads=args.expect_threads,
            use_cache=not args.no_cache,
            environ=environment.parse(args.environ),
        )
    except InputError as exc:
        print(f"efficiency: error: {exc}", file=sys.stderr)
        return 1
    write_json_atomic(args.out, doc)
    for note in doc["notes"]:
        print(f"efficiency: note: {note}", file=sys.stderr)
    for s in doc["skipped"]:
        print(f"efficiency: skipped {s['precision']}: {s['reason']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    start_with_environment()  # the env's variables, set before anything runs
    with measurement_lock():
        sys.exit(main())
