"""Data-parallel runs: one driver process per rank, watched by a launcher, records merged.

``run_train.py --nproc N`` is the launcher. It validates the run like any other, then
starts N copies of ``run_train.py`` with ``--rank i``. Each rank trains the model under
DistributedDataParallel (gloo on CPU, NCCL on CUDA with GPU ``i``), times its own steps
exactly as a single-process run does, and writes its own record; the launcher merges
them into the run JSON: ``ranks`` keeps every rank's step times, ``step_time_s`` is the
slowest rank's, and images/s is N x batch / the slowest rank's median step.

Why not torchrun: the launcher must know which rank failed first and why, keep each
rank's record, and guarantee that no process outlives the run. Ranks rendezvous
through a FileStore in a private temporary folder, so there is no port to choose.

Failure. A rank whose step raises writes its failed record and exits at once; the
others, blocked in a collective, are killed. The cause is the failed rank that ended
first (a rank dies by a peer's exit only after it), and the run is that rank's status
(``oom``/``error``) with ``rank i: <message>``: recorded, exit 0, like any crashed run.
A rank that dies without a record (a signal, the OOM killer) gives its exit and the
tail of its log. A rank refusing bad input (exit 2) makes the launcher exit 2.

No process left behind: each rank leads its own process group (compile workers
included), is killed with it on every launcher exit path, SIGTERM/SIGINT/SIGHUP
included, and dies with the launcher even when that is SIGKILLed (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic
from dnnroofline.measure.energy import merge_rank_energy
from dnnroofline.processes import die_with_parent, ignore_signals, kill_group, signals_exit

#: Exit status of a rank whose run failed after it wrote its record.
RANK_FAILED = 3
#: Seconds between two looks at the ranks.
POLL_S = 0.1
_LOG_TAIL = 1500
_RANK_KEYS = (
    "step_time_s",
    "data_wait_s",
    "compute_s",
    "images_per_s",
    "setup_s",
    "warmup_s",
    "first_step_s",
    "wall_s",
    "user_s",
    "sys_s",
    "max_rss_bytes",
    "peak_device_memory_bytes",
    "device_name",
    "start_time",
    "end_time",
    "energy",
)


def dist_backend(backend: str) -> str:
    """The collective backend of a device: NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if backend == "cuda" else "gloo"


def rank_threads(budget: int, nproc: int, expect: int | None, omp_value: str | None) -> int:
    """Threads of each rank from the job's thread budget (OMP_NUM_THREADS, else all cores).

    With ``--expect-threads T`` (threads per process, as the env declares them) the job
    must hold exactly nproc x T threads: fewer would run the ranks on shared cores.
    """
    omp = f"OMP_NUM_THREADS={omp_value}" if omp_value else "OMP_NUM_THREADS unset"
    if expect is not None:
        if budget != nproc * expect:
            raise InputError(
                f"--expect-threads {expect} with --nproc {nproc}: env declares {nproc} "
                f"processes x {expect} thread{'s' if expect != 1 else ''} = {nproc * expect} "
                f"threads but this job got "
                f"{budget} ({omp}); run snakemake with --cores >= {nproc * expect}"
            )
        return expect
    if budget < nproc:
        raise InputError(
            f"--nproc {nproc}: needs at least one thread per process but this job has "
            f"{budget} ({omp}); set OMP_NUM_THREADS to nproc x threads per process"
        )
    return budget // nproc


def rank_command(script: str, argv: Sequence[str], rank: int, store: str, out: str) -> list[str]:
    """The rank's command line: the launcher's own arguments, then its rank, the
    rendezvous file and its own record (argparse keeps the last ``--out``)."""
    return [
        sys.executable,
        script,
        *argv,
        "--rank",
        str(rank),
        "--dist-store",
        store,
        "--out",
        out,
    ]


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the kernel's OOM killer sends it when memory runs out)" if -code == 9 else ""
        return f"was killed by {name}{hint}"
    return f"exited with status {code}"


def _tail(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-6:])[-_LOG_TAIL:]


def _rank_entry(
    rank: int,
    pid: int | None,
    part: Mapping | None,
    exit_code: int | None,
    extra_keys: Sequence[str] = (),
) -> dict:
    entry: dict[str, Any] = {"rank": rank, "pid": pid, "exit_code": exit_code}
    entry["status"] = part.get("status") if part else None
    entry["message"] = part.get("message") if part else None
    for key in (*_RANK_KEYS, *extra_keys):
        entry[key] = part.get(key) if part else None
    return entry


def failure_cause(
    parts: Sequence[Mapping | None],
    exits: Sequence[int | None],
    exit_times: Sequence[float | None],
    killed: set[int],
    logs: Sequence[str],
) -> tuple[int, str, str] | None:
    """(rank, status, message) of the rank that failed first, None when every rank is ok.

    Ranks the launcher killed are not causes. A failed record dates from its
    ``end_time``; a rank without a record, from when the launcher saw it exit.
    """
    causes = []
    for i, (part, code) in enumerate(zip(parts, exits, strict=True)):
        if i in killed:
            continue
        if part is not None and part.get("status") != "ok":
            causes.append(
                (part.get("end_time") or 0.0, i, part.get("status") or "error", part.get("message"))
            )
        elif part is None and code is not None:
            why = f"{describe_exit(code)} before writing its record"
            tail = _tail(logs[i]) if i < len(logs) else ""
            message = f"{why}; last log lines: {tail}" if tail else why
            causes.append((exit_times[i] or 0.0, i, "error", message))
    if not causes:
        return None
    _, rank, status, message = min(causes, key=lambda c: (c[0], c[1]))
    return rank, str(status), f"rank {rank}: {message or 'failed without a message'}"


def merge_records(
    base: dict[str, Any],
    parts: Sequence[Mapping | None],
    exits: Sequence[int | None],
    pids: Sequence[int | None],
    *,
    exit_times: Sequence[float | None] | None = None,
    killed: set[int] | None = None,
    logs: Sequence[str] = (),
    rank_keys: Sequence[str] = (),
) -> dict[str, Any]:
    """The run record of a data-parallel run from its ranks' records.

    ``base`` is the launcher's record (config, start time); ``parts[i]`` rank i's
    record or None. All ok: the slowest rank (largest median step) gives the step
    statistics and images/s = nproc x batch / its median step; the warm-up figures
    are the largest of any rank, ``max_rss_bytes`` the sum over ranks (the job's
    footprint) and ``peak_device_memory_bytes`` the largest (one device per rank);
    ``energy`` is every rank's (:func:`dnnroofline.measure.energy.merge_rank_energy`).
    ``rank_keys``: more keys of the ranks' records that each rank entry keeps.
    """
    nproc = len(parts)
    exit_times = list(exit_times or [None] * nproc)
    record = dict(base)
    record["ranks"] = [_rank_entry(i, pids[i], parts[i], exits[i], rank_keys) for i in range(nproc)]
    cause = failure_cause(parts, exits, exit_times, killed or set(), logs)
    if cause is not None:
        rank, status, message = cause
        record.update(status=status, message=message, failed_rank=rank)
        for key in ("step_time_s", "data_wait_s", "compute_s", "images_per_s"):
            record[key] = None
        part = parts[rank]
        if part and part.get("traceback"):
            record["traceback"] = part["traceback"]
        return record
    ok = [p for p in parts if p is not None]
    if len(ok) != nproc:  # every rank exited 0 yet a record is missing: a driver bug
        missing = [i for i, p in enumerate(parts) if p is None]
        record.update(status="error", message=f"rank(s) {missing} exited 0 without a record")
        return record
    medians = [p["step_time_s"]["median"] for p in ok]
    slowest = max(range(nproc), key=lambda i: medians[i])
    top = ok[slowest]
    batch = int(base["config"]["batch_size"])
    steps = len(top["step_time_s"].get("all", ()))  # the timed steps each rank ran

    def largest(key: str) -> float | None:
        values = [p.get(key) for p in ok if p.get(key) is not None]
        return max(values) if values else None

    rss = [p.get("max_rss_bytes") for p in ok]
    record.update(
        status="ok",
        message=None,
        slowest_rank=slowest,
        step_time_s=top["step_time_s"],
        data_wait_s=top["data_wait_s"],
        compute_s=top["compute_s"],
        images_per_s=nproc * batch / medians[slowest],
        timer=top.get("timer"),
        timed_region=top.get("timed_region"),
        numerics=ok[0].get("numerics"),
        device_name=ok[0].get("device_name"),
        dataset_images=ok[0].get("dataset_images"),
        grad_scaler=ok[0].get("grad_scaler"),
        gpu_telemetry=ok[0].get("gpu_telemetry"),
        setup_s=largest("setup_s"),
        warmup_s=largest("warmup_s"),
        first_step_s=largest("first_step_s"),
        peak_device_memory_bytes=largest("peak_device_memory_bytes"),
        max_rss_bytes=sum(rss) if all(r is not None for r in rss) else None,
        energy=merge_rank_energy([p.get("energy") for p in ok], steps, nproc * steps * batch),
    )
    for key in ("torch", "torchvision", "cuda", "cudnn", "gpu_clocks"):
        if key in ok[0]:
            record[key] = ok[0][key]
    return record


# --------------------------------------------------------------------------- processes


class _Forward:
    """Copies a rank's log to the launcher's stderr, line by line, prefixed by its rank."""

    def __init__(self, path: Path, rank: int):
        self.path, self.prefix, self.pos, self.text = path, f"[rank {rank}] ", 0, ""

    def pump(self, final: bool = False) -> None:
        try:
            with open(self.path, errors="replace") as fh:
                fh.seek(self.pos)
                new = fh.read()
                self.pos = fh.tell()
        except OSError:
            return
        self.text += new
        lines = self.text.split("\n")
        self.text = "" if final else lines.pop()
        for line in lines:
            if line:
                sys.stderr.write(self.prefix + line + "\n")
        sys.stderr.flush()


def launch(
    base: dict[str, Any],
    argv: Sequence[str],
    nproc: int,
    threads: int,
    say: Callable[[str], None],
    script: str | None = None,
    rank_keys: Sequence[str] = (),
) -> dict[str, Any]:
    """Run ``nproc`` ranks of the driver and return the merged run record.

    ``argv``: the launcher's own driver arguments; ``threads``: OMP_NUM_THREADS of
    each rank; ``script``: the driver (run_train.py, or trace_step.py for a trace);
    ``rank_keys``: see :func:`merge_records`. Raises InputError when a rank refuses
    its input (exit 2).
    """
    script = script or str(Path(__file__).resolve().parents[2] / "run_train.py")
    t0 = time.monotonic()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="dnnroofline-ddp-") as tmp, signals_exit():
        folder = Path(tmp)
        outs = [folder / f"rank{i}.json" for i in range(nproc)]
        logs = [folder / f"rank{i}.log" for i in range(nproc)]
        forwards = [_Forward(logs[i], i) for i in range(nproc)]
        exits: list[int | None] = [None] * nproc
        exit_times: list[float | None] = [None] * nproc
        killed: set[int] = set()
        try:
            for i in range(nproc):
                cmd = rank_command(script, argv, i, str(folder / "store"), str(outs[i]))
                with open(logs[i], "w") as log:
                    procs.append(
                        subprocess.Popen(
                            cmd,
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            env=env,
                            start_new_session=True,
                            preexec_fn=die_with_parent(os.getpid()),
                        )
                    )
            say(
                f"{nproc} ranks started ({dist_backend(base['config']['backend'])}, "
                f"{threads} thread(s) each), pids {' '.join(str(p.pid) for p in procs)}"
            )
            while any(code is None for code in exits):
                time.sleep(POLL_S)
                for f in forwards:
                    f.pump()
                for i, proc in enumerate(procs):
                    if exits[i] is None and proc.poll() is not None:
                        exits[i], exit_times[i] = proc.returncode, time.time()
                if any(code not in (None, 0) for code in exits):
                    break  # a rank failed: the others may be blocked in a collective
            for i, proc in enumerate(procs):
                if exits[i] is None:
                    killed.add(i)
                    kill_group(proc)
                    exits[i] = proc.returncode
        finally:
            ignore_signals()
            for proc in procs:
                kill_group(proc)  # leftovers of a finished rank, or an interrupted launch
            for f in forwards:
                f.pump(final=True)
        texts = [p.read_text(errors="replace") if p.exists() else "" for p in logs]
        for i, code in enumerate(exits):
            if code == 2 and i not in killed:
                raise InputError(f"rank {i}: {_tail(texts[i])}")
        parts = [_read_part(p) for p in outs]
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = merge_records(
        base,
        parts,
        exits,
        [p.pid for p in procs],
        exit_times=exit_times,
        killed=killed,
        logs=texts,
        rank_keys=rank_keys,
    )
    record["wall_s"] = time.monotonic() - t0
    record["user_s"] = ru1.ru_utime - ru0.ru_utime
    record["sys_s"] = ru1.ru_stime - ru0.ru_stime
    record["end_time"] = time.time()
    return record


def _read_part(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def rank_main(
    resolved: Any,
    out: str,
    say: Callable[[str], None],
    work: Callable[[Any, Callable[[str], None]], dict[str, Any]],
) -> int:
    """One rank: join the group, run as the single-process driver does, write the record.

    ``work(resolved, say)`` makes the record: the driver's timed run, or the trace job's
    traced step (the caller passes it: this module sits below both). Exit 0 when ok; a
    failed run writes its record and leaves at once (``os._exit``, RANK_FAILED): its
    peers are blocked in a collective, and the launcher kills them.
    """
    import torch.distributed as dist

    cfg = resolved.cfg
    dist.init_process_group(
        dist_backend(resolved.backend),
        init_method=f"file://{cfg.dist_store}",
        rank=cfg.rank,
        world_size=cfg.nproc,
    )
    record = work(resolved, say)
    record["rank"] = cfg.rank
    write_json_atomic(out, record)
    if record["status"] != "ok":
        sys.stderr.flush()
        os._exit(RANK_FAILED)
    dist.destroy_process_group()
    return 0
