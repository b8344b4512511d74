"""The ncu stage: one whole training step under Nsight Compute, then the parsed counters.

    python workflow/scripts/profile_ncu.py --ncu ncu --csv-out results/E/ncu/K.csv \\
        --json-out results/E/ncu/K.json [--compute-capability 9.0 | --env-info env_info.json] \\
        -- python workflow/scripts/run_train.py --arch resnet50 --batch-size 32 ... --iters 1

Everything after ``--`` is the driver command; ``--profile-step`` (and ``--out``
to a scratch file) is added to it. With ``--driver-run-out PATH`` the driver's own
run JSON of the profiled step (config, threads, status; its timings are under ncu,
not a measurement) is kept there; when the driver never ran or wrote none, that
file says why (``"status": null`` and a ``"message"``). The driver brackets one
training step with torch.cuda.profiler.start()/stop(), and ncu runs with
--profile-from-start off.

This stage never fails the study for a machine that cannot be profiled: when
ncu is missing, may not read the counters (ERR_NVGPUCTRPERM), or the driver
fails, it still writes the CSV (ncu's own output lines, or a note) and a JSON
with "status": "unavailable" or "error", a "message" saying why and how to fix
it, "kernels": [] and null totals, and exits 0. On success the JSON is the
parser's output plus "status": "ok" and an "ncu" block (command, metrics, wall
time). Only a wrong command line exits non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic, write_text_atomic
from dnnroofline.ncu import empty_result, parse_ncu_text, read_text
from dnnroofline.ncu_profile import (
    base_name,
    build_ncu_command,
    diagnose_ncu_output,
    filter_supported_metrics,
    metrics_for_arch,
    ncu_message_lines,
    not_found_message,
    parse_compute_capability,
    parse_query_metrics,
    permission_message,
    prepare_driver_argv,
    query_metrics_command,
)

NOTE_PREFIX = "==PROFILE_NCU=="


def log(msg: str) -> None:
    print(f"profile_ncu: {msg}", flush=True)


def resolve_executable(name: str) -> str | None:
    if os.sep in name or (os.altsep and os.altsep in name):
        p = Path(name)
        return os.path.abspath(name) if p.is_file() and os.access(p, os.X_OK) else None
    return shutil.which(name)


def detect_compute_capability(env_info: str | None) -> tuple[str | None, str]:
    """(CC string or None, where it came from). Never initialises CUDA in this process."""
    if env_info:
        try:
            info = json.loads(Path(env_info).read_text())
            for gpu in info.get("gpus") or []:
                cc = parse_compute_capability(gpu.get("compute_capability"))
                if cc:
                    return f"{cc[0]}.{cc[1]}", f"env_info {env_info}"
        except (OSError, ValueError, InputError) as err:
            log(f"could not read the compute capability from {env_info}: {err}")
    smi = shutil.which("nvidia-smi")
    if smi:
        cmd = [smi, "--query-gpu=compute_cap", "--format=csv,noheader"]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if visible.isdigit():
            cmd += ["-i", visible]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            first = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
            cc = parse_compute_capability(first) if out.returncode == 0 and first else None
            if cc:
                return f"{cc[0]}.{cc[1]}", "nvidia-smi"
        except (OSError, subprocess.SubprocessError, InputError, IndexError):
            pass
    return None, "unknown (every architecture's metrics, filtered by ncu --query-metrics)"


def run_streaming(cmd: list[str], timeout: float) -> tuple[int | None, str, bool, float]:
    """Run cmd, echoing its output to our stdout (the rule's log). (rc, text, timed_out, wall_s)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    tail: deque[str] = deque(maxlen=20000)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            tail.append(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    reader.join(timeout=30)
    sys.stdout.flush()
    return (None if timed_out else proc.returncode), "".join(tail), timed_out, time.monotonic() - t0


def failure_json(csv_out: str, status: str, reason: str, message: str, ncu_info: dict) -> dict:
    result = empty_result(csv_out)
    return {"status": status, "reason": reason, "message": message, **result, "ncu": ncu_info}


def note_csv(message: str, output: str = "") -> str:
    """The CSV written when there is no ncu table: ncu's output lines, or a note."""
    lines = [f"{NOTE_PREFIX} {ln}" for ln in message.splitlines()]
    return "\n".join(lines) + "\n" + output


def read_driver_run(path: Path) -> dict | None:
    try:
        run = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return {"status": run.get("status"), "message": run.get("message"), "config": run.get("config")}


def write_driver_run(path: str | None, text: str | None, why: str) -> None:
    """Keep the driver's run JSON at ``path``, or a note saying why there is none."""
    if path is None:
        return
    if text is not None:
        try:
            run = json.loads(text)
        except ValueError:
            run = None
        if isinstance(run, dict):
            write_json_atomic(path, run)
            return
        why = "the driver's run JSON is not a JSON object"
    write_json_atomic(path, {"status": None, "message": why, "profiled_step": True})


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
    ap.add_argument("--ncu", default="ncu", help="Nsight Compute CLI: a name on PATH or a path")
    ap.add_argument("--csv-out", required=True, help="where the raw ncu CSV goes")
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
    ap.add_argument("--timeout", type=float, default=7200.0, help="seconds for the ncu run")
    ap.add_argument("--query-timeout", type=float, default=300.0)
    args = ap.parse_args(own)
    if not driver:
        ap.error("no driver command: put it after '--'")

    csv_out, json_out = args.csv_out, args.json_out
    info: dict = {
        "executable": args.ncu,
        "command": None,
        "compute_capability": None,
        "compute_capability_source": None,
        "metrics_requested": [],
        "metrics": [],
        "metrics_dropped": [],
        "metrics_substituted": {},
        "metric_query": {"ran": False, "ok": None, "message": None},
        "returncode": None,
        "wall_s": None,
    }

    driver_text: str | None = None  # the driver's run JSON, once it has written one

    def finish_failure(status: str, reason: str, message: str, csv_text: str) -> int:
        log(f"{status}: {message}")
        write_text_atomic(csv_out, csv_text)
        write_json_atomic(json_out, failure_json(csv_out, status, reason, message, info))
        write_driver_run(
            args.driver_run_out, driver_text, f"the driver wrote no run JSON: {status}: {message}"
        )
        return 0

    exe = resolve_executable(args.ncu)
    if exe is None:
        msg = not_found_message(args.ncu)
        return finish_failure("unavailable", "ncu_not_found", msg, note_csv(msg))
    info["executable"] = exe

    try:
        if args.compute_capability:
            cc = parse_compute_capability(args.compute_capability)
            cc_str, cc_src = f"{cc[0]}.{cc[1]}", "--compute-capability"
        else:
            cc_str, cc_src = detect_compute_capability(args.env_info)
        info["compute_capability"], info["compute_capability_source"] = cc_str, cc_src
        requested = (
            [m.strip() for m in args.metrics.split(",") if m.strip()]
            if args.metrics
            else metrics_for_arch(cc_str)
        )
    except InputError as err:
        return finish_failure("unavailable", "gpu_not_supported", str(err), note_csv(str(err)))
    info["metrics_requested"] = requested
    metrics = requested

    if not args.no_query:
        qcmd = query_metrics_command(exe)
        info["metric_query"]["ran"] = True
        try:
            q = subprocess.run(
                qcmd, capture_output=True, text=True, errors="replace", timeout=args.query_timeout
            )
            qtext = (q.stdout or "") + (q.stderr or "")
        except (OSError, subprocess.SubprocessError) as err:
            q, qtext = None, f"{type(err).__name__}: {err}"
        if "ERR_NVGPUCTRPERM" in qtext:
            info["metric_query"].update(ok=False, message="ERR_NVGPUCTRPERM")
            msg = permission_message()
            return finish_failure(
                "unavailable", "counters_not_permitted", msg, note_csv(msg, qtext)
            )
        available = parse_query_metrics(qtext) if q is not None and q.returncode == 0 else set()
        if available:
            sel = filter_supported_metrics(requested, available)
            metrics = sel.kept
            info["metrics_dropped"], info["metrics_substituted"] = sel.dropped, sel.substituted
            info["metric_query"].update(ok=True, message=f"{len(available)} metrics listed")
            if sel.dropped:
                log(f"metrics this GPU/ncu does not support, dropped: {', '.join(sel.dropped)}")
        else:
            tail = " | ".join(qtext.strip().splitlines()[-3:])
            info["metric_query"].update(
                ok=False, message=f"query gave no metric list: {tail}"[:500]
            )
            log("ncu --query-metrics gave no metric list; using the full metric set")
    info["metrics"] = metrics

    # One retry: if ncu rejects metric names (the query was skipped or failed), drop
    # those and run again rather than lose the whole capture.
    for attempt in (1, 2):
        with tempfile.TemporaryDirectory(prefix="profile_ncu.") as tmp:
            run_json = Path(tmp) / "driver_run.json"
            log_file = Path(tmp) / "ncu.csv"
            try:
                cmd = build_ncu_command(
                    exe, metrics, prepare_driver_argv(driver, str(run_json)), log_file=str(log_file)
                )
            except InputError as err:
                return finish_failure("error", "bad_command", str(err), note_csv(str(err)))
            # What the JSON records: the command with the scratch paths named as such.
            info["command"] = [
                a.replace(str(log_file), csv_out).replace(
                    str(run_json), "<scratch>/driver_run.json"
                )
                for a in cmd
            ]
            info["metrics"] = metrics
            log("running: " + " ".join(cmd))
            try:
                rc, console, timed_out, wall = run_streaming(cmd, args.timeout)
            except OSError as err:
                msg = f"{not_found_message(args.ncu)} ({type(err).__name__}: {err})"
                return finish_failure("unavailable", "ncu_not_found", msg, note_csv(msg))
            info["returncode"], info["wall_s"] = rc, round(wall, 3)
            logtext = read_text(log_file) if log_file.exists() else ""
            driver_run = read_driver_run(run_json)
            driver_text = run_json.read_text() if run_json.exists() else None
        diag = diagnose_ncu_output(rc, logtext + "\n" + console, timed_out=timed_out)
        rejected = [m for m in metrics if base_name(m) in diag.unknown_metrics]
        if attempt == 2 or diag.reason != "unknown_metric" or not rejected:
            break
        if len(rejected) == len(metrics):
            break
        log(f"ncu rejected {', '.join(rejected)}; running again without them")
        metrics = [m for m in metrics if m not in rejected]
        info["metrics_dropped"] = [*info["metrics_dropped"], *rejected]

    # The table normally is in the log file; fall back to the console in case this
    # ncu version printed it there.
    parsed, parse_error, csv_text = None, None, logtext
    for text in (logtext, console):
        if not text.strip():
            continue
        try:
            parsed = parse_ncu_text(text, csv_out)
            csv_text = text
            break
        except InputError as err:
            parse_error = parse_error or str(err)

    if parsed is None:
        if diag.status == "ok":
            diag.status, diag.reason = "error", "no_table"
            diag.message = f"ncu finished but wrote no usable table: {parse_error}"
        quoted = "\n".join(ncu_message_lines(console, ("ERROR", "WARNING", "PROF")))
        body = logtext if logtext.strip() else quoted + "\n"
        return finish_failure(
            diag.status,
            diag.reason or "error",
            diag.message or "",
            note_csv(diag.message or "", body),
        )

    status, reason, message = diag.status, diag.reason, diag.message
    if status == "ok" and driver_run is not None and driver_run.get("status") not in (None, "ok"):
        status, reason = "error", "app_failed"
        message = (
            f"the driver reported status {driver_run.get('status')!r}: {driver_run.get('message')}"
        )
    if status == "ok":
        t = parsed["totals"]
        gaps = [
            name
            for name, value in (("FLOPs", t["flop"]["total"]), ("DRAM bytes", t["bytes"]["dram"]))
            if value is None
        ]
        if gaps:
            status, reason = "error", "missing_counters"
            message = (
                f"the capture has no {' and no '.join(gaps)} (metrics dropped as unsupported: "
                f"{', '.join(info['metrics_dropped']) or 'none'})"
            )
    result = {
        "status": status,
        "reason": reason,
        "message": message,
        **parsed,
        "ncu": info,
        "driver_run": driver_run,
    }
    write_text_atomic(csv_out, csv_text)
    write_json_atomic(json_out, result)
    write_driver_run(args.driver_run_out, driver_text, "the driver wrote no run JSON")
    t = parsed["totals"]
    log(
        f"{status}: {t['kernels']} kernels, FLOP {t['flop']['total']}, "
        f"DRAM bytes {t['bytes']['dram']}" + (f" ({message})" if message else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
