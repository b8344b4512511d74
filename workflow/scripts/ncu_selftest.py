"""The ncu counter self-test of one env: known kernels under the study's own ncu passes.

    python workflow/scripts/ncu_selftest.py --ncu ncu --env-info results/E/env_info.json \\
        --precisions amp bf16 --work-dir results/E/ncu/selftest --out results/E/ncu/selftest.json

For each case (a GEMM per study precision, and a device copy; see
``dnnroofline.ncu.selftest``) it runs profile_ncu.py, the very stage the study's
captures go through (same metrics, same two passes, same settings), with
selftest_kernels.py as the driver, then checks the counts against the known
answer and writes the verdicts. Exits 0 whenever it wrote the JSON (a machine
without ncu gets untrusted verdicts that say why); 2 for bad arguments.

A self-test stopped part way (a lease's command limit, Ctrl-C) keeps the cases it
finished: ``progress.json`` in the work dir lists them, and the next run on the same
machine with the same ncu reads their captures instead of measuring them again
(``"resumed": true`` in their records). A self-test that ends removes it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from dnnroofline.errors import InputError
from dnnroofline.io import read_json_or_none, write_json_atomic
from dnnroofline.measure.measurement_lock import measurement_lock
from dnnroofline.ncu.selftest import (
    PROGRESS_FILE,
    cases_for,
    check_case,
    driver_argv,
    evaluate,
    kept_cases,
    progress_key,
)
from dnnroofline.processes import run_stage, signals_exit
from dnnroofline.study.defaults import default

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ncu", default=default("ncu.executable"))
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
    progress_path = work / PROGRESS_FILE
    key = progress_key(
        args.ncu, sys.executable, file_digest(args.env_info), args.compute_capability
    )
    kept = kept_cases(read_json_or_none(progress_path), key, cases)
    finished: dict[str, dict] = {}
    records = []
    for case in cases:
        stem = work / case["case"]
        parsed = read_json_or_none(f"{stem}.json") if case["case"] in kept else None
        resumed = isinstance(parsed, dict) and parsed.get("status") == "ok"
        if resumed:
            print(f"ncu_selftest: {case['case']}: kept from a stopped self-test", flush=True)
        else:
            parsed = run_case(args, case, stem)
        if isinstance(parsed, dict) and parsed.get("status") == "ok":
            finished[case["case"]] = dict(case)
            write_json_atomic(progress_path, {"key": key, "cases": finished})
        rec = check_case(case, parsed)
        rec["resumed"] = resumed
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
    progress_path.unlink(missing_ok=True)
    for p, v in result["verdicts"].items():
        print(
            f"ncu_selftest: {p}: {'trusted' if v['trusted'] else 'NOT trusted: ' + v['reason']}",
            flush=True,
        )
    return 0


def file_digest(path: str | None) -> str | None:
    """sha256 of a file (the env's fingerprint), None without one or where unreadable."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None
    except OSError:
        return None


def run_case(args: argparse.Namespace, case: dict, stem: Path) -> dict | None:
    """Profile one case through profile_ncu.py; its stage JSON, or None if it wrote none."""
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
    try:
        return json.loads(Path(f"{stem}.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"ncu_selftest: {case['case']}: no stage JSON (exit {rc}): {exc}", flush=True)
        return None


if __name__ == "__main__":
    with measurement_lock(), signals_exit():
        sys.exit(main())
