"""The ncu stage: one whole training step under Nsight Compute, then the parsed counters.

    python workflow/scripts/profile_ncu.py --ncu ncu --csv-out results/E/ncu/K.csv \\
        --json-out results/E/ncu/K.json [--compute-capability 9.0 | --env-info env_info.json] \\
        -- python workflow/scripts/run_train.py --arch resnet50 --batch-size 32 ... --iters 1

Everything after ``--`` is the driver command; ``--profile-step`` (and ``--out``
to a scratch file) is added to it. With ``--driver-run-out PATH`` the driver's own
run JSON of the profiled step (config, threads, status; its timings are under ncu,
not a measurement) is kept there; when the driver never ran or wrote none, that
file says why (``"status": null`` and a ``"message"``).

A machine that cannot be profiled (no ncu, counters not permitted, a failing
driver) still gets its CSV and a JSON saying why, and exits 0: see
``dnnroofline.ncu.run_ncu``. Only a wrong command line exits non-zero.
"""

from __future__ import annotations

import argparse
import sys

from dnnroofline.errors import InputError
from dnnroofline.io import read_json
from dnnroofline.measure.measurement_lock import measurement_lock
from dnnroofline.ncu.run_ncu import TRUSTED, CaptureRequest, capture
from dnnroofline.ncu.selftest import verdict_for
from dnnroofline.processes import signals_exit
from dnnroofline.study.defaults import default
from dnnroofline.study.environment import start_with_environment


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        cut = argv.index("--")
        own, driver = argv[:cut], argv[cut + 1 :]
    else:
        own, driver = argv, []
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        usage="%(prog)s [options] --csv-out CSV --json-out JSON -- DRIVER_COMMAND ...",
    )
    ap.add_argument(
        "--ncu",
        default=default("ncu.executable"),
        help="Nsight Compute CLI: a name on PATH or a path",
    )
    ap.add_argument("--csv-out", required=True, help="where the kernel pass's raw CSV goes")
    ap.add_argument(
        "--step-csv-out",
        help="where the step pass's raw CSV goes (default: the --csv-out name with .step.csv)",
    )
    ap.add_argument("--json-out", required=True, help="where the parsed counters JSON goes")
    ap.add_argument("--compute-capability", help="GPU CC such as 9.0 (default: detect)")
    ap.add_argument("--env-info", help="env_info.json to read the GPU's compute capability from")
    ap.add_argument("--metrics", help="comma-separated metric list (default: the set for the GPU)")
    ap.add_argument(
        "--no-query",
        action="store_true",
        help="do not ask `ncu --query-metrics` which metrics this GPU supports",
    )
    ap.add_argument(
        "--driver-run-out",
        help="where to keep the driver's run JSON of the profiled step (default: not kept)",
    )
    ap.add_argument(
        "--selftest",
        help="the env's counter self-test JSON: an untrusted precision is not 'ok'",
    )
    ap.add_argument("--precision", help="the study precision of this capture (for --selftest)")
    ap.add_argument("--timeout", type=float, default=7200.0, help="seconds for each ncu pass")
    ap.add_argument("--query-timeout", type=float, default=300.0)
    args = ap.parse_args(own)
    if not driver:
        ap.error("no driver command: put it after '--'")
    if args.selftest and not args.precision:
        ap.error("--selftest needs --precision")

    verdict = dict(TRUSTED)
    if args.selftest:
        try:
            verdict = verdict_for(read_json(args.selftest), args.precision, args.selftest)
        except InputError as err:
            ap.error(str(err))
    capture(
        CaptureRequest(
            ncu=args.ncu,
            csv_out=args.csv_out,
            json_out=args.json_out,
            driver=driver,
            step_csv_out=args.step_csv_out,
            compute_capability=args.compute_capability,
            env_info=args.env_info,
            metrics=[m.strip() for m in args.metrics.split(",") if m.strip()]
            if args.metrics
            else None,
            query=not args.no_query,
            driver_run_out=args.driver_run_out,
            selftest=args.selftest,
            precision=args.precision,
            verdict=verdict,
            timeout=args.timeout,
            query_timeout=args.query_timeout,
        )
    )
    return 0


if __name__ == "__main__":
    start_with_environment()  # the env's variables, set before anything runs
    with measurement_lock(), signals_exit():
        sys.exit(main())
