"""Parse finished ncu captures again with the current parser (their counters unchanged).

    python workflow/scripts/reparse_ncu.py results/h100/ncu/h100_resnet50_amp_bs256.json \
        --why "fp16 register moves are not FLOPs"

Each JSON is rewritten in place from the kernel-pass CSV beside it (``.csv``, or
``.csv.gz`` as examples/ keep them) and its step-pass ``.step.csv``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic
from dnnroofline.ncu.parse import read_text
from dnnroofline.ncu.reparse import reparse_capture


def kernel_csv_text(json_path: Path) -> str:
    plain = json_path.with_suffix(".csv")
    packed = json_path.with_suffix(".csv.gz")
    if plain.exists():
        return read_text(plain)
    if packed.exists():
        return read_text(packed)
    raise InputError(f"{json_path}: no kernel-pass CSV beside it ({plain.name} or {packed.name})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("captures", nargs="+", type=Path, help="parsed capture JSONs")
    ap.add_argument("--why", required=True, help="recorded in the JSON's 'reparsed' list")
    args = ap.parse_args(argv)
    today = dt.date.today().isoformat()
    try:
        for path in args.captures:
            capture = json.loads(path.read_text())
            step_path = path.with_suffix(".step.csv")
            step = read_text(step_path) if step_path.exists() else None
            new = reparse_capture(capture, kernel_csv_text(path), step, date=today, why=args.why)
            write_json_atomic(path, new)
            print(f"reparse_ncu: {path}: FLOP {new['totals']['flop']['total']}")
    except InputError as err:
        print(f"reparse_ncu: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
