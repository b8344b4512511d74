"""Measure and assemble the ceilings of one env: results/{env}/ceilings.json.

    python workflow/scripts/ceilings.py --env local --device auto --precisions fp32 bf16 \\
        --out results/local/ceilings.json [--quick] [--expect-threads N]

Threads come from OMP_NUM_THREADS (as for the timed runs), else torch's default;
the count used is recorded. With --expect-threads N (the env's threads) another count
is refused: the roofs must be those of the threads the runs use. Precisions the device
cannot run are skipped with a note. Run it alone on the machine: it is a measurement.
"""

from __future__ import annotations

import argparse
import sys

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic
from dnnroofline.measure.ceilings import build_ceilings
from dnnroofline.measure.envinfo import DEVICES
from dnnroofline.measure.machine_check import add_machine_check_args, verify_machine_from_args
from dnnroofline.measure.measurement_lock import measurement_lock
from dnnroofline.study import environment
from dnnroofline.study.defaults import default
from dnnroofline.study.environment import start_with_environment
from dnnroofline.study.precisions import PRECISIONS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--env", required=True, help="env name (the config's envs key)")
    ap.add_argument("--device", default="auto", choices=DEVICES)
    ap.add_argument("--precisions", nargs="+", default=["fp32"], choices=PRECISIONS)
    ap.add_argument("--quick", action="store_true", help="tiny sizes and few repeats (tests)")
    ap.add_argument(
        "--expect-threads", type=int, help="the env's threads per process; others are refused"
    )
    ap.add_argument(
        "--perf",
        default=default("perf.executable"),
        help="the perf binary to probe on CPU (perf.executable)",
    )
    ap.add_argument("--out", required=True, help="output JSON path")
    add_machine_check_args(ap)
    environment.add_argument(ap)
    args = ap.parse_args(argv)
    try:
        verify_machine_from_args(args.env, args)
        result = build_ceilings(
            args.env,
            args.device,
            args.precisions,
            quick=args.quick,
            expect_threads=args.expect_threads,
            perf_executable=args.perf,
        )
        result["environment"] = environment.parse(args.environ)
    except InputError as exc:
        print(f"ceilings: error: {exc}", file=sys.stderr)
        return 1
    write_json_atomic(args.out, result)
    for note in result["notes"]:
        print(f"ceilings: note: {note}", file=sys.stderr)
    for s in result["skipped"]:
        print(f"ceilings: skipped {s['precision']}: {s['reason']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    start_with_environment()  # the env's variables, set before anything runs
    with measurement_lock():
        sys.exit(main())
