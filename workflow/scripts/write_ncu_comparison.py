#!/usr/bin/env python
"""Write the report page comparing analytic and ncu FLOPs and DRAM bytes.

    python workflow/scripts/write_ncu_comparison.py --ncu results/*/ncu/*.json \
        --complexity results/complexity/*.json --envs local gcp_l4 \
        [--ceilings results/*/ceilings.json] --out results/report_sections/ncu_vs_analytic.html

Parsed ncu files are keyed by the run identity they hold (``env`` and the driver's
``config``), matched against the envs given and the models and batch sizes of the
complexity files; never by their name. ``--ncu`` may be empty (a CPU-only
study): the page then says there is no ncu data and how to get it. With ``--ceilings``
each capture also names its kernels that beat their class's measured roof.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dnnroofline.aggregate.inputs import key_ceilings, key_complexity
from dnnroofline.errors import InputError
from dnnroofline.io import read_json, write_text_atomic
from dnnroofline.ncu.above_roof import above_by_capture
from dnnroofline.report.ncu_comparison import comparison_page, comparison_rows, key_ncu_files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ncu", nargs="*", default=[], help="parsed ncu JSON files")
    ap.add_argument("--complexity", nargs="*", default=[], help="complexity JSON files")
    ap.add_argument("--envs", nargs="*", default=[], help="the study's env names")
    ap.add_argument("--selftest", nargs="*", default=[], help="results/{env}/ncu/selftest.json")
    ap.add_argument("--ceilings", nargs="*", default=[], help="results/{env}/ceilings.json")
    ap.add_argument("--out", required=True, help="HTML page to write")
    args = ap.parse_args(argv)
    try:
        complexity = key_complexity((p, read_json(p)) for p in args.complexity)
        models = {m for m, _ in complexity}
        batches = {b for _, b in complexity}
        captures = ((path, read_json(path)) for path in args.ncu)
        matched, unmatched = key_ncu_files(captures, args.envs, models, batches)
        docs = {key: doc for key, (_, doc) in matched.items()}
        sources = {key: path for key, (path, _) in matched.items()}
        rows = comparison_rows(docs, complexity, sources)
        ceilings, _ = key_ceilings((path, read_json(path)) for path in args.ceilings)
        above = above_by_capture(docs, ceilings)
        for r in rows:
            key = (r["env"], r["model"], r["precision"], r["batch_size"])
            if key in above:
                r["kernels_above_measured"] = above[key]
        selftests = {}
        for path in args.selftest:
            doc = read_json(path)
            selftests[doc.get("env") or Path(path).parent.parent.name] = doc
        page = comparison_page(rows, unmatched, selftests)
        write_text_atomic(args.out, page)
    except InputError as exc:
        print(f"write_ncu_comparison: error: {exc}", file=sys.stderr)
        return 2
    for path in unmatched:
        print(
            f"write_ncu_comparison: warning: {path} matches no configured "
            "(env, model, precision, batch); left out",
            file=sys.stderr,
        )
    flagged = [r for r in rows if r["flop_flag"]]
    print(
        f"write_ncu_comparison: {len(rows)} captures, {len(flagged)} with FLOP ratio out of "
        f"range -> {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
