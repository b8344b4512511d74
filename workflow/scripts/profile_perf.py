#!/usr/bin/env python
"""CPU counters of one configuration with perf stat: results/{env}/perf/{config}.json.

    python workflow/scripts/profile_perf.py [--perf perf] \\
        [--ceilings results/local/ceilings.json] --json-out out.json \\
        [--iters-short 1 --iters-long 4] \\
        -- python workflow/scripts/run_train.py --arch resnet18 ... --warmup-iters 2

The driver command comes after ``--`` without ``--iters`` and ``--out``: it runs twice,
at ``--iters-short`` and ``--iters-long`` steps, and the per-step FLOPs and DRAM bytes
are the difference over the extra steps. The perf probe is taken from the env's
ceilings.json (``perf``: probed once per env) when given and it probed this same
``--perf`` binary, else run here. Where perf
cannot count, the JSON says ``unavailable`` with perf's own reason and exit is 0.
"""

from __future__ import annotations

import argparse
import sys

from dnnroofline.errors import InputError
from dnnroofline.io import read_json, write_json_atomic
from dnnroofline.measure.measurement_lock import measurement_lock
from dnnroofline.measure.perf_run import probe_for, profile
from dnnroofline.study.defaults import default
from dnnroofline.study.environment import start_with_environment


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("profile_perf: error: give the driver command after --", file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--perf", default=default("perf.executable"), help="the perf executable")
    ap.add_argument(
        "--ceilings", help="the env's ceilings.json (its perf probe is reused if of --perf)"
    )
    ap.add_argument("--json-out", required=True)
    ap.add_argument("--driver-run-out", help="where to keep the driver's run JSON")
    ap.add_argument("--iters-short", type=int, default=default("perf.iters_short"))
    ap.add_argument("--iters-long", type=int, default=default("perf.iters_long"))
    args = ap.parse_args(argv[:cut])
    driver = argv[cut + 1 :]
    if not driver:
        ap.error("no driver command after --")
    if args.iters_long <= args.iters_short:
        ap.error("--iters-long must exceed --iters-short")
    try:
        probed = read_json(args.ceilings).get("perf") if args.ceilings else None
    except InputError as exc:
        print(f"profile_perf: error: {exc}", file=sys.stderr)
        return 2
    result = profile(
        driver,
        probe_for(args.perf, probed),
        executable=args.perf,
        iters_short=args.iters_short,
        iters_long=args.iters_long,
        driver_run_out=args.driver_run_out,
    )
    write_json_atomic(args.json_out, result)
    print(f"profile_perf: {result['status']}: {result.get('reason') or ''}", file=sys.stderr)
    return 0 if result["status"] in ("ok", "unavailable") else 1


if __name__ == "__main__":
    start_with_environment()  # the env's variables, set before anything runs
    with measurement_lock():
        sys.exit(main())
