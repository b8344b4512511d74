"""Running ``perf``: the once-per-env probe and the per-config counter profile.

The pure parts (event choice, CSV parsing, FLOPs and bytes) are in
:mod:`dnnroofline.measure.perf`; this module runs the commands and assembles the records.

Profile method (like the ncu step, apart from the timed runs): the driver runs twice
under ``perf stat -x,`` with the same warm-up and ``iters_short`` then ``iters_long``
timed steps; per-step counts are the difference over the extra steps, so process
start, model build and warm-up cancel out. DRAM events are uncore/data-fabric events
and count system-wide (``-a``): other processes' traffic is included, so run alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from dnnroofline.measure import perf

PROBE_TIMEOUT_S = 60


def _run(cmd: Sequence[str], timeout: float) -> tuple[int, str]:
    try:
        p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, f"{cmd[0]}: {exc}"
    return p.returncode, (p.stdout or "") + (p.stderr or "")


def _kernel_pmu_line() -> str | None:
    """The kernel's ``Performance Events:`` boot line, where dmesg may be read."""
    rc, out = _run(["dmesg"], 10)
    if rc != 0:
        return None
    return next((ln for ln in out.splitlines() if "Performance Events:" in ln), None)


def _events(chosen: dict) -> list[str]:
    return list(chosen["flop"]) + list(chosen["dram"])


def resolved_executable(executable: str) -> str:
    """The perf binary that ``executable`` names: its full path where it is found, else
    the name as given (a probe of a missing perf says so)."""
    return shutil.which(executable) or executable


def probe(executable: str = "perf") -> dict:
    """Whether perf can count FLOPs and DRAM bytes on this machine, and why not.

    Returns ``{"status": "ok" | "unavailable", "reason", "perf", "executable", "events",
    "output"}``: ``executable`` the binary probed (:func:`resolved_executable`), ``events``
    the chosen FLOP and DRAM events, ``output`` perf's own probe output.
    """
    exe = shutil.which(executable)
    if exe is None:
        return {
            "status": "unavailable",
            "reason": f"perf not found ({executable!r} is not on PATH; install linux-perf / "
            "linux-tools for the running kernel)",
            "perf": None,
            "executable": executable,
            "events": None,
            "output": None,
        }
    _, version = _run([exe, "--version"], PROBE_TIMEOUT_S)
    rc_list, listing = _run([exe, "list", "--no-desc"], PROBE_TIMEOUT_S)
    listed = perf.listed_events(listing) if rc_list == 0 else set()
    chosen = perf.choose_events(listed)
    events = _events(chosen) or ["cycles", "instructions"]
    cmd = [exe, "stat", "-x,", "-e", ",".join(events)]
    if chosen["dram"]:
        cmd.append("-a")
    rc, out = _run([*cmd, "--", "true"], PROBE_TIMEOUT_S)
    reason = perf.unavailable_reason(out, returncode=rc, listed=listed, kernel_log=None)
    if reason is None and not chosen["dram"]:
        reason = (
            "FLOP events count, but perf lists no DRAM traffic events (uncore_imc cas_count, "
            "uncore_imc_free_running data_read/write, AMD dram_channel_data_controller_*): "
            "no measured AI without bytes"
        )
    if reason is not None:
        kernel = _kernel_pmu_line()
        if kernel:
            reason += f"; kernel: {kernel.strip()}"
    return {
        "status": "unavailable" if reason else "ok",
        "reason": reason,
        "perf": version.strip() or None,
        "executable": exe,
        "events": chosen,
        "output": out.strip()[:4000],
    }


def probe_for(executable: str, recorded: object = None) -> dict:
    """The probe of ``executable``: ``recorded`` (the env's, from ceilings.json) where it
    probed that very binary, else a new probe. Events chosen on one perf binary are
    never used with another."""
    if isinstance(recorded, dict) and recorded.get("executable") == resolved_executable(executable):
        return recorded
    return probe(executable)


def profile(
    driver_cmd: Sequence[str],
    probe_result: dict,
    *,
    executable: str = "perf",
    iters_short: int = 1,
    iters_long: int = 4,
    driver_run_out: str | None = None,
) -> dict:
    """Per-step FLOPs and DRAM bytes of one configuration (see the module docstring).

    ``driver_cmd`` is the driver command without ``--iters`` and ``--out``. When the
    probe said ``unavailable`` nothing runs and the record says why.
    """
    base = {
        "schema_version": 1,
        "tool": "perf stat -x,",
        "probe": {k: probe_result.get(k) for k in ("status", "reason", "perf")},
        "iters": [iters_short, iters_long],
    }
    if probe_result.get("status") != "ok":
        return {
            **base,
            "status": "unavailable",
            "reason": probe_result.get("reason"),
            "flop_per_step": None,
            "dram_bytes_per_step": None,
        }
    if iters_long <= iters_short:
        raise ValueError("iters_long must exceed iters_short")
    chosen = probe_result["events"]
    exe = resolved_executable(executable)
    counts, outputs = [], []
    with tempfile.TemporaryDirectory(prefix="perf-") as tmp:
        for n in (iters_short, iters_long):
            stat = os.path.join(tmp, f"stat_{n}.csv")
            run_json = os.path.join(tmp, f"run_{n}.json")
            cmd = [exe, "stat", "-x,", "-o", stat, "-e", ",".join(_events(chosen))]
            if chosen["dram"]:
                cmd.append("-a")
            cmd += ["--", *driver_cmd, "--iters", str(n), "--out", run_json]
            rc, out = _run(cmd, 3600)
            outputs.append(out[-2000:])
            run = None
            if os.path.exists(run_json):
                with open(run_json) as fh:
                    run = json.load(fh)
            if rc != 0 or run is None or run.get("status") != "ok":
                why = (run or {}).get("message") or out.strip()[-1000:]
                return {
                    **base,
                    "status": "error",
                    "reason": f"driver under perf (--iters {n}) failed (exit {rc}): {why}",
                    "flop_per_step": None,
                    "dram_bytes_per_step": None,
                }
            if driver_run_out and n == iters_long:
                with open(driver_run_out, "w") as fh:
                    json.dump(run, fh, indent=1)
            with open(stat) as fh:
                counts.append(perf.totals(perf.parse_stat_csv(fh.read())))
    steps = iters_long - iters_short
    flop = [perf.flops_of(c, chosen["flop"]) for c in counts]
    dram = [perf.bytes_of(c, chosen["dram"]) for c in counts]
    flop_step = (flop[1] - flop[0]) / steps if None not in flop else None
    dram_step = (dram[1] - dram[0]) / steps if None not in dram else None
    ok = bool(flop_step and flop_step > 0 and dram_step and dram_step > 0)
    return {
        **base,
        "status": "ok" if ok else "error",
        "reason": None if ok else "counts did not grow with the extra steps (multiplexing?)",
        "events": chosen,
        "counts": counts,
        "flop_per_step": flop_step,
        "dram_bytes_per_step": dram_step,
        "ai": flop_step / dram_step if ok else None,
        # the long run's env and config: the file's run identity (study.identity.identity_of)
        "driver_run": {"env": run.get("env"), "config": run.get("config")},
        "method": (
            f"perf stat -x, over the driver at --iters {iters_short} and {iters_long} (same "
            f"warm-up); per-step = difference / {steps}. FLOP events: "
            f"{', '.join(chosen['flop'])}; DRAM events (system-wide): {', '.join(chosen['dram'])}"
        ),
    }
