"""Parse an Nsight Compute CSV (details page or --page raw, any units) into counters JSON.

    python workflow/scripts/parse_ncu.py report.csv --out counters.json [--require-roofline]

The JSON holds per-kernel and total kernel time, FLOPs by precision and path
(CUDA cores vs tensor cores) and DRAM/L2/L1 bytes; see docs/contracts.md.
A broken input (no table, a truncated row, a value that is not a number) exits
with status 1 and a message naming the file and line.
"""

from __future__ import annotations

import argparse
import json
import sys

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic
from dnnroofline.ncu.parse import parse_ncu_csv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu CSV output (ncu --csv ..., or ncu --import r.ncu-rep --csv)")
    ap.add_argument("--out", help="JSON to write (default: print to stdout)")
    ap.add_argument(
        "--require-roofline",
        action="store_true",
        help="fail unless the CSV has FLOP counters and DRAM byte counters",
    )
    args = ap.parse_args(argv)
    try:
        result = parse_ncu_csv(args.csv, require_roofline_metrics=args.require_roofline)
    except InputError as err:
        print(f"parse_ncu: error: {err}", file=sys.stderr)
        return 1
    for w in result["warnings"]:
        print(f"parse_ncu: warning: {w}", file=sys.stderr)
    if args.out:
        write_json_atomic(args.out, result)
    else:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
