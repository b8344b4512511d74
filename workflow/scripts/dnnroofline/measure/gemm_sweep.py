"""The GPU GEMM sweep: a CUDA device's compute roofs from many GEMM shapes, through both
cuBLAS and cuBLASLt, each with the SM clock and power that NVML read while it was timed.

One GEMM shape is not the machine's roof: on an H100 cuBLAS ran fp16 fastest at 8192^3
(681 TFLOP/s) and bf16 at 4096^3 (716.6), on the same tensor cores, and ResNet-50's own
convolution kernels ran at up to 756 TFLOP/s in ncu's replay
(``examples/h100/results/h100/ceilings.json``, ``.../ncu/h100_resnet50_amp_bs256.json``).
So every precision tries the same shapes (squares 2048-16384, transformer-like and
convolution-like shapes, and long-K ones) through both libraries, and the roof is the best of them
(:func:`dnnroofline.measure.ceiling_kernels.roof_candidate`). A GPU lowers its clocks at its power
cap, so each candidate keeps the SM clock and power sampled during its timed repeats.

The library is chosen with ``torch.backends.cuda.preferred_blas_library`` (torch 2.3 and
later; pytorch/pytorch#122106); without it, or where torch reports another library in
effect, the cuBLASLt candidate is recorded as unavailable, with the reason.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dnnroofline.measure.nvml_sampler import NvmlSampler

#: The GEMM shapes every precision tries on CUDA: (what it stands for, M, N, K).
GPU_GEMM_SHAPES: tuple[tuple[str, int, int, int], ...] = (
    ("square", 2048, 2048, 2048),
    ("square", 4096, 4096, 4096),
    ("square", 8192, 8192, 8192),
    ("square", 16384, 16384, 16384),
    ("square MxN, deep K", 8192, 8192, 16384),
    # long K: the epilogue and the tiles' start-up amortised over more of the main loop,
    # as the GEMMs reported above the square-GEMM figures are
    ("square MxN, long K", 8192, 8192, 32768),
    ("square MxN, long K", 16384, 16384, 32768),
    ("transformer projection: 16384 tokens, d 4096", 16384, 4096, 4096),
    ("transformer MLP up: 16384 tokens, 4096 -> 16384", 16384, 16384, 4096),
    ("transformer MLP down: 16384 tokens, 16384 -> 4096", 16384, 4096, 16384),
    ("conv 3x3 as implicit GEMM: ResNet-50 layer3, batch 256", 50176, 256, 2304),
    ("conv 3x3 as implicit GEMM: ResNet-50 layer4, batch 256", 12544, 512, 4608),
    ("conv 1x1 as implicit GEMM: ResNet-50 layer4 expand, batch 256", 12544, 2048, 512),
)
#: The CUDA BLAS libraries each shape goes through (torch's names).
BLAS_LIBRARIES = ("cublas", "cublaslt")
LIBRARY_NAMES = {"cublas": "cuBLAS", "cublaslt": "cuBLASLt"}
#: cuDNN convolutions kept beside the GEMMs for reference (not eligible for a GPU's roof).
GPU_CONV = {"batch": 64, "c_in": 256, "hw": 28, "c_out": 256, "kernel": 3}
#: NVML sampling period during a candidate's timed repeats (each lasts >= 10 x 5 ms).
SAMPLE_INTERVAL_S = 0.01


class BlasUnavailable(RuntimeError):
    """torch cannot route ``torch.matmul`` through the BLAS library asked for."""


def cuda_candidates() -> list[tuple[str, dict]]:
    """The CUDA microbenchmarks of one precision: every shape of :data:`GPU_GEMM_SHAPES`
    through every library of :data:`BLAS_LIBRARIES`, then three cuDNN convolutions."""
    gemms = [
        ("gemm", {"m": m, "n": n, "k": k, "library": lib})
        for _, m, n, k in GPU_GEMM_SHAPES
        for lib in BLAS_LIBRARIES
    ]
    convs = [
        ("conv", dict(GPU_CONV)),
        ("conv", {**GPU_CONV, "channels_last": True}),
        ("conv", {**GPU_CONV, "channels_last": True, "backward": True}),
    ]
    return gemms + convs


def shape_label(m: int, n: int, k: int) -> str | None:
    """What a swept shape stands for (:data:`GPU_GEMM_SHAPES`), or None."""
    return next((what for what, *mnk in GPU_GEMM_SHAPES if mnk == [m, n, k]), None)


# --------------------------------------------------------------------------- BLAS library


def _backend_name(backend: Any) -> str:
    """torch's ``_BlasBackend.Cublaslt`` -> ``cublaslt``."""
    return str(getattr(backend, "name", backend)).rsplit(".", 1)[-1].lower()


def library_support(torch_module: Any = None) -> dict[str, str | None]:
    """Each of :data:`BLAS_LIBRARIES` -> None where torch can route ``torch.matmul``
    through it, else why not."""
    if torch_module is None:
        import torch as torch_module
    cuda = torch_module.backends.cuda
    choose = getattr(cuda, "preferred_blas_library", None)
    if choose is None:
        return {
            "cublas": None,  # torch.matmul's library where there is no choice
            "cublaslt": (
                f"torch {torch_module.__version__} has no "
                "torch.backends.cuda.preferred_blas_library (added in torch 2.3): "
                "torch.matmul goes through cuBLAS only"
            ),
        }
    offered = getattr(cuda, "_BlasBackends", None)
    out: dict[str, str | None] = {}
    for lib in BLAS_LIBRARIES:
        if isinstance(offered, Mapping) and lib not in offered:
            out[lib] = (
                f"torch {torch_module.__version__}'s preferred_blas_library does not offer "
                f"{lib!r} (it offers {sorted(offered)})"
            )
        else:
            out[lib] = None
    return out


@contextlib.contextmanager
def blas_library(name: str):
    """``torch.matmul`` through ``name`` (cublas or cublaslt) inside; yields the library
    torch reports in effect and restores the previous choice after. Raises
    :class:`BlasUnavailable` where torch cannot choose it."""
    import torch

    why = library_support(torch).get(name, f"unknown BLAS library {name!r}")
    if why:
        raise BlasUnavailable(why)
    choose = getattr(torch.backends.cuda, "preferred_blas_library", None)
    if choose is None:  # torch < 2.3: cuBLAS, the only choice
        yield name
        return
    before = choose()
    try:
        in_effect = _backend_name(choose(name))
        if in_effect != name:
            raise BlasUnavailable(f"asked torch for {name}, it reports {in_effect} in effect")
        yield in_effect
    finally:
        choose(before)


# --------------------------------------------------------------------------- telemetry


def candidate_telemetry(telemetry: Mapping) -> dict:
    """The clock and power fields of a candidate from its NVML record: the medians over
    its timed repeats, null (with the record's reason) where NVML gave none."""

    def median(key: str) -> float | None:
        stats = telemetry.get(key)
        return stats.get("median") if isinstance(stats, Mapping) else None

    return {
        "sm_clock_mhz": median("sm_mhz"),
        "power_w": median("power_w"),
        "telemetry": dict(telemetry),
    }


@contextlib.contextmanager
def nvml_telemetry(record: dict, index: int = 0, nvml: Any = None):
    """Samples GPU ``index`` with NVML while inside, then adds the clock and power
    fields (:func:`candidate_telemetry`) to ``record``; without NVML they are null and
    ``telemetry.reason`` says why."""
    sampler = NvmlSampler(index, interval_s=SAMPLE_INTERVAL_S, nvml=nvml)
    sampler.start()
    try:
        yield
    finally:
        record.update(candidate_telemetry(sampler.stop()))


def _gpu_index() -> int:
    import torch

    return torch.cuda.current_device() if torch.cuda.is_available() else 0


@contextlib.contextmanager
def cuda_conditions(kind: str, params: Mapping, record: dict, nvml: Any = None):
    """What a CUDA candidate runs under: its BLAS library (a GEMM) and NVML sampling of
    its timed repeats. Yields the ``timing_context`` for the timer; fills ``record``
    with the candidate's shape, library and clock/power fields."""
    if kind != "gemm":
        record["library"] = "cuDNN"
        yield nvml_telemetry(record, _gpu_index(), nvml)
        return
    n = params["n"]
    m, k, lib = params.get("m", n), params.get("k", n), params.get("library")
    record["shape"] = {"m": m, "n": n, "k": k, "what": shape_label(m, n, k)}
    record["library"] = lib or "default"
    if lib is None:  # quick mode's GEMMs: torch's default choice
        yield nvml_telemetry(record, _gpu_index(), nvml)
        return
    with blas_library(lib) as in_effect:
        record["library_in_effect"] = in_effect
        yield nvml_telemetry(record, _gpu_index(), nvml)


# --------------------------------------------------------------------------- method, cost


def telemetry_text(candidate: Mapping) -> str:
    """The clock and power a candidate ran at, for the roof's method ("" off a GPU)."""
    if "telemetry" not in candidate:
        return ""
    clock, power = candidate.get("sm_clock_mhz"), candidate.get("power_w")
    if clock is None and power is None:
        why = (candidate.get("telemetry") or {}).get("reason") or "no NVML readings"
        return f" (SM clock and power not recorded: {why})"
    parts = [f"{clock:.0f} MHz SM clock" if clock is not None else "SM clock unknown"]
    parts.append(f"{power:.0f} W" if power is not None else "power unknown")
    return f" (at {', '.join(parts)}: NVML, median over its timed repeats)"


def sweep_summary(candidates: Sequence[Mapping]) -> str:
    """How many GEMM shapes went through which library, and which were unavailable."""
    gemms = [c for c in candidates if c.get("kind") == "gemm"]
    shapes = {tuple((c.get("shape") or {}).get(k) for k in "mnk") for c in gemms}
    libs = [
        LIBRARY_NAMES.get(lib, lib)
        for lib in dict.fromkeys(str(c.get("library")) for c in gemms if c.get("library"))
    ]
    text = f"{len(shapes)} shapes x {'/'.join(libs)}"
    gone = [c for c in gemms if c.get("status") == "unavailable"]
    if gone:
        text += f"; {len(gone)} unavailable: {gone[0].get('reason')}"
    return text


def candidate_seconds(flop: float, rate: float, timing: Mapping) -> float:
    """Time one candidate takes at ``rate`` FLOP/s under the timer's settings
    (:func:`dnnroofline.measure.timer.time_repeats`): warm-up calls for at least
    ``min_warmup_s``, one call to size a repeat, then ``reps`` repeats of at least
    ``min_repeat_s`` each, stopping after ``min_reps`` once ``time_cap_s`` is spent."""
    call = flop / rate
    warm = max(timing.get("warmup", 1) * call, timing.get("min_warmup_s", 0.0))
    repeat = max(call, timing.get("min_repeat_s", 0.0))
    reps = timing.get("reps", 10)
    cap = timing.get("time_cap_s", math.inf)
    done = min(reps, max(timing.get("min_reps", 1), math.ceil(cap / repeat)))
    return warm + call + done * repeat


def sweep_seconds(
    peaks: Mapping[str, float],
    timing: Mapping,
    efficiency: float = 1.0,
    shapes: Iterable[tuple[str, int, int, int]] = GPU_GEMM_SHAPES,
    libraries: Sequence[str] = BLAS_LIBRARIES,
) -> float:
    """Estimated seconds of the GEMM sweep: every shape through every library in every
    precision of ``peaks`` ({precision: datasheet FLOP/s}), each call running at
    ``efficiency`` x its precision's peak (input set-up not counted)."""
    shapes = list(shapes)
    total = 0.0
    for peak in peaks.values():
        for _, m, n, k in shapes:
            total += len(libraries) * candidate_seconds(2.0 * m * n * k, peak * efficiency, timing)
    return total
