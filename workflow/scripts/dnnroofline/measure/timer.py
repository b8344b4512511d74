"""The microbenchmark timer: seconds per call of a kernel over timed repeats, as the
ceilings' compute and memory kernels, the op-class sweep and the host's dispatch costs
all time theirs (CUDA events on a GPU, a synchronised wall clock elsewhere), and the
torch modes they time under (TF32 per precision, cuDNN autotuning). Torch is imported
lazily.
"""

from __future__ import annotations

import contextlib
import math
import time

#: Calls per timed repeat at most (a repeat is sized from one call's time).
MAX_INNER = 1000
#: On a GPU: warm up at least this long (its clocks ramp up under load), and time no
#: repeat shorter than this (a call timed alone carries the host's launch gap).
GPU_MIN_WARMUP_S = 0.5
GPU_MIN_REPEAT_S = 0.005
#: A GPU candidate's timer settings: clocks ramped up first, no repeat shorter than
#: GPU_MIN_REPEAT_S (:func:`dnnroofline.measure.gemm_sweep.sweep_seconds` estimates from them).
GPU_TIMING = {
    "warmup": 3,
    "reps": 10,
    "min_reps": 3,
    "time_cap_s": 5.0,
    "min_warmup_s": GPU_MIN_WARMUP_S,
    "min_repeat_s": GPU_MIN_REPEAT_S,
}


def sync_device(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


@contextlib.contextmanager
def matmul_mode(device: str, precision: str):
    """TF32 off for fp32, on for tf32 (CUDA GEMMs and cuDNN convolutions); restored after."""
    import torch

    if device != "cuda":
        yield
        return
    old_mm = torch.backends.cuda.matmul.allow_tf32
    old_conv = torch.backends.cudnn.allow_tf32
    old_prec = torch.get_float32_matmul_precision()
    try:
        tf32 = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32  # cuDNN convolutions default to TF32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_mm
        torch.backends.cudnn.allow_tf32 = old_conv
        torch.set_float32_matmul_precision(old_prec)


@contextlib.contextmanager
def cudnn_benchmark(device: str):
    """cuDNN autotuning on (CUDA), as the study's runs have it; restored after."""
    import torch

    if device != "cuda":
        yield
        return
    old = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True
        yield
    finally:
        torch.backends.cudnn.benchmark = old


def time_repeats(
    device: str,
    fn,
    *,
    warmup: int,
    reps: int,
    min_reps: int,
    inner: int = 1,
    time_cap_s: float = 5.0,
    min_warmup_s: float = 0.0,
    min_repeat_s: float = 0.0,
    timing_context: contextlib.AbstractContextManager | None = None,
) -> tuple[list[float], int]:
    """Seconds per call of ``fn`` over timed repeats after warm-up, and the calls per
    repeat.

    Warm-up: ``warmup`` calls, then more until ``min_warmup_s`` has passed (a GPU's
    clocks ramp up under load). A repeat runs ``inner`` calls, or as many as make it
    last ``min_repeat_s`` (from one call timed after the warm-up): a GPU call of a
    millisecond timed alone carries the host's launch gap, as the stream is empty when
    the start event is recorded. CUDA: CUDA events; elsewhere ``time.perf_counter``
    around a device sync. Stops after ``reps`` repeats, or after ``min_reps`` once
    ``time_cap_s`` is spent. ``timing_context`` is entered around the timed repeats only
    (NVML sampling of a GPU candidate: :mod:`dnnroofline.measure.gemm_sweep`; an energy
    meter: :mod:`dnnroofline.measure.energy_kernels`), and ``time_cap_s`` counts from
    inside it, so that it spans at least the cap.
    """
    import torch

    t_warm = time.monotonic()
    for _ in range(max(1, warmup)):
        fn()
    sync_device(device)
    while time.monotonic() - t_warm < min_warmup_s:
        fn()
        sync_device(device)
    if min_repeat_s > 0:
        t0 = time.perf_counter()
        fn()
        sync_device(device)
        one = max(time.perf_counter() - t0, 1e-7)
        inner = max(inner, min(MAX_INNER, math.ceil(min_repeat_s / one)))
    times: list[float] = []
    with timing_context or contextlib.nullcontext():
        # the cap's clock starts inside the context: a meter entered there spans at
        # least time_cap_s (its own start, e.g. reading RAPL's zones, is not the cap's)
        t_start = time.monotonic()
        while len(times) < reps:
            if device == "cuda":
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3 / inner)
            else:
                sync_device(device)
                t0 = time.perf_counter()
                for _ in range(inner):
                    fn()
                sync_device(device)
                times.append((time.perf_counter() - t0) / inner)
            if len(times) >= min_reps and time.monotonic() - t_start > time_cap_s:
                break
    return times, inner
