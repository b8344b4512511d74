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
import glob
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
from dnnroofline.io import read_json, write_json_atomic, write_text_atomic
from dnnroofline.measurement_lock import measurement_lock
from dnnroofline.ncu import empty_result, parse_ncu_text, read_text, tensor_counter_gap
from dnnroofline.ncu_profile import (
    PASSES,
    STEP_METRICS,
    base_name,
    build_ncu_command,
    combine_passes,
    diagnose_ncu_output,
    filter_supported_metrics,
    find_ncu,
    metrics_for_arch,
    ncu_message_lines,
    not_found_message,
    parse_compute_capability,
    parse_query_metrics,
    permission_message,
    prepare_driver_argv,
    query_metrics_command,
    step_metrics_for_arch,
)
from dnnroofline.ncu_selftest import verdict_for

NOTE_PREFIX = "==PROFILE_NCU=="


def log(msg: str) -> None:
    print(f"profile_ncu: {msg}", flush=True)


def _executables(pattern: str) -> list[str]:
    found = [os.path.abspath(p) for p in glob.glob(pattern)]
    return [p for p in found if os.path.isfile(p) and os.access(p, os.X_OK)]


def resolve_executable(name: str) -> tuple[str | None, str]:
    """(the ncu to run, how it was found): see dnnroofline.ncu_profile.find_ncu."""
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    found, how = find_ncu(name, shutil.which, _executables, cuda_home)
    return (os.path.abspath(found) if found else None), how


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


def run_pass(
    pass_name: str,
    exe: str,
    metrics: list[str],
    driver: list[str],
    args: argparse.Namespace,
    csv_out: str,
) -> dict:
    """One ncu pass over the driver's profiled step, with one retry without rejected metrics.

    Returns the pass record (settings, command, metrics, return code, wall time,
    dropped metrics), ncu's diagnosis, the parsed table (None when there is none),
    the CSV text to keep, and the driver's run JSON.
    """
    rec: dict = {
        **PASSES[pass_name],
        "command": None,
        "metrics": list(metrics),
        "metrics_rejected": [],
        "returncode": None,
        "wall_s": None,
        "status": None,
        "reason": None,
        "message": None,
    }
    out: dict = {"record": rec, "parsed": None, "csv_text": "", "driver_run": None}
    out["driver_text"] = None
    logtext = console = ""
    for attempt in (1, 2):
        with tempfile.TemporaryDirectory(prefix=f"profile_ncu.{pass_name}.") as tmp:
            run_json = Path(tmp) / "driver_run.json"
            log_file = Path(tmp) / "ncu.csv"
            cmd = build_ncu_command(
                exe,
                metrics,
                prepare_driver_argv(driver, str(run_json)),
                log_file=str(log_file),
                pass_name=pass_name,
            )
            # What the JSON records: the command with the scratch paths named as such.
            rec["command"] = [
                a.replace(str(log_file), csv_out).replace(
                    str(run_json), "<scratch>/driver_run.json"
                )
                for a in cmd
            ]
            rec["metrics"] = list(metrics)
            log(f"{pass_name} pass: running: " + " ".join(cmd))
            rc, console, timed_out, wall = run_streaming(cmd, args.timeout)
            rec["returncode"], rec["wall_s"] = rc, round(wall, 3)
            logtext = read_text(log_file) if log_file.exists() else ""
            out["driver_run"] = read_driver_run(run_json)
            out["driver_text"] = run_json.read_text() if run_json.exists() else None
        diag = diagnose_ncu_output(rc, logtext + "\n" + console, timed_out=timed_out)
        rejected = [m for m in metrics if base_name(m) in diag.unknown_metrics]
        if attempt == 2 or diag.reason != "unknown_metric" or not rejected:
            break
        if len(rejected) == len(metrics):
            break
        log(f"{pass_name} pass: ncu rejected {', '.join(rejected)}; running again without them")
        metrics = [m for m in metrics if m not in rejected]
        rec["metrics_rejected"] = [*rec["metrics_rejected"], *rejected]
    out["diag"] = diag
    # The table normally is in the log file; fall back to the console in case this
    # ncu version printed it there.
    parse_error = None
    out["csv_text"] = logtext
    for text in (logtext, console):
        if not text.strip():
            continue
        try:
            out["parsed"] = parse_ncu_text(text, csv_out)
            out["csv_text"] = text
            break
        except InputError as err:
            parse_error = parse_error or str(err)
    if out["parsed"] is None:
        if diag.status == "ok":
            diag.status, diag.reason = "error", "no_table"
            diag.message = f"ncu finished but wrote no usable table: {parse_error}"
        quoted = "\n".join(ncu_message_lines(console, ("ERROR", "WARNING", "PROF")))
        body = logtext if logtext.strip() else quoted + "\n"
        out["csv_text"] = note_csv(diag.message or "", body)
    rec.update(status=diag.status, reason=diag.reason, message=diag.message)
    return out


def judge(
    kernel: dict,
    step: dict | None,
    kernel_metrics: list[str],
    verdict: dict,
    precision: str | None,
) -> tuple[str, str | None, str | None, list[str]]:
    """(status, reason, message, missing counters) of the combined capture."""
    diag = kernel["diag"]
    if diag.status != "ok":
        return diag.status, diag.reason, diag.message, []
    drv = kernel["driver_run"]
    if drv is not None and drv.get("status") not in (None, "ok"):
        return (
            "error",
            "app_failed",
            f"the driver reported status {drv.get('status')!r}: {drv.get('message')}",
            [],
        )
    parsed = kernel["parsed"]
    gap = tensor_counter_gap(parsed, kernel_metrics)
    if gap:
        return (
            "missing_counters",
            "tensor_ops_not_counted",
            f"the tensor pipe executed {parsed['tensor_pipe_instructions']} instructions but no "
            f"usable tensor-op counter was collected ({', '.join(gap)}): tensor-core FLOPs "
            "unknown; the roofline uses the analytic AI",
            gap,
        )
    if parsed["totals"]["flop"]["total"] is None:
        missing = [m for m in kernel_metrics if "sass_thread_inst" in m or "ops_path" in m]
        return (
            "missing_counters",
            "no_flop_counters",
            "the capture has no FLOPs (metrics dropped as unsupported: "
            f"{', '.join(missing) or 'none requested'})",
            missing or ["smsp__sass_thread_inst_executed_op_*", "sm__ops_path_tensor_*"],
        )
    if step is None or step["parsed"] is None:
        why = step["diag"].message if step is not None else "the step pass did not run"
        return (
            "error",
            "step_pass_failed",
            f"the step pass ({PASSES['step']['replay_mode']} replay) gave no table: {why}; "
            "the step's DRAM bytes are unknown (the kernel pass's cold-cache bytes are not "
            "the step's)",
            [],
        )
    if step["parsed"]["totals"]["bytes"]["dram"] is None:
        return (
            "missing_counters",
            "no_dram_counters",
            "the step pass has no DRAM bytes",
            [m for m in STEP_METRICS if m.startswith("dram__bytes")],
        )
    if not verdict["trusted"]:
        return (
            "untrusted_counters",
            "selftest_failed",
            f"the counter self-test failed for {precision}: {verdict['reason']}",
            [],
        )
    return "ok", None, None, []


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

    csv_out, json_out = args.csv_out, args.json_out
    step_csv_out = args.step_csv_out or str(Path(csv_out).with_suffix("")) + ".step.csv"
    verdict = {"trusted": True, "reason": None, "checked": False}
    try:
        if args.selftest:
            verdict = verdict_for(read_json(args.selftest), args.precision, args.selftest)
    except InputError as err:
        ap.error(str(err))
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
        "passes": {},
        "selftest": {**verdict, "file": args.selftest, "precision": args.precision},
    }

    driver_text: str | None = None  # the driver's run JSON, once it has written one

    def finish_failure(status: str, reason: str, message: str, csv_text: str) -> int:
        log(f"{status}: {message}")
        write_text_atomic(csv_out, csv_text)
        if "step" not in info["passes"]:
            write_text_atomic(step_csv_out, note_csv(f"step pass not run: {message}"))
        write_json_atomic(json_out, failure_json(csv_out, status, reason, message, info))
        write_driver_run(
            args.driver_run_out, driver_text, f"the driver wrote no run JSON: {status}: {message}"
        )
        return 0

    exe, how = resolve_executable(args.ncu)
    if exe is None:
        msg = not_found_message(args.ncu)
        return finish_failure("unavailable", "ncu_not_found", msg, note_csv(msg))
    info["executable"], info["executable_found"] = exe, how
    log(f"ncu: {exe} ({how})")

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
        step_requested = step_metrics_for_arch(cc_str)
    except InputError as err:
        return finish_failure("unavailable", "gpu_not_supported", str(err), note_csv(str(err)))
    info["metrics_requested"] = requested
    metrics, step_metrics = requested, step_requested

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
            step_sel = filter_supported_metrics(step_requested, available)
            step_metrics = step_sel.kept or step_requested
        else:
            tail = " | ".join(qtext.strip().splitlines()[-3:])
            info["metric_query"].update(
                ok=False, message=f"query gave no metric list: {tail}"[:500]
            )
            log("ncu --query-metrics gave no metric list; using the full metric set")
    info["metrics"] = metrics

    try:
        kernel = run_pass("kernel", exe, metrics, driver, args, csv_out)
    except InputError as err:
        return finish_failure("error", "bad_command", str(err), note_csv(str(err)))
    except OSError as err:
        msg = f"{not_found_message(args.ncu)} ({type(err).__name__}: {err})"
        return finish_failure("unavailable", "ncu_not_found", msg, note_csv(msg))
    krec = kernel["record"]
    info["passes"]["kernel"] = krec
    info["command"], info["metrics"] = krec["command"], krec["metrics"]
    info["returncode"], info["wall_s"] = krec["returncode"], krec["wall_s"]
    info["metrics_dropped"] = [*info["metrics_dropped"], *krec["metrics_rejected"]]
    driver_text = kernel["driver_text"]
    diag = kernel["diag"]
    if kernel["parsed"] is None:
        return finish_failure(
            diag.status, diag.reason or "error", diag.message or "", kernel["csv_text"]
        )

    step = None
    drv = kernel["driver_run"]
    if diag.status == "ok" and (drv is None or drv.get("status") in (None, "ok")):
        step = run_pass("step", exe, step_metrics, driver, args, step_csv_out)
        info["passes"]["step"] = step["record"]
        write_text_atomic(step_csv_out, step["csv_text"])
    else:
        why = diag.message or f"the driver reported status {drv.get('status')!r}"
        write_text_atomic(step_csv_out, note_csv(f"step pass not run: {why}"))

    status, reason, message, missing = judge(kernel, step, metrics, verdict, args.precision)
    combined = combine_passes(kernel["parsed"], step["parsed"] if step is not None else None)
    result = {
        "status": status,
        "reason": reason,
        "message": message,
        "missing": missing,
        **combined,
        "step_source_file": step_csv_out,
        "ncu": info,
        "driver_run": kernel["driver_run"],
        "step_driver_run": step["driver_run"] if step is not None else None,
    }
    write_text_atomic(csv_out, kernel["csv_text"])
    write_json_atomic(json_out, result)
    write_driver_run(args.driver_run_out, driver_text, "the driver wrote no run JSON")
    t = result["totals"]
    log(
        f"{status}: {t['kernels']} kernels, FLOP {t['flop']['total']} (kernel pass), "
        f"DRAM bytes {t['bytes']['dram']} (step pass)" + (f" ({message})" if message else "")
    )
    return 0


if __name__ == "__main__":
    with measurement_lock():
        sys.exit(main())
