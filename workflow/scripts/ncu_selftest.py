"""The ncu counter self-test of one env: known kernels under the study's own ncu passes.

    python workflow/scripts/ncu_selftest.py --ncu ncu --env-info results/E/env_info.json \\
        --precisions amp bf16 --work-dir results/E/ncu/selftest --out results/E/ncu/selftest.json

For each case (a GEMM per study precision, and a device copy; see
``dnnroofline.ncu_selftest``) it runs profile_ncu.py, the very stage the study's
captures go through (same metrics, same two passes, same settings), with
selftest_kernels.py as the driver, then checks the counts against the known
answer and writes the verdicts. Exits 0 whenever it wrote the JSON (a machine
without ncu gets untrusted verdicts that say why); 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic
from dnnroofline.measurement_lock import measurement_lock
from dnnroofline.ncu_selftest import cases_for, check_case, driver_argv, evaluate
from dnnroofline.processes import run_stage, signals_exit

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--env", help="env name recorded in the JSON")
    ap.add_argument("--env-info", help="env_info.json (the GPU's compute capability)")
    ap.add_argument("--compute-capability")
    ap.add_argument("--precisions", nargs="+", required=True, help="the env's study precisions")
    ap.add_argument("--work-dir", required=True, help="per-case CSVs and JSONs go here")
    ap.add_argument("--out", required=True, help="selftest.json to write")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per ncu pass")
    args = ap.parse_args(argv)
    try:
        cases = cases_for(args.precisions)
    except InputError as exc:
        ap.error(str(exc))
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    records = []
    for case in cases:
        stem = work / case["case"]
        cmd = [sys.executable, str(HERE / "profile_ncu.py"), "--ncu", args.ncu]
        cmd += ["--csv-out", f"{stem}.csv", "--step-csv-out", f"{stem}.step.csv"]
        cmd += ["--json-out", f"{stem}.json", "--timeout", str(args.timeout)]
        if args.compute_capability:
            cmd += ["--compute-capability", args.compute_capability]
        elif args.env_info:
            cmd += ["--env-info", args.env_info]
        cmd += ["--", *driver_argv(sys.executable, str(HERE / "selftest_kernels.py"), case)]
        print("ncu_selftest: " + " ".join(cmd), flush=True)
        rc = run_stage(cmd)  # stopped meanwhile: it ends its ncu first
        parsed = None
        try:
            parsed = json.loads(Path(f"{stem}.json").read_text())
        except (OSError, ValueError) as exc:
            print(f"ncu_selftest: {case['case']}: no stage JSON (exit {rc}): {exc}", flush=True)
        rec = check_case(case, parsed)
        rec["files"] = {
            "csv": f"{stem}.csv",
            "step_csv": f"{stem}.step.csv",
            "json": f"{stem}.json",
        }
        records.append(rec)
        verdict = "ok" if rec["ok"] else f"FAILED: {rec['reason']}"
        print(f"ncu_selftest: {case['case']}: {verdict}", flush=True)
    result = evaluate(args.precisions, records, env=args.env)
    write_json_atomic(args.out, result)
    for p, v in result["verdicts"].items():
        print(
            f"ncu_selftest: {p}: {'trusted' if v['trusted'] else 'NOT trusted: ' + v['reason']}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    with measurement_lock(), signals_exit():
        sys.exit(main())
