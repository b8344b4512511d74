"""The measured compute ceilings: timed GEMMs and convolutions on one device.

Each microbenchmark times its kernel with :mod:`dnnroofline.measure.timer` (CUDA events
on GPUs, a synchronised wall clock elsewhere) and records every candidate with its FLOP/s;
:func:`measure_compute` picks the roof among them (the method is in
:mod:`dnnroofline.measure.ceilings`, which assembles ``ceilings.json``; the GPU's GEMM sweep is
:mod:`dnnroofline.measure.gemm_sweep`, the memory roofs :mod:`dnnroofline.measure.memory_kernels`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from dnnroofline.measure import gemm_sweep
from dnnroofline.measure.timer import (
    GPU_TIMING,
    cudnn_benchmark,
    matmul_mode,
    time_repeats,
)
from dnnroofline.stats import summarize
from dnnroofline.study.precisions import HALF_PRECISIONS, torch_dtype

MiB = 1024**2


def gemm_flop(m: int, n: int, k: int) -> int:
    """FLOPs of an (m x k) @ (k x n) product: 2*M*N*K (one multiply and one add per MAC)."""
    return 2 * int(m) * int(n) * int(k)


def _dtype(precision: str):
    import torch

    return getattr(torch, torch_dtype(precision))


def bench_gemm(
    device: str,
    precision: str,
    n: int,
    *,
    m: int | None = None,
    k: int | None = None,
    warmup: int = 2,
    reps: int = 10,
    min_reps: int = 3,
    inner: int = 1,
    n_sets: int = 3,
    time_cap_s: float = 5.0,
    min_warmup_s: float = 0.0,
    min_repeat_s: float = 0.0,
    timing_context: contextlib.AbstractContextManager | None = None,
) -> dict:
    """Time ``torch.matmul`` of (m x k) @ (k x n) in ``precision`` (square n^3 by default).

    Each timed repeat runs ``inner`` GEMMs over rotating input sets (so no repeat finds
    its operands in cache from the last); see :func:`time_repeats` for the timer.
    """
    import torch

    m = n if m is None else int(m)
    k = n if k is None else int(k)
    dtype = _dtype(precision)
    gen_device = device if device in ("cpu", "cuda") else "cpu"  # generate on the GPU: fast
    gen = torch.Generator(device=gen_device).manual_seed(0)

    def rand(rows: int, cols: int) -> torch.Tensor:
        x = torch.randn(rows, cols, generator=gen, device=gen_device, dtype=torch.float32)
        return x.to(device=device, dtype=dtype)

    sets = [(rand(m, k), rand(k, n)) for _ in range(n_sets)]
    out = torch.empty(m, n, device=device, dtype=dtype)
    it = 0

    def one() -> None:
        nonlocal it
        a, b = sets[it % n_sets]
        torch.matmul(a, b, out=out)
        it += 1

    with matmul_mode(device, precision), torch.inference_mode():
        times, inner = time_repeats(
            device,
            one,
            warmup=warmup,
            reps=reps,
            min_reps=min_reps,
            inner=inner,
            time_cap_s=time_cap_s,
            min_warmup_s=min_warmup_s,
            min_repeat_s=min_repeat_s,
            timing_context=timing_context,
        )
        if not torch.isfinite(out.float()).all():
            raise RuntimeError(f"GEMM {precision} {m}x{n}x{k} produced non-finite values")
    timed = _timed_record(gemm_flop(m, n, k), times, dtype, warmup, inner)
    return {"n": n, "m": m, "k": k, **timed, "n_sets": n_sets}


def conv_flop(
    batch: int, c_in: int, c_out: int, h_out: int, w_out: int, kh: int, kw: int, groups: int = 1
) -> int:
    """Nominal FLOPs of a 2-D convolution's forward pass: 2*N*Cout*Ho*Wo*(Cin/groups)*kh*kw.

    The study counts convolutions the same way (direct algorithm, FMA = 2 FLOPs).
    """
    return 2 * batch * c_out * h_out * w_out * (c_in // groups) * kh * kw


def bench_conv(
    device: str,
    precision: str,
    batch: int,
    c_in: int,
    hw: int,
    c_out: int,
    kernel: int,
    *,
    backward: bool = False,
    channels_last: bool = False,
    warmup: int = 2,
    reps: int = 10,
    min_reps: int = 3,
    time_cap_s: float = 5.0,
    min_warmup_s: float = 0.0,
    min_repeat_s: float = 0.0,
    timing_context: contextlib.AbstractContextManager | None = None,
) -> dict:
    """Time ``torch.nn.functional.conv2d`` (oneDNN on CPU, cuDNN on CUDA), stride 1, same pad.

    ``backward``: forward + input gradient + weight gradient (3x the forward's nominal
    FLOPs, as the study counts a convolution's training step), else forward only. On
    CUDA with cuDNN's autotuning on, as the study's runs have it (it tunes in the warm-up).
    """
    import torch
    import torch.nn.functional as F

    dtype = _dtype(precision)
    gen = torch.Generator(device="cpu").manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(batch, c_in, hw, hw, generator=gen).to(device=device, dtype=dtype)
    x = x.contiguous(memory_format=fmt)
    w = (torch.randn(c_out, c_in, kernel, kernel, generator=gen) * 0.05).to(device, dtype)
    w = w.contiguous(memory_format=fmt)
    pad = kernel // 2
    if backward:
        x.requires_grad_(True)
        w.requires_grad_(True)
        grad_out = torch.randn(batch, c_out, hw, hw, generator=gen).to(device=device, dtype=dtype)
        grad_out = grad_out.contiguous(memory_format=fmt)
    result = {}

    def one() -> None:
        if backward:
            x.grad = None
            w.grad = None
            y = F.conv2d(x, w, padding=pad)
            y.backward(grad_out)
            result["y"] = w.grad
        else:
            result["y"] = F.conv2d(x, w, padding=pad)

    ctx = contextlib.nullcontext() if backward else torch.inference_mode()
    with matmul_mode(device, precision), cudnn_benchmark(device), ctx:
        times, inner = time_repeats(
            device,
            one,
            warmup=warmup,
            reps=reps,
            min_reps=min_reps,
            time_cap_s=time_cap_s,
            min_warmup_s=min_warmup_s,
            min_repeat_s=min_repeat_s,
            timing_context=timing_context,
        )
        if not torch.isfinite(result["y"].float()).all():
            raise RuntimeError(f"conv2d {precision} produced non-finite values")
    flop = conv_flop(batch, c_in, c_out, hw, hw, kernel, kernel) * (3 if backward else 1)
    return {
        "shape": {"batch": batch, "c_in": c_in, "hw": hw, "c_out": c_out, "kernel": kernel},
        "backward": backward,
        "channels_last": channels_last,
        **_timed_record(flop, times, dtype, warmup, inner),
    }


def _timed_record(flop: float, times: list[float], dtype, warmup: int, inner: int) -> dict:
    """A microbenchmark's timing fields: its FLOPs at the median and at the best repeat."""
    stats = summarize(times)
    return {
        "dtype": str(dtype).replace("torch.", ""),
        "flop": flop,
        "times_s": stats,
        "flops_median": flop / stats["median"],
        "flops_best": flop / stats["min"],
        "reps": len(times),
        "warmup": max(1, warmup),
        "inner": inner,
    }


def _round_down(x: float, multiple: int, lo: int, hi: int) -> int:
    return int(max(lo, min(hi, (int(x) // multiple) * multiple)))


def gemm_size_for(rate_flops: float, target_s: float, lo: int, hi: int, multiple: int = 256) -> int:
    """Square GEMM size n whose 2n^3 FLOPs take about ``target_s`` at ``rate_flops``."""
    n = (max(rate_flops, 1.0) * target_s / 2.0) ** (1.0 / 3.0)
    return _round_down(n, multiple, lo, hi)


#: Convolution method text: nominal FLOPs, and what a faster algorithm would look like.
CONV_FLOP_NOTE = (
    "FLOPs = nominal 2*N*Cout*Ho*Wo*Cin*kh*kw (x3 with backward: input and weight "
    "gradients), the study's own count; an algorithm that does less arithmetic than the "
    "nominal count (Winograd, FFT) would show as convolution FLOP/s above the GEMMs', "
    "and the roof, like the study, keeps counting nominal FLOPs"
)


#: Which microbenchmarks may set the compute roof. Where the study's FLOPs are nominal
#: (analytic: CPU, MPS), a convolution's nominal rate is a fair roof. On CUDA they are the
#: FLOPs ncu counts the kernels executing, and a Winograd convolution's nominal rate is no
#: hardware rate (an H100's fp32 3x3 conv ran at 97.5 "TFLOP/s" against its 67 TFLOP/s
#: FP32 peak): there the GEMMs set the roof and the convolutions are kept for reference.
ROOF_KINDS = {"cuda": ("gemm",)}
NOMINAL_ROOF_KINDS = ("gemm", "conv")
CONV_NOT_A_ROOF = (
    "not eligible for the roof on CUDA: the study's FLOPs there are those ncu counts, and a "
    "convolution's nominal rate can exceed the hardware's (Winograd, FFT)"
)


def roof_kinds(device: str) -> tuple[str, ...]:
    """The microbenchmark kinds that may set ``device``'s compute roof (:data:`ROOF_KINDS`)."""
    return ROOF_KINDS.get(device, NOMINAL_ROOF_KINDS)


def roof_candidate(device: str, candidates: list[dict]) -> int:
    """Index of the candidate that sets the roof: the fastest of the kinds that may set
    ``device``'s roof (:func:`roof_kinds`); those that may not are marked with why."""
    kinds = roof_kinds(device)
    eligible = [i for i, c in enumerate(candidates) if "flops_best" in c and c["kind"] in kinds]
    if not eligible:
        raise RuntimeError(
            f"no {' or '.join(kinds)} microbenchmark succeeded on {device}: no measured roof"
        )
    for c in candidates:
        if c["kind"] not in kinds:
            c["roof_eligible"] = False
            c["why_not"] = CONV_NOT_A_ROOF
    return max(eligible, key=lambda i: candidates[i]["flops_best"])


def compute_candidates(device: str, precision: str, *, quick: bool, probe_flops: float | None):
    """The microbenchmarks tried for one precision: ``(label, kind, kwargs)`` triples.

    CPU: square GEMMs (one sized so it takes ~0.5 s at ``probe_flops``, one smaller),
    two im2col-shaped GEMMs (tall M, as a convolution's GEMM), and oneDNN convolutions
    (3x3 forward, NCHW and channels-last; 3x3 forward+backward; 1x1 forward). CUDA: the
    GEMM sweep (shapes x cuBLAS/cuBLASLt) and cuDNN convolutions
    (:func:`dnnroofline.measure.gemm_sweep.cuda_candidates`). MPS: one square GEMM and a
    convolution.
    """
    if quick:
        return [
            ("gemm", {"n": 256}),
            ("gemm", {"m": 1024, "n": 64, "k": 576}),
            ("conv", {"batch": 2, "c_in": 16, "hw": 16, "c_out": 16, "kernel": 3}),
            (
                "conv",
                {"batch": 2, "c_in": 16, "hw": 16, "c_out": 16, "kernel": 3, "backward": True},
            ),
        ]
    if device == "cpu":
        n = gemm_size_for(probe_flops or 1e11, 0.5, lo=1024, hi=4096)
        small = max(512, n // 2 // 256 * 256)
        return [
            ("gemm", {"n": n}),
            ("gemm", {"n": small}),
            ("gemm", {"m": 12544, "n": 64, "k": 576}),
            ("gemm", {"m": 3136, "n": 256, "k": 2304}),
            ("conv", {"batch": 16, "c_in": 64, "hw": 56, "c_out": 64, "kernel": 3}),
            (
                "conv",
                {
                    "batch": 16,
                    "c_in": 64,
                    "hw": 56,
                    "c_out": 64,
                    "kernel": 3,
                    "channels_last": True,
                },
            ),
            ("conv", {"batch": 16, "c_in": 256, "hw": 14, "c_out": 256, "kernel": 3}),
            (
                "conv",
                {"batch": 16, "c_in": 128, "hw": 28, "c_out": 128, "kernel": 3, "backward": True},
            ),
            ("conv", {"batch": 16, "c_in": 256, "hw": 28, "c_out": 512, "kernel": 1}),
        ]
    if device == "cuda":  # cuBLAS/cuBLASLt peak at different shapes per precision and GPU
        return gemm_sweep.cuda_candidates()
    return [
        ("gemm", {"n": 4096}),
        ("conv", {"batch": 64, "c_in": 256, "hw": 28, "c_out": 256, "kernel": 3}),
    ]


def _describe(kind: str, res: dict) -> str:
    if kind == "gemm":
        return f"torch.matmul {res['m']}x{res['n']}x{res['k']} (MxNxK) {res['dtype']}"
    s = res["shape"]
    what = "forward+backward" if res["backward"] else "forward"
    fmt = ", channels-last" if res["channels_last"] else ""
    return (
        f"conv2d {s['kernel']}x{s['kernel']} N={s['batch']} Cin={s['c_in']} Cout={s['c_out']} "
        f"{s['hw']}x{s['hw']} {res['dtype']} {what}{fmt}"
    )


def _conditions(device: str, kind: str, params: dict, record: dict, nvml: Any):
    """A CUDA candidate runs through its BLAS library with NVML sampling its timing
    (:func:`dnnroofline.measure.gemm_sweep.cuda_conditions`); elsewhere as it is."""
    if device == "cuda":
        return gemm_sweep.cuda_conditions(kind, params, record, nvml)
    return contextlib.nullcontext()


#: The library behind torch's convolutions, per device.
_CONV_LIBRARY = {"cpu": "oneDNN", "cuda": "cuDNN"}


def _run_candidate(
    device: str, precision: str, kind: str, kw: dict, timing: dict, nvml: Any
) -> dict:
    """One roof candidate (a GEMM or a convolution) timed: its method, FLOPs, repeats and
    FLOP/s with ``status`` ok, or ``unavailable``/``error`` with the reason."""
    cand: dict = {"kind": kind, "params": kw}
    try:
        with _conditions(device, kind, kw, cand, nvml) as timing_context:
            if kind == "gemm":
                shape = {key: v for key, v in kw.items() if key != "library"}
                res = bench_gemm(
                    device, precision, **shape, **timing, timing_context=timing_context
                )
                how = "FLOPs = 2*M*N*K, rotating input sets"
            else:
                res = bench_conv(device, precision, **kw, **timing, timing_context=timing_context)
                how = f"{_CONV_LIBRARY.get(device, 'MPS')}; {CONV_FLOP_NOTE}"
    except gemm_sweep.BlasUnavailable as exc:
        return {**cand, "status": "unavailable", "reason": str(exc)}
    except (RuntimeError, NotImplementedError) as exc:
        return {**cand, "status": "error", "error": str(exc)}
    mode = (
        f", TF32 {'on' if precision == 'tf32' else 'off'}"
        if device == "cuda" and precision not in HALF_PRECISIONS
        else ""
    )
    via = gemm_sweep.LIBRARY_NAMES.get(cand.get("library") if kind == "gemm" else None)
    describe = _describe(kind, res) + (f" through {via}" if via else "")
    cand.update(
        {
            "method": f"{describe}{mode}; {how}",
            "flop": res["flop"],
            "reps": res["reps"],
            "times_s": res["times_s"],
            "flops_best": res["flops_best"],
            "flops_median": res["flops_median"],
            "status": "ok",
        }
    )
    return cand


def measure_compute(
    device: str, precision: str, *, quick: bool = False, threads: int = 1, nvml: Any = None
) -> dict:
    """A measured compute roof for ``precision`` on ``device`` (a ceilings ``roofs`` entry).

    The roof is the best of several candidates (GEMMs of several shapes and, except on
    CUDA, convolutions: :func:`roof_candidate`), each taken at its best repeat; every
    candidate is kept under ``candidates`` with its method, times and FLOP/s, and
    ``set_by`` names the winner. On CUDA the GEMMs are the sweep of
    :mod:`dnnroofline.measure.gemm_sweep` (shapes x cuBLAS/cuBLASLt), and each candidate also
    keeps its shape, library, and SM clock and power read by NVML (``nvml``: pynvml or a
    stand-in) during its timed repeats.
    A roof that the study's own kernels beat is a wrong roof: one GEMM is not enough
    (oneDNN's convolutions outrun a square MKL GEMM on some CPUs).
    """
    probe = None
    if device == "cpu" and not quick:
        probe = bench_gemm(device, precision, 768, warmup=1, reps=2, min_reps=2, n_sets=1)
    if quick:
        timing = {"warmup": 1, "reps": 3, "min_reps": 2, "time_cap_s": 0.3}
    elif device == "cpu":
        timing = {"warmup": 1, "reps": 8, "min_reps": 3, "time_cap_s": 1.5}
    else:
        timing = dict(GPU_TIMING)
    timer = "CUDA events" if device == "cuda" else "time.perf_counter after device sync"
    library = _CONV_LIBRARY.get(device, "MPS")
    cands = [
        _run_candidate(device, precision, kind, kw, timing, nvml)
        for kind, kw in compute_candidates(
            device, precision, quick=quick, probe_flops=probe and probe["flops_best"]
        )
    ]
    ok = [c for c in cands if "flops_best" in c]
    if not ok:
        errors = "; ".join(str(c.get("error") or c.get("reason")) for c in cands)
        raise RuntimeError(f"every compute microbenchmark failed for {precision}: {errors}")
    best = roof_candidate(device, cands)
    for i, c in enumerate(cands):
        c["set_roof"] = i == best
    win = cands[best]
    n_gemm = sum(1 for c in ok if c["kind"] == "gemm")
    n_conv = len(ok) - n_gemm
    if "conv" in roof_kinds(device):
        tried = f"best of {len(ok)} microbenchmarks ({n_gemm} GEMMs through torch.matmul, "
        tried += f"{n_conv} convolutions through {library})"
    else:
        tried = f"best of {n_gemm} GEMMs through torch.matmul ({gemm_sweep.sweep_summary(cands)}; "
        tried += f"{n_conv} convolutions through {library} recorded, not eligible: ncu counts "
        tried += "executed FLOPs)"
    method = (
        f"{tried}, each at its best repeat after warm-up, "
        f"{timer}; {threads} thread(s); set by: {win['method']}"
        + gemm_sweep.telemetry_text(win)
        + ("; QUICK mode: tiny sizes, not a real ceiling" if quick else "")
    )
    roof = {
        "kind": "compute",
        "precision": precision,
        "source": "measured",
        "value": win["flops_best"],
        "method": method,
        "statistic": "best",
        "median": win["flops_median"],
        "set_by": win["method"],
        "candidates": cands,
        "times_s": win["times_s"],
    }
    if "telemetry" in win:  # a GPU's: the clock and power its roof was measured at
        roof.update(sm_clock_mhz=win["sm_clock_mhz"], power_w=win["power_w"])
    return roof
