"""The measured memory ceilings: STREAM triad, scale and copy over large device arrays.

Timed as the compute microbenchmarks are
(:func:`dnnroofline.measure.timer.time_repeats`);
:func:`measure_memory` returns the ``kind: memory`` entries of ``ceilings.json``.
"""

from __future__ import annotations

from dnnroofline.measure.ceiling_kernels import MiB
from dnnroofline.measure.timer import GPU_MIN_REPEAT_S, GPU_MIN_WARMUP_S, time_repeats


def stream_array_bytes(
    llc_bytes: int | None, ram_bytes: int | None, *, quick: bool = False
) -> tuple[int, str]:
    """Bytes per STREAM array: >= 4x the last-level cache (64 MiB if unknown), RAM permitting."""
    if quick:
        return 4 * MiB, "QUICK mode: 4 MiB arrays (cache-resident, not a DRAM roof)"
    if llc_bytes:
        want, why = 4 * int(llc_bytes), f"4x the last-level cache ({llc_bytes / MiB:g} MiB)"
    else:
        want, why = 64 * MiB, "64 MiB (last-level cache size unknown)"
    want = max(want, 64 * MiB) if llc_bytes else want
    if ram_bytes and 3 * want > ram_bytes // 4:
        want = ram_bytes // 12
        why += f", capped at a quarter of RAM for 3 arrays ({want / MiB:.0f} MiB)"
    return int(want), why


def device_array_bytes(
    device: str,
    *,
    quick: bool = False,
    llc_bytes: int | None = None,
    ram_bytes: int | None = None,
    free_device_bytes: int | None = None,
) -> tuple[int, str]:
    """Bytes per array of the memory kernels on ``device``, and why that size: on CPU
    :func:`stream_array_bytes`; on CUDA 1 GiB (far larger than L2), at most an eighth of
    the free device memory; on MPS 512 MiB."""
    if device == "cpu":
        return stream_array_bytes(llc_bytes, ram_bytes, quick=quick)
    if device == "cuda":
        array_bytes = 64 * MiB if quick else 1024 * MiB
        if free_device_bytes:
            array_bytes = min(array_bytes, free_device_bytes // 8)
        why = "device arrays far larger than L2" if not quick else "QUICK mode: 64 MiB arrays"
        return array_bytes, why
    return (16 * MiB, "QUICK mode") if quick else (512 * MiB, "512 MiB arrays")


def stream_arrays(device: str, array_bytes: int, count: int) -> list:
    """``count`` STREAM arrays of ``array_bytes`` each on ``device``: float64 (float32 on
    MPS, which has no float64), the first zeros and the others 1.0, 2.0, ..., written
    here so that their first touch stays outside any timing."""
    import torch

    dtype = torch.float64 if device != "mps" else torch.float32
    n = max(1, array_bytes // torch.tensor([], dtype=dtype).element_size())
    return [torch.full((n,), float(i), dtype=dtype, device=device) for i in range(count)]


def bench_stream(
    device: str,
    array_bytes: int,
    *,
    reps: int = 10,
    min_reps: int = 3,
    time_cap_s: float = 4.0,
    min_warmup_s: float = 0.0,
    min_repeat_s: float = 0.0,
) -> dict:
    """STREAM triad (a = b + s*c), scale (a = s*b) and copy (a = b) over float64 arrays;
    bytes/s per call. On CUDA the copy is the driver's device-to-device copy and scale
    a kernel on the SMs: one can outrun the other."""
    import torch

    from dnnroofline.stats import summarize

    a, b, c = stream_arrays(device, array_bytes, 3)
    dtype, item, n = a.dtype, a.element_size(), a.numel()
    s = 3.0
    kernels = {
        "triad": (lambda: torch.add(b, c, alpha=s, out=a), 3 * n * item),
        "scale": (lambda: torch.mul(b, s, out=a), 2 * n * item),
        "copy": (lambda: a.copy_(b), 2 * n * item),
    }
    out = {}
    with torch.inference_mode():
        for name, (fn, nbytes) in kernels.items():
            times, inner = time_repeats(
                device,
                fn,
                warmup=1,
                reps=reps,
                min_reps=min_reps,
                time_cap_s=time_cap_s,
                min_warmup_s=min_warmup_s,
                min_repeat_s=min_repeat_s,
            )
            stats = summarize(times)
            out[name] = {
                "bytes": nbytes,
                "times_s": stats,
                "bw_best": nbytes / stats["min"],
                "bw_median": nbytes / stats["median"],
                "reps": len(times),
                "inner": inner,
            }
        # The triad's last value must be b + s*c = 1 + 3*2 (after the copy a == b == 1).
        torch.add(b, c, alpha=s, out=a)
        if float(a[0]) != 7.0 or float(a[-1]) != 7.0:
            raise RuntimeError("STREAM triad check failed: a != b + s*c")
    return {
        "dtype": str(dtype).replace("torch.", ""),
        "elements": n,
        "array_bytes": n * item,
        **out,
    }


def measure_memory(
    device: str,
    *,
    quick: bool = False,
    llc_bytes: int | None = None,
    ram_bytes: int | None = None,
    free_device_bytes: int | None = None,
    threads: int = 1,
) -> list[dict]:
    """Measured memory roofs: STREAM triad, scale and copy (CPU, MPS; on CUDA the copy is
    the driver's device-to-device copy)."""
    array_bytes, why = device_array_bytes(
        device,
        quick=quick,
        llc_bytes=llc_bytes,
        ram_bytes=ram_bytes,
        free_device_bytes=free_device_bytes,
    )
    gpu = device == "cuda" and not quick
    res = bench_stream(
        device,
        array_bytes,
        reps=3 if quick else 20,
        min_reps=2 if quick else 3,
        time_cap_s=1.0 if quick else 3.0,
        min_warmup_s=GPU_MIN_WARMUP_S if gpu else 0.0,
        min_repeat_s=GPU_MIN_REPEAT_S if gpu else 0.0,
    )
    timer = "CUDA events" if device == "cuda" else "time.perf_counter after device sync"
    mib = res["array_bytes"] / MiB
    size = f"{res['elements']:,} {res['dtype']} elements ({mib:.0f} MiB) per array"
    common = (
        f"{size}: {why}; best of {{reps}} repeats of {{inner}} call(s) after a warm-up "
        f"(STREAM convention), {timer}"
    )
    if device == "cpu":
        common += f"; {threads} thread(s)"
    roofs = []
    for name, desc in (
        (
            "triad",
            "STREAM triad a = b + s*c via torch.add(b, c, alpha=s, out=a); bytes = 3 arrays "
            "(read b, read c, write a; write-allocate not counted)",
        ),
        (
            "scale",
            "STREAM scale a = s*b via torch.mul(b, s, out=a)"
            + (" (a kernel on the SMs)" if device == "cuda" else "")
            + "; bytes = read + write (2 arrays)",
        ),
        (
            "copy",
            ("device-to-device copy dst.copy_(src)" if device == "cuda" else "STREAM copy a = b")
            + "; bytes = read + write (2 arrays)",
        ),
    ):
        r = res[name]
        roofs.append(
            {
                "kind": "memory",
                "precision": None,
                "source": "measured",
                "value": r["bw_best"],
                "method": f"{desc}; {common.format(reps=r['reps'], inner=r['inner'])}",
                "benchmark": "d2d_copy" if (device == "cuda" and name == "copy") else name,
                "statistic": "best",
                "median": r["bw_median"],
                "bytes_per_repeat": r["bytes"],
                "times_s": r["times_s"],
            }
        )
    return roofs
