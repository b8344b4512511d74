"""The op-class sweep of one env: how fast each op class runs, by its shape.

Per table (:data:`dnnroofline.estimate.op_classes.TABLE_KEYS`) the sweep draws ops at random
over fixed shape ranges (:mod:`dnnroofline.measure.sweep_ops`: batch, channels, spatial
size, kernel, stride and groups of convolutions, forward and backward; GEMM m, n, k;
elementwise ops in place or not, broadcast or not; batch norm; pooling; reductions;
copies; SGD's update, foreach where the device's optimizer uses it), never from a model
of a study, keeps those whose ideal time on the env's roofs falls in the device's
window, and times each as the step calls it (the ceilings' timer: warm-up, repeats
sized to last a few milliseconds, the fastest, as the roofs are taken: another process
only ever adds time; inputs rotating between two sets). On CUDA the
calls of a repeat are queued behind a sleeping kernel, so their CUDA-event time is the
device's, not the host's launch pace.

The draws are seeded and the rounds go over the tables in turn, so a budget cut leaves
every table its first rows. The host's costs (per op with autograd, the step's fixed
costs) come from :mod:`dnnroofline.measure.dispatch`. What is measured depends on the
machine, not on the study: it is kept per machine fingerprint in the user's cache
(:func:`sweep_env`), and a second study on the same machine reuses it. The model fits
its efficiency from these rows (:mod:`dnnroofline.perfmodel.op_class_tables`).
"""

from __future__ import annotations

import datetime
import random
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.estimate.op_classes import TABLE_KEYS, TABLES_SCHEMA_VERSION
from dnnroofline.estimate.roofline import ideal_seconds, roofs_from_ceilings
from dnnroofline.measure import fresh_pages, sweep_ops
from dnnroofline.measure.timer import cudnn_benchmark, matmul_mode, time_repeats
from dnnroofline.study.precisions import unsupported_reason

#: Timer settings per device (:func:`time_repeats`); quick: tests.
TIMING: dict[str, dict] = {
    "cpu": {"warmup": 1, "reps": 4, "min_reps": 3, "time_cap_s": 0.15, "min_repeat_s": 0.002},
    "cuda": {"warmup": 2, "reps": 5, "min_reps": 3, "time_cap_s": 0.5, "min_repeat_s": 0.002},
    "quick": {"warmup": 1, "reps": 3, "min_reps": 2, "time_cap_s": 0.05, "min_repeat_s": 0.001},
}
#: The sweep's time guard per device, the host's costs and ``import torch`` included
#: (the issue's bounds: 2 min on a 2-core CPU host, 3 min on an H100 or H200).
BUDGET_S = {"cpu": 100.0, "cuda": 170.0}
#: Rows per table and precision, per device (quick: tests).
ROWS: dict[str, dict[str, int]] = {
    "cpu": {"conv_fwd": 80, "conv_bwd": 80, "conv_depthwise_fwd": 60, "conv_depthwise_bwd": 60,
            "gemm": 25, "elementwise": 40, "reduction": 12, "normalization": 48, "pooling": 12,
            "copy": 15, "optimizer": 12},
    "cuda": {"conv_fwd": 60, "conv_bwd": 60, "conv_depthwise_fwd": 20, "conv_depthwise_bwd": 20,
             "gemm": 40, "elementwise": 40, "reduction": 12, "normalization": 20, "pooling": 12,
             "copy": 15, "optimizer": 15},
    "quick": dict.fromkeys(TABLE_KEYS, 3),
}  # fmt: skip
#: Ideal seconds (on the env's roofs) a drawn op must have to be timed, per device:
#: above the host's cost per call, below what would spend the budget on one op.
WINDOW_S = {"cpu": (3e-6, 4e-3), "cuda": (2e-6, 2e-3), "quick": (1e-7, 2e-4)}
#: The input pool's elements per device (two sets): the largest operand it can hold.
POOL_ELEMENTS = {"cpu": 2 * 2**24, "cuda": 2 * 2**28, "quick": 2 * 2**18}
#: Draws per row before a table gives up on its window (tiny ranges, odd roofs).
MAX_DRAWS = 60
#: A last-level cache the machine does not report: as large as a server's.
DEFAULT_CACHE_BYTES = 64 * 2**20
#: The sleep (GPU cycles per queued call) that keeps a CUDA repeat's calls queued.
SLEEP_CYCLES_PER_CALL = 40_000


def _device_paced(fn: Any, timing: Mapping) -> tuple[float, bool]:
    """CUDA: seconds per call of ``fn``'s calls queued behind a sleeping kernel (the
    device's pace), the fastest repeat; and whether the host always queued them all
    before the sleep ended (else the time is an upper bound)."""
    import torch

    warm_up = {**timing, "reps": 1, "min_reps": 1}
    _, inner = time_repeats("cuda", fn, **warm_up)  # warm-up, and the calls per repeat
    paced, behind = [], True
    for _ in range(timing["reps"]):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        torch.cuda._sleep(SLEEP_CYCLES_PER_CALL * inner)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        behind &= not start.query()
        end.synchronize()
        paced.append(start.elapsed_time(end) / 1e3 / inner)
    return min(paced), behind


def _time_op(device: str, op: sweep_ops.Op, timing: Mapping) -> tuple[float, bool]:
    if device == "cuda":
        return _device_paced(op.call, timing)
    times, _ = time_repeats(device, op.call, **timing)
    return min(times), True


def _supported(device: str, precisions: Iterable[str], cuda_cc, cpu_flags) -> tuple[list, list]:
    ok, skipped = [], []
    for p in dict.fromkeys(precisions):
        why = unsupported_reason(device, p, cuda_cc=cuda_cc, cpu_flags=cpu_flags)
        if why:
            skipped.append({"precision": p, "reason": f"{device}: {why}"})
        else:
            ok.append(p)
    return ok, skipped


def _admit(roof_c: float, roof_m: float, window: tuple[float, float]):
    low, high = window
    return lambda flops, nbytes: low <= ideal_seconds(flops, nbytes, roof_c, roof_m) <= high


def _draw_row(key: str, draw: sweep_ops.Draw, setting: sweep_ops.Setting, foreach: bool):
    """A drawn op of ``key`` inside the window, or None after :data:`MAX_DRAWS` tries."""
    for _ in range(MAX_DRAWS):
        try:
            return sweep_ops.draw_op(key, draw, setting, foreach)
        except sweep_ops.Rejected:
            continue
    return None


def time_rows(
    device: str,
    precisions: list[str],
    roofs: Mapping,
    budget_end: float,
    *,
    mode: str,
    channels_last: bool,
    foreach: bool,
    cache_bytes: int = 0,
) -> tuple[dict, list[str]]:
    """``{precision: {table: [row]}}`` of the timed draws, and notes (left out, failed);
    each op's inputs spread over twice ``cache_bytes`` (the device's last-level cache)."""
    import torch

    from dnnroofline.estimate.op_rules import fresh_outputs

    rows_wanted = ROWS[mode]
    timing, window = TIMING[mode], WINDOW_S[mode]
    pool = sweep_ops.Pool(torch, device, POOL_ELEMENTS[mode])
    draws = {p: sweep_ops.Draw(random.Random(f"{p}"), sweep_ops.RANGES[mode]) for p in precisions}
    settings = {
        p: sweep_ops.Setting(torch, pool, p, channels_last,
                             _admit(roofs["compute"][p], roofs["memory"], window),
                             cold_bytes=2 * cache_bytes)
        for p in precisions
    }  # fmt: skip
    rows: dict[str, dict[str, list]] = {p: {} for p in precisions}
    notes: list[str] = []
    left_out: dict[str, int] = {}
    queued_ahead = True
    for i in range(max(rows_wanted.values())):
        for p in precisions:
            for key in TABLE_KEYS:
                if i >= rows_wanted[key]:
                    continue
                if time.monotonic() > budget_end:
                    left_out[key] = left_out.get(key, 0) + 1
                    continue
                try:
                    with matmul_mode(device, p), cudnn_benchmark(device), torch.no_grad():
                        op = _draw_row(key, draws[p], settings[p], foreach)
                        if op is None:
                            continue
                        seconds, ahead = _time_op(device, op, timing)
                        # what a call allocates: the share of its time that is fresh
                        # pages, taken out of it where the tables are read (CPU)
                        fresh = fresh_outputs(op.call(), pool.buffers()) if device == "cpu" else []
                except (RuntimeError, NotImplementedError) as exc:  # one op, not the sweep
                    notes.append(f"{p} {key}: failed, left out: {exc}")
                    continue
                queued_ahead &= ahead
                rows[p].setdefault(key, []).append(
                    {
                        "phase": op.phase,
                        "shape": op.shape,
                        "flops": op.flops,
                        "bytes": op.nbytes,
                        "seconds": seconds,
                        "what": op.what,
                        **({"fresh_bytes": fresh} if fresh else {}),
                    }  # fmt: skip
                )
    for p, by_key in rows.items():
        missing = [k for k in TABLE_KEYS if not by_key.get(k)]
        if missing:
            notes.append(f"{p}: no row drawn inside the window for {', '.join(missing)}")
    if left_out:
        notes.append(
            f"time budget spent: left out {sum(left_out.values())} rows "
            f"({', '.join(f'{k} {n}' for k, n in left_out.items())})"
        )
    if not queued_ahead:
        notes.append("the host did not always queue a repeat before its sleep ended: upper bounds")
    return rows, notes


def measure(
    device: str,
    precisions: Iterable[str],
    threads: int,
    roofs: Mapping,
    budget_s: float,
    *,
    quick: bool = False,
    channels_last: bool = False,
    cpu_flags: Iterable[str] | None = None,
    cuda_cc: tuple[int, int] | None = None,
    roofs_from: str = "the ceilings",
    started: float | None = None,
    cache_bytes: int | None = None,
) -> dict:
    """Time the sweep and the host's costs on ``device`` (cpu or cuda): the machine's
    part of the efficiency document, before its rows are set against the roofs.
    ``cache_bytes``: the device's last-level cache, which each op's inputs outgrow
    (None: unknown, :data:`DEFAULT_CACHE_BYTES`; quick mode: none)."""
    t0 = time.monotonic() if started is None else started
    import torch

    from dnnroofline.measure.dispatch import measure_dispatch

    torch.set_num_threads(int(threads))
    run, skipped = _supported(device, precisions, cuda_cc, cpu_flags)
    for p in run:
        if p not in roofs["compute"]:
            raise InputError(f"{roofs_from}: no compute roof for precision {p!r} to sweep")
    mode = "quick" if quick else device
    dispatch = measure_dispatch(device, run, quick=quick)
    if device == "cpu":  # a CUDA tensor comes from torch's caching allocator: none pays
        dispatch["fresh_pages"] = fresh_pages.measure(torch)
    foreach = device == "cuda"  # torch's SGD picks foreach for CUDA tensors, not for CPU's
    cache = 0 if quick else cache_bytes or DEFAULT_CACHE_BYTES
    rows, notes = time_rows(device, run, roofs, t0 + budget_s, mode=mode,
                            channels_last=channels_last, foreach=foreach,
                            cache_bytes=cache)  # fmt: skip
    if quick:
        notes.append("QUICK mode: tiny sizes for tests; not the env's efficiencies")
    return {
        "device": device,
        "threads": int(threads),
        "precisions": run,
        "skipped": skipped,
        "channels_last": channels_last,
        "quick": quick,
        "foreach": foreach,
        "cache_bytes": cache,
        "budget_s": budget_s,
        "torch": torch.__version__,
        "method": _method(mode, channels_last),
        "dispatch": dispatch,
        "rows": rows,
        "notes": notes,
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "wall_s": round(time.monotonic() - t0, 3),
    }


def _method(mode: str, channels_last: bool) -> str:
    timing, (low, high) = TIMING[mode], WINDOW_S[mode]
    timer = (
        "CUDA events over calls queued behind a sleeping kernel (the device's pace)"
        if mode == "cuda"
        else "time.perf_counter"
    )
    fmt = "channels_last" if channels_last else "contiguous (NCHW)"
    return (
        f"per table, up to {max(ROWS[mode].values())} ops drawn at random (seeded) over "
        f"fixed shape ranges ({mode}), never from a study's models, kept where their ideal "
        f"time on the env's roofs is {low:g}-{high:g} s; per op the fastest of "
        f"{timing['min_reps']}-{timing['reps']} repeats after warm-up (as the roofs are "
        f"taken), each at least {timing['min_repeat_s'] * 1e3:g} ms of calls, {timer}; "
        f"inputs rotate between sets spread over twice the last-level cache (at least "
        f"{sweep_ops.MIN_SETS}); activations {fmt}; FLOPs by "
        "flop_count's rules, bytes = tensor arguments read + outputs written in full; "
        "ideal_s = max(flops / compute roof, bytes / memory roof) on the env's measured roofs"
    )


def with_roofs(machine: Mapping, roofs: Mapping) -> dict[str, dict[str, list]]:
    """The measured rows with each one's ideal time and efficiency on ``roofs`` (a
    cached sweep's rows are set against the env's own roofs)."""
    out: dict[str, dict[str, list]] = {}
    for p, by_key in machine["rows"].items():
        roof_c = roofs["compute"][p]
        out[p] = {}
        for key, rows in by_key.items():
            done = []
            for r in rows:
                ideal = ideal_seconds(r["flops"], r["bytes"], roof_c, roofs["memory"])
                done.append({**r, "ideal_s": ideal, "efficiency": ideal / r["seconds"]})
            out[p][key] = sorted(done, key=lambda r: r["ideal_s"])
    return out


def fingerprint(device: str, device_name: str | None, cpu: Mapping, threads: int) -> dict:
    """What the sweep's numbers depend on: the machine, its threads, torch."""
    import torch

    return {
        "device": device,
        "device_name": device_name,
        "cpu_model": cpu.get("model"),
        "cpu_flags": sorted(cpu.get("flags_all") or []),
        "cores_logical": cpu.get("cores_logical"),
        "threads": int(threads),
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None) if device == "cuda" else None,
    }


def cached_measure(key_parts: Mapping, measure_fn: Any, *, use_cache: bool = True) -> dict:
    """``measure_fn()``'s result, kept per ``key_parts`` (the fingerprint and the sweep's
    settings) and per the sweep's code in the user's cache
    (:func:`dnnroofline.install_cache.kept_while_unchanged`); ``cache`` says which."""
    import json

    from dnnroofline import install_cache

    if not use_cache:
        return {**measure_fn(), "cache": {"hit": False, "kept": False}}
    fresh: dict[str, Any] = {}

    def compute() -> dict:
        fresh["doc"] = measure_fn()
        if fresh["doc"].get("contended"):  # not kept: the next study measures again
            raise _Contended
        return fresh["doc"]

    code = [Path(__file__), Path(sweep_ops.__file__), Path(fresh_pages.__file__),
            Path(__file__).with_name("dispatch.py")]  # fmt: skip
    variant = json.dumps(key_parts, sort_keys=True)
    try:
        value = install_cache.kept_while_unchanged("efficiency_sweep", code, compute, variant)
    except _Contended:
        return {**fresh["doc"], "cache": {"hit": False, "kept": False}}
    return {**value, "cache": {"hit": "doc" not in fresh, "kept": True}}


class _Contended(Exception):
    """A sweep measured while other processes were busy: kept nowhere."""


def sweep_env(
    env: str,
    device: str,
    precisions: Iterable[str],
    ceilings: Mapping,
    *,
    where: str = "ceilings.json",
    budget_s: float | None = None,
    quick: bool = False,
    channels_last: bool = False,
    expect_threads: int | None = None,
    use_cache: bool = True,
    environ: Mapping[str, str] | None = None,
) -> dict:
    """The efficiency document of env ``env`` on this machine: the sweep and the host's
    costs on its device and threads (OMP_NUM_THREADS, checked against
    ``expect_threads``), its rows set against the measured roofs of its ceilings file
    ``ceilings`` (read from ``where``), within ``budget_s`` (None: :data:`BUDGET_S` of
    the device; counted from here, ``import torch`` included). Kept per machine
    fingerprint (``use_cache``): a study on the same machine, threads, torch and
    settings (``environ``, the env's variables, among them) reuses it, and ``cache`` says
    so. Other processes busy meanwhile are noted, and such a sweep is not kept."""
    t0 = time.monotonic()
    import os

    from dnnroofline.measure import contention

    cpu0 = contention.snapshot()
    import torch

    from dnnroofline.measure.ceilings import contended_note, device_facts
    from dnnroofline.measure.envinfo import cpu_info, resolve_device
    from dnnroofline.measure.train_config import check_threads, parse_omp_threads

    dev = resolve_device(device)
    if dev not in ("cpu", "cuda"):
        raise InputError(f"--device {dev}: the op-class sweep runs on cpu or cuda")
    if ceilings.get("device") != dev:
        raise InputError(f"{where}: roofs of device {ceilings.get('device')!r}, sweep on {dev!r}")
    if ceilings.get("env") not in (None, env):
        raise InputError(f"{where}: roofs of env {ceilings.get('env')!r}, not of {env!r}")
    omp = os.environ.get("OMP_NUM_THREADS")
    threads = parse_omp_threads(omp) or torch.get_num_threads()
    check_threads(expect_threads, threads, omp)
    roofs, notes = roofs_from_ceilings(ceilings, None, where)
    cpu = cpu_info()
    facts = device_facts(dev)
    name = facts["name"] if dev == "cuda" else cpu["model"]
    budget = BUDGET_S[dev] if budget_s is None else budget_s
    settings = {"precisions": sorted(dict.fromkeys(precisions)), "channels_last": channels_last,
                "quick": quick, "budget_s": budget}  # fmt: skip
    if environ:  # only then: the sweeps kept before the key existed stay valid
        settings["environment"] = dict(environ)
    key = {**fingerprint(dev, name, cpu, threads), **settings}

    def measure_here() -> dict:
        cache = facts["l2_bytes"] if dev == "cuda" else cpu["llc_bytes"]
        doc = measure(dev, precisions, threads, roofs, budget, quick=quick,
                      channels_last=channels_last, cpu_flags=cpu["flags_all"],
                      cuda_cc=facts["cc"], roofs_from=where, started=t0,
                      cache_bytes=cache)  # fmt: skip
        taken = contention.contended_cpus(contention.other_load(cpu0, contention.snapshot()))
        return {**doc, "contended": taken}

    machine = cached_measure(key, measure_here, use_cache=use_cache)
    if machine.get("contended") is not None and not machine["cache"]["hit"]:
        effect = "efficiencies may be low and noisy (time sliced with other work); not cached"
        notes.append(contended_note(machine["contended"], cpu["cores_logical"], "efficiency",
                                    effect))  # fmt: skip
    if machine["cache"]["hit"]:
        notes.append(
            f"measured at {machine['measured_at']} on this machine (same fingerprint, "
            "threads, torch and settings) and kept in the user's cache: reused"
        )
    used = {p: roofs["compute"][p] for p in machine["precisions"]}
    return {
        "schema_version": TABLES_SCHEMA_VERSION,
        "env": env,
        "device": dev,
        "device_name": name,
        "source": "sweep",
        **{k: machine[k] for k in ("threads", "channels_last", "quick", "foreach", "budget_s",
                                   "torch", "method", "dispatch", "skipped", "measured_at")},
        "roofs": {"compute": used, "memory": roofs["memory"]},
        "tables": with_roofs(machine, {"compute": used, "memory": roofs["memory"]}),
        "fingerprint": key,
        "cache": machine["cache"],
        "wall_s": round(time.monotonic() - t0, 3),
        "measured_wall_s": machine["wall_s"],
        "notes": notes + machine["notes"],
    }  # fmt: skip
