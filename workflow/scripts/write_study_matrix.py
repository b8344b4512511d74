#!/usr/bin/env python
"""The study as resolved here: results/study_config.json and results/study_matrix.json.

    python workflow/scripts/write_study_matrix.py --config-json '{...}' --runs-json '[...]' \
        --config-out results/study_config.json --matrix-out results/study_matrix.json

A shell rule's script, not a ``run:`` block: Snakemake (9.27) runs a ``run:`` job in a
fresh process that reads the Snakefile again without ``--replace-workflow-config``, which
merged config/config.yaml (its ``local`` env) back into a GPU-only config and refused it.
"""

from __future__ import annotations

import argparse
import json
import sys

from dnnroofline.io import write_json_atomic


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config-json", required=True, help="the resolved config, as JSON")
    p.add_argument("--runs-json", required=True, help="the matrix of runs, as JSON")
    p.add_argument("--config-out", required=True)
    p.add_argument("--matrix-out", required=True)
    args = p.parse_args(argv)
    write_json_atomic(args.config_out, json.loads(args.config_json))
    write_json_atomic(args.matrix_out, json.loads(args.runs_json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
