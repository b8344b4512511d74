"""The ncu stage, running part: one training step under Nsight Compute, in two passes.

``capture`` runs ncu over the driver's profiled step (``profile_ncu.py`` is its command
line): it finds ncu and the GPU's compute capability, asks ncu which metrics the GPU
supports, runs the kernel pass (FLOPs, per kernel, each kernel replayed) and the step
pass (the step's DRAM bytes, range replay), retrying a pass once without metrics ncu
rejects, then writes the raw CSVs and one JSON: the parsed counters with "status" ok,
or "unavailable"/"error"/"missing_counters"/"untrusted_counters" with a message that
says why. A machine that cannot be profiled never fails the study. What the passes
measure and how ncu is called: ``dnnroofline.ncu.command``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic, write_text_atomic
from dnnroofline.ncu.command import (
    COUNTERS_UNAVAILABLE,
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
    prepare_driver_argv,
    query_metrics_command,
    step_metrics_for_arch,
)
from dnnroofline.ncu.hierarchy import HierarchyCounters, counters_for, section_paths
from dnnroofline.ncu.parse import empty_result, parse_ncu_text, read_text, tensor_counter_gap
from dnnroofline.processes import kill_group

NOTE_PREFIX = "==PROFILE_NCU=="


def log(msg: str) -> None:
    print(f"profile_ncu: {msg}", flush=True)


def _executables(pattern: str) -> list[str]:
    found = [os.path.abspath(p) for p in glob.glob(pattern)]
    return [p for p in found if os.path.isfile(p) and os.access(p, os.X_OK)]


def resolve_executable(name: str) -> tuple[str | None, str]:
    """(the ncu to run, how it was found): see dnnroofline.ncu.command.find_ncu."""
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
    finally:
        if proc.poll() is None:  # timed out, or this stage was stopped (signals_exit)
            kill_group(proc)  # ncu and the driver it profiles: never left on the GPU
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
    # env and config: the capture's run identity (dnnroofline.study.identity.identity_of)
    keep = ("status", "message", "env", "config")
    return {key: run.get(key) for key in keep}


#: The driver's flags that name its run: the identity of a capture whose driver wrote nothing.
_IDENTITY_FLAGS = {"--env": "env", "--arch": "arch", "--precision": "precision"}


def command_identity(driver: list[str]) -> dict:
    """The run a driver command measures, as a run record names it (``env`` and ``config``):
    a capture that failed before the driver wrote its JSON still says which run it was."""
    found: dict = {}
    for flag, value in zip(driver, driver[1:], strict=False):
        if flag in _IDENTITY_FLAGS:
            found[_IDENTITY_FLAGS[flag]] = value
        elif flag == "--batch-size" and value.isdigit():
            found["batch_size"] = int(value)
    config = {k: found[k] for k in ("arch", "precision", "batch_size") if k in found}
    return {"status": None, "env": found.get("env"), "config": config}


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


#: Runs of one pass at most: each one after the first drops the metrics ncu rejected.
PASS_ATTEMPTS = 4


def run_pass(
    pass_name: str,
    exe: str,
    metrics: list[str],
    driver: list[str],
    timeout: float,
    csv_out: str,
) -> dict:
    """One ncu pass over the driver's profiled step, run again without the metrics ncu
    rejects (a few times: some ncu versions name only the first unknown metric).

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
    for attempt in range(1, PASS_ATTEMPTS + 1):
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
            rc, console, timed_out, wall = run_streaming(cmd, timeout)
            rec["returncode"], rec["wall_s"] = rc, round(wall, 3)
            logtext = read_text(log_file) if log_file.exists() else ""
            out["driver_run"] = read_driver_run(run_json)
            out["driver_text"] = run_json.read_text() if run_json.exists() else None
        diag = diagnose_ncu_output(rc, logtext + "\n" + console, timed_out=timed_out)
        rejected = [m for m in metrics if base_name(m) in diag.unknown_metrics]
        if attempt == PASS_ATTEMPTS or diag.reason != "unknown_metric" or not rejected:
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


TRUSTED = {"trusted": True, "reason": None, "checked": False}  # no self-test given


@dataclass(frozen=True)
class CaptureRequest:
    """What profile_ncu.py was asked for (its options, one field each)."""

    ncu: str
    csv_out: str
    json_out: str
    driver: list[str]
    step_csv_out: str | None = None  # default: the csv_out name with .step.csv
    compute_capability: str | None = None  # default: detect
    env_info: str | None = None
    metrics: list[str] | None = None  # default: the set for the GPU
    query: bool = True  # ask ncu --query-metrics what the GPU supports
    driver_run_out: str | None = None
    selftest: str | None = None  # the self-test JSON that gave ``verdict``
    precision: str | None = None
    verdict: dict = field(default_factory=lambda: dict(TRUSTED))
    timeout: float = 7200.0
    query_timeout: float = 300.0

    @property
    def step_csv(self) -> str:
        return self.step_csv_out or str(Path(self.csv_out).with_suffix("")) + ".step.csv"


class _NoCapture(Exception):
    """The capture cannot go on: status, reason, message, the CSV text to keep, and the
    driver's run JSON when it got to write one."""

    def __init__(
        self,
        status: str,
        reason: str,
        message: str,
        csv_text: str | None = None,
        driver_text: str | None = None,
    ):
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message
        self.csv_text = note_csv(message) if csv_text is None else csv_text
        self.driver_text = driver_text


def _compute_capability(req: CaptureRequest) -> tuple[str | None, str]:
    if req.compute_capability:
        cc = parse_compute_capability(req.compute_capability)
        return f"{cc[0]}.{cc[1]}", "--compute-capability"
    return detect_compute_capability(req.env_info)


def section_files(exe: str) -> dict[str, str]:
    """The installed ncu's hierarchical roofline section files, path -> text: in
    ``sections/`` beside the resolved executable, or in the CUDA toolkit's
    ``nsight-compute-*/sections`` (``/usr/local/cuda/bin/ncu`` is a launcher script)."""
    here = Path(os.path.realpath(exe)).parent
    dirs = [here / "sections", *sorted(here.parent.glob("nsight-compute*/sections"), reverse=True)]
    for d in dirs:
        names = section_paths(str(p) for p in d.glob("*.section")) if d.is_dir() else []
        if names:
            return {n: Path(n).read_text(errors="replace") for n in names}
    return {}


def _hierarchy_counters(exe: str, cc_str: str | None, info: dict) -> HierarchyCounters | None:
    """The counters of ncu's own hierarchical chart on this GPU (section files, else the
    table); recorded in ``info["hierarchy_counters"]``. None for an unknown GPU."""
    cc = parse_compute_capability(cc_str)
    if cc is None:
        return None
    counters, notes = counters_for(cc, section_files(exe))
    info["hierarchy_counters"] = {**asdict(counters), "notes": notes}
    for note in notes:
        log(note)
    return counters


def _select_metrics(req: CaptureRequest, exe: str, info: dict) -> tuple[list[str], list[str]]:
    """(kernel-pass metrics, step-pass metrics): the sets for the GPU, less those ncu
    says it does not have. Fills ``info``'s compute capability and metric fields."""
    try:
        cc_str, cc_src = _compute_capability(req)
        info["compute_capability"], info["compute_capability_source"] = cc_str, cc_src
        requested = req.metrics or metrics_for_arch(cc_str)
        hierarchy = _hierarchy_counters(exe, cc_str, info)
        step_requested = step_metrics_for_arch(cc_str, hierarchy)
    except InputError as err:
        raise _NoCapture("unavailable", "gpu_not_supported", str(err)) from None
    info["metrics_requested"] = requested
    metrics, step_metrics = requested, step_requested
    if req.query:
        info["metric_query"]["ran"] = True
        try:
            q = subprocess.run(
                query_metrics_command(exe),
                capture_output=True,
                text=True,
                errors="replace",
                timeout=req.query_timeout,
            )
            qtext = (q.stdout or "") + (q.stderr or "")
        except (OSError, subprocess.SubprocessError) as err:
            q, qtext = None, f"{type(err).__name__}: {err}"
        diag = diagnose_ncu_output(q.returncode if q is not None else None, qtext)
        if diag.reason in COUNTERS_UNAVAILABLE:  # no pass could read a counter: stop here
            info["metric_query"].update(ok=False, message=diag.reason)
            msg = diag.message or ""
            raise _NoCapture(diag.status, diag.reason, msg, note_csv(msg, qtext))
        available = parse_query_metrics(qtext) if q is not None and q.returncode == 0 else set()
        if available:
            sel = filter_supported_metrics(requested, available)
            metrics = sel.kept
            info["metrics_dropped"], info["metrics_substituted"] = sel.dropped, sel.substituted
            info["metric_query"].update(ok=True, message=f"{len(available)} metrics listed")
            if sel.dropped:
                log(f"metrics this GPU/ncu does not support, dropped: {', '.join(sel.dropped)}")
            step_metrics = (
                filter_supported_metrics(step_requested, available).kept or step_requested
            )
        else:
            tail = " | ".join(qtext.strip().splitlines()[-3:])
            info["metric_query"].update(
                ok=False, message=f"query gave no metric list: {tail}"[:500]
            )
            log("ncu --query-metrics gave no metric list; using the full metric set")
    info["metrics"] = metrics
    return metrics, step_metrics


def capture(req: CaptureRequest) -> dict:
    """Run both passes and write the CSVs, the JSON (returned) and the driver's run JSON."""
    info: dict = {
        "executable": req.ncu,
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
        "selftest": {**req.verdict, "file": req.selftest, "precision": req.precision},
    }
    try:
        return _capture(req, info)
    except _NoCapture as stop:
        log(f"{stop.status}: {stop.message}")
        write_text_atomic(req.csv_out, stop.csv_text)
        if "step" not in info["passes"]:
            write_text_atomic(req.step_csv, note_csv(f"step pass not run: {stop.message}"))
        result = failure_json(req.csv_out, stop.status, stop.reason, stop.message, info)
        result["driver_run"] = command_identity(req.driver)
        write_json_atomic(req.json_out, result)
        write_driver_run(
            req.driver_run_out,
            stop.driver_text,
            f"the driver wrote no run JSON: {stop.status}: {stop.message}",
        )
        return result


def _capture(req: CaptureRequest, info: dict) -> dict:
    exe, how = resolve_executable(req.ncu)
    if exe is None:
        raise _NoCapture("unavailable", "ncu_not_found", not_found_message(req.ncu))
    info["executable"], info["executable_found"] = exe, how
    log(f"ncu: {exe} ({how})")
    metrics, step_metrics = _select_metrics(req, exe, info)

    try:
        kernel = run_pass("kernel", exe, metrics, req.driver, req.timeout, req.csv_out)
    except InputError as err:
        raise _NoCapture("error", "bad_command", str(err)) from None
    except OSError as err:
        msg = f"{not_found_message(req.ncu)} ({type(err).__name__}: {err})"
        raise _NoCapture("unavailable", "ncu_not_found", msg) from None
    krec = kernel["record"]
    info["passes"]["kernel"] = krec
    info["command"], info["metrics"] = krec["command"], krec["metrics"]
    info["returncode"], info["wall_s"] = krec["returncode"], krec["wall_s"]
    info["metrics_dropped"] = [*info["metrics_dropped"], *krec["metrics_rejected"]]
    diag = kernel["diag"]
    if kernel["parsed"] is None:
        raise _NoCapture(
            diag.status,
            diag.reason or "error",
            diag.message or "",
            kernel["csv_text"],
            kernel["driver_text"],
        )

    step = None
    drv = kernel["driver_run"]
    if diag.status == "ok" and (drv is None or drv.get("status") in (None, "ok")):
        step = run_pass("step", exe, step_metrics, req.driver, req.timeout, req.step_csv)
        info["passes"]["step"] = step["record"]
        write_text_atomic(req.step_csv, step["csv_text"])
    else:
        why = diag.message or f"the driver reported status {drv.get('status')!r}"
        write_text_atomic(req.step_csv, note_csv(f"step pass not run: {why}"))

    status, reason, message, missing = judge(kernel, step, metrics, req.verdict, req.precision)
    combined = combine_passes(kernel["parsed"], step["parsed"] if step is not None else None)
    result = {
        "status": status,
        "reason": reason,
        "message": message,
        "missing": missing,
        **combined,
        "step_source_file": req.step_csv,
        "ncu": info,
        "driver_run": kernel["driver_run"] or command_identity(req.driver),
        "step_driver_run": step["driver_run"] if step is not None else None,
    }
    write_text_atomic(req.csv_out, kernel["csv_text"])
    write_json_atomic(req.json_out, result)
    write_driver_run(req.driver_run_out, kernel["driver_text"], "the driver wrote no run JSON")
    t = result["totals"]
    log(
        f"{status}: {t['kernels']} kernels, FLOP {t['flop']['total']} (kernel pass), "
        f"DRAM bytes {t['bytes']['dram']} (step pass)" + (f" ({message})" if message else "")
    )
    return result
