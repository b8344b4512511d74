"""Metered kernels of the ceilings: joules of an idle window, of each precision's roof
GEMM and of a large copy, and the energy costs fitted from them
(:func:`dnnroofline.measure.energy_costs.fit_energy_costs`): the ``energy`` record of
``ceilings.json``.

Each window is one fresh meter's start and stop (:mod:`dnnroofline.measure.energy`:
NVML's energy counter on a GPU, RAPL on a CPU) around kernels that run for at least the
window: the GEMM and the copy are timed by the ceilings' own timer
(:func:`dnnroofline.measure.timer.time_repeats`), warmed up outside the window, with the
meter as its ``timing_context``, so the window holds exactly the timed repeats, ending
on a device sync. A meter that cannot start (no counter, RAPL root-only, no NVML) makes
the record unavailable, with the reason, before any kernel runs: no time is spent on a
machine without counters. Torch is imported lazily.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from dnnroofline.measure import gemm_sweep
from dnnroofline.measure.ceiling_kernels import MiB, bench_gemm
from dnnroofline.measure.energy_costs import fit_energy_costs, gemm_min_bytes
from dnnroofline.measure.memory_kernels import device_array_bytes, stream_arrays
from dnnroofline.measure.timer import GPU_MIN_WARMUP_S, sync_device, time_repeats
from dnnroofline.study.precisions import operand_bytes, torch_dtype

#: Each kernel's metered window, in seconds. NVML's total energy counter updates every
#: few tens of milliseconds, so a window of >= 1 s keeps its resolution under a few %
#: (RAPL's counters update every millisecond or so: 1 s is ample there too).
WINDOW_S = 1.0
#: Quick mode's window (tests): long enough for a few calls, not for a real cost.
QUICK_WINDOW_S = 0.05
#: The square GEMM metered where a precision's measured roof names no GEMM.
FALLBACK_GEMM_N = {"cuda": 8192, "mps": 4096, "cpu": 1024}
QUICK_GEMM_N = 256
#: Input sets a metered GEMM rotates among, so that no call finds its operands in cache.
GEMM_SETS = 2
#: Repeats per window: each lasts a tenth of it, so a repeat's closing sync costs nothing.
REPEATS_PER_WINDOW = 10


def gemm_shape(
    device: str, precision: str, compute_roofs: Sequence[Mapping], *, quick: bool = False
) -> tuple[dict, str]:
    """The GEMM metered for ``precision`` (m, n, k and its CUDA library, None for torch's
    default) and why: the GEMM that set its measured roof, else the fastest GEMM among
    the roof's candidates (a convolution set it), else a fixed square."""
    roof = next(
        (
            r
            for r in compute_roofs
            if r.get("kind") == "compute"
            and r.get("source") == "measured"
            and r.get("precision") == precision
        ),
        {},
    )
    gemms = [
        c
        for c in roof.get("candidates") or []
        if c.get("kind") == "gemm" and c.get("status") == "ok" and c.get("flops_best")
    ]
    if gemms:
        best = max(gemms, key=lambda c: c["flops_best"])
        params = best["params"]
        n = int(params["n"])
        shape = {"m": int(params.get("m", n)), "n": n, "k": int(params.get("k", n))}
        shape["library"] = params.get("library")
        if best.get("set_roof"):
            return shape, "the GEMM that set the measured compute roof"
        return shape, "the fastest GEMM among the measured roof's candidates (not a GEMM set it)"
    n = QUICK_GEMM_N if quick else FALLBACK_GEMM_N.get(device, 1024)
    shape = {"m": n, "n": n, "k": n, "library": None}
    return shape, f"a fixed {n}^3 square (no measured GEMM for {precision})"


@contextlib.contextmanager
def metered(meter_factory: Callable[[], Any], out: dict):
    """A fresh meter over the inside; its record is put into ``out`` on leaving."""
    meter = meter_factory()
    meter.start()
    try:
        yield
    finally:
        out.update(meter.stop())


def kernel_record(
    kind: str,
    precision: str | None,
    method: str,
    flop: float,
    nbytes: float,
    calls: int,
    energy: Mapping,
) -> dict:
    """One metered kernel of the ``energy`` record (docs/contracts.md, ceilings.json):
    totals over its window; ``reason`` where the meter read nothing."""
    record = {
        "kind": kind,
        "precision": precision,
        "method": method,
        "flop": flop,
        "bytes": nbytes,
        "seconds": energy.get("seconds"),
        "calls": calls,
        "joules": energy.get("joules"),
        "mean_power_w": energy.get("mean_power_w"),
    }
    if not energy.get("available"):
        record["reason"] = energy.get("reason")
    return record


def window_timing(device: str, window_s: float, *, quick: bool = False) -> dict:
    """The timer's settings for one window: warmed up outside it (a GPU's clocks ramp
    up under load), then repeats of a tenth of the window until the window is spent."""
    return {
        "warmup": 1,
        "reps": sys.maxsize,  # the window, not a count, ends the repeats
        "min_reps": 1,
        "time_cap_s": window_s,
        "min_warmup_s": GPU_MIN_WARMUP_S if device == "cuda" and not quick else 0.0,
        "min_repeat_s": window_s / REPEATS_PER_WINDOW,
    }


def idle_window(device: str, meter_factory: Callable[[], Any], window_s: float) -> dict:
    """The device synchronized, then nothing for ``window_s``: the static power."""
    sync_device(device)
    energy: dict = {}
    with metered(meter_factory, energy):
        time.sleep(window_s)
    method = f"idle: {device} synchronized, then time.sleep({window_s:g} s)"
    return kernel_record("idle", None, method, 0, 0, 0, energy)


def gemm_window(
    device: str,
    precision: str,
    shape: Mapping,
    why: str,
    meter_factory: Callable[[], Any],
    timing: Mapping,
) -> dict:
    """``precision``'s GEMM of ``shape`` through its library, called over the window."""
    m, n, k, lib = shape["m"], shape["n"], shape["k"], shape.get("library")
    energy: dict = {}
    use_lib = device == "cuda" and lib is not None
    with gemm_sweep.blas_library(lib) if use_lib else contextlib.nullcontext():
        res = bench_gemm(
            device,
            precision,
            n,
            m=m,
            k=k,
            n_sets=GEMM_SETS,
            timing_context=metered(meter_factory, energy),
            **timing,
        )
    calls = res["reps"] * res["inner"]
    if use_lib:
        library = gemm_sweep.LIBRARY_NAMES.get(lib, lib)
    elif device == "cuda":
        library = "torch's default CUDA BLAS"
    else:
        library = f"the BLAS torch dispatches to on {device}"
    item = operand_bytes(precision)
    tf32 = f", TF32 {'on' if precision == 'tf32' else 'off'}" if device == "cuda" else ""
    method = (
        f"torch.matmul {m}x{n}x{k} (MxNxK) {torch_dtype(precision)} through {library}{tf32}: "
        f"{why}; {calls} calls over {GEMM_SETS} rotating input sets; FLOPs = 2*M*N*K per "
        f"call, bytes = (M*K + K*N + M*N) x {item} B per call (minimum DRAM traffic)"
    )
    nbytes = gemm_min_bytes(m, n, k, item) * calls
    return kernel_record("gemm", precision, method, res["flop"] * calls, nbytes, calls, energy)


def copy_window(
    device: str, meter_factory: Callable[[], Any], timing: Mapping, sizes: Mapping
) -> dict:
    """The ceilings' large copy (``dst.copy_(src)``) over the window; ``sizes``: the
    keywords of :func:`dnnroofline.measure.memory_kernels.device_array_bytes`."""
    import torch

    array_bytes, why = device_array_bytes(device, **sizes)
    dst, src = stream_arrays(device, array_bytes, 2)
    energy: dict = {}
    with torch.inference_mode():
        times, inner = time_repeats(
            device,
            lambda: dst.copy_(src),
            timing_context=metered(meter_factory, energy),
            **timing,
        )
    calls = len(times) * inner
    per_call = 2 * dst.numel() * dst.element_size()
    what = "device-to-device copy" if device == "cuda" else "STREAM copy a = b"
    dtype = str(dst.dtype).replace("torch.", "")
    method = (
        f"{what} dst.copy_(src) of {dst.numel():,} {dtype} elements "
        f"({dst.numel() * dst.element_size() / MiB:.0f} MiB) per array: {why}; {calls} calls; "
        "bytes = read + written (2 arrays) per call"
    )
    return kernel_record("copy", None, method, 0, per_call * calls, calls, energy)


def measure_energy(
    device: str,
    precisions: Iterable[str],
    compute_roofs: Sequence[Mapping],
    meter_factory: Callable[[], Any],
    window_s: float = WINDOW_S,
    *,
    quick: bool = False,
    llc_bytes: int | None = None,
    ram_bytes: int | None = None,
    free_device_bytes: int | None = None,
) -> dict:
    """The ``energy`` record of ``ceilings.json``: an idle window, per precision the GEMM
    of its measured compute roof (:func:`gemm_shape`), and the ceilings' large copy,
    each metered by a fresh ``meter_factory()`` over at least ``window_s``; then the
    costs fitted from them. A meter that does not start: unavailable, no kernel run."""
    precisions = list(dict.fromkeys(precisions))
    probe = meter_factory()
    source = getattr(probe, "source", None)
    record = {"available": False, "reason": None, "source": source, "window_s": window_s}
    if not probe.start():
        reason = probe.stop().get("reason") or "the energy meter did not start"
        costs_reason = f"no energy counter: {reason}"
        return {
            **record,
            "reason": reason,
            "kernels": [],
            "costs": None,
            "costs_reason": costs_reason,
        }
    probe.stop()
    timing = window_timing(device, window_s, quick=quick)
    kernels = [idle_window(device, meter_factory, window_s)]
    failed = []
    for p in precisions:
        shape, why = gemm_shape(device, p, compute_roofs, quick=quick)
        try:
            kernels.append(gemm_window(device, p, shape, why, meter_factory, timing))
        except (RuntimeError, NotImplementedError, TypeError) as exc:
            failed.append(f"{p}: {exc}")
    sizes = {
        "quick": quick,
        "llc_bytes": llc_bytes,
        "ram_bytes": ram_bytes,
        "free_device_bytes": free_device_bytes,
    }
    kernels.append(copy_window(device, meter_factory, timing, sizes))
    costs, costs_reason = fit_energy_costs(kernels, precisions)
    if costs_reason and failed:
        costs_reason += f" (metered GEMM failed: {'; '.join(failed)})"
    return {
        **record,
        "available": True,
        "kernels": kernels,
        "costs": costs,
        "costs_reason": costs_reason,
    }
