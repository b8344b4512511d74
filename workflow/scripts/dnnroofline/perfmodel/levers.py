"""What would move a roofline point: the one engine behind the report's per-point levers
and the one-line lever of the interactive chart's tooltips and the report's tables.

Pure logic: a point's facts in (:class:`PointFacts`: its bound, efficiency, device and
precision, and what else is known of its machine and run), its levers out
(:func:`levers`, most pressing first, each ``{"kind": ..., facts}``, worded by the
report's templates/parts/point.html), or one line of them (:func:`short_lever`). What
a device can run (tensor-core precisions by compute capability, bf16 by CPU flags)
comes from :mod:`dnnroofline.study.precisions`, the one home of those facts. A fact
left None is unknown: a lever it would rule out is offered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dnnroofline.formatting import isnum
from dnnroofline.study.precisions import (
    CPU_BF16_FLAGS,
    HALF_PRECISIONS,
    TENSOR_PRECISIONS,
    unsupported_reason,
)

#: Below this share of its roof, a point is limited by neither roof: overheads.
LOW_EFFICIENCY = 0.30
#: Close to its roof above this share.
HIGH_EFFICIENCY = 0.70
#: Over this share of the step waiting for data, data loading is a lever.
HIGH_DATA_WAIT = 0.10
#: A CPU step that faults in at least this much memory new from the OS per step (MiB),
#: and spends at least this share of its CPU time in the kernel, pays for pages that
#: the allocator gave back: keeping them is a lever.
PAGING_MIB, PAGING_SYS_SHARE = 1.0, 0.05


@dataclass(frozen=True)
class PointFacts:
    """What the lever engine knows of one point; None: unknown."""

    bound: str | None  # memory, compute, host, inconclusive
    efficiency: Any  # attained / roof (NaN or None: unknown)
    above: bool = False
    device: str | None = None  # cuda, cpu, mps
    precision: str | None = None
    roof_source: str | None = None
    busy_share: float | None = None  # the device's busy share of the step
    cuda_cc: tuple[int, int] | None = None
    cpu_flags: Sequence[str] | None = None  # as /proc/cpuinfo names them
    threads: int | None = None  # every process's threads together
    cores: int | None = None  # physical cores
    compiled: bool | None = None  # torch.compile on
    channels_last: bool | None = None
    ai_span: list[dict] | None = None  # [{ai, batch}] at the smallest and largest batch
    min_bytes: tuple[float, float] | None = None  # min DRAM bytes/step: own, half precision
    higher_roofs: Sequence[dict] = ()  # [{precision, roof}] of higher compute roofs
    data_wait_share: float | None = None
    # the timed steps' memory new from the OS (MiB per step) and kernel share of CPU time
    paging: tuple[float, float] | None = None


def _tensor_core_lever(f: PointFacts) -> dict | None:
    """A CUDA point's faster tensor cores: the study's tensor-core precisions other than
    its own that its GPU runs; none for a half-precision point (already on them)."""
    if f.precision in HALF_PRECISIONS:
        return None
    options = [
        p
        for p in TENSOR_PRECISIONS
        if p != f.precision and unsupported_reason("cuda", p, cuda_cc=f.cuda_cc) is None
    ]
    if not options:
        return None
    if options == ["amp"]:  # a GPU with fp16 tensor cores only (Volta, Turing)
        return {"kind": "amp_only"}
    return {"kind": "tensor_cores", "options": options, "roofs": list(f.higher_roofs)}


def _cpu_compute_levers(f: PointFacts) -> list[dict]:
    moves = []
    if isnum(f.threads) and isnum(f.cores) and int(f.threads) < int(f.cores):
        moves.append({"kind": "more_threads", "threads": int(f.threads), "cores": int(f.cores)})
    elif f.threads is None and not f.cores:
        moves.append({"kind": "more_cores"})
    if f.precision not in HALF_PRECISIONS:
        if f.cpu_flags is None:
            moves.append({"kind": "cpu_bf16", "flags": None})
        elif unsupported_reason("cpu", "bf16", cpu_flags=f.cpu_flags) is None:
            have = {str(x).lower() for x in f.cpu_flags}
            moves.append({"kind": "cpu_bf16", "flags": [x for x in CPU_BF16_FLAGS if x in have]})
        elif f.cpu_flags:
            moves.append({"kind": "no_cpu_bf16", "flags": list(CPU_BF16_FLAGS)})
    moves.append({"kind": "cpu_kernels"})
    return moves


def _memory_levers(f: PointFacts) -> list[dict]:
    moves: list[dict] = [{"kind": "larger_batch", "span": f.ai_span}]
    if not f.compiled:
        moves.append({"kind": "fusion"})
    if not f.channels_last:
        moves.append({"kind": "channels_last"})
    # where weights, gradients and optimizer state dominate (small batches) the fp32
    # master copy makes amp/bf16 move more bytes, not fewer: no lever then
    counted = f.min_bytes is not None and all(isnum(v) for v in f.min_bytes)
    if f.precision not in HALF_PRECISIONS and (not counted or f.min_bytes[1] < f.min_bytes[0]):
        moves.append({"kind": "lower_precision", "bytes": list(f.min_bytes) if counted else None})
    return moves


def levers(f: PointFacts) -> list[dict]:
    """What would move a point, most pressing first: ``{"kind": ..., facts}`` each."""
    moves: list[dict] = []
    if f.above:
        moves.append({"kind": "fix_numbers", "roof_source": f.roof_source})
    if f.bound == "host":  # the device waits on the host: no roof move helps first
        moves.append({"kind": "host", "share": f.busy_share, "cuda": f.device == "cuda"})
    elif f.bound == "memory":
        moves += _memory_levers(f)
    elif f.bound == "inconclusive":
        moves.append({"kind": "inconclusive", "cuda": f.device == "cuda"})
    elif f.bound == "compute":
        if f.device == "cuda":
            moves += [m for m in [_tensor_core_lever(f)] if m] + [{"kind": "gpu_kernels"}]
        elif f.device == "cpu":
            moves += _cpu_compute_levers(f)
        else:  # mps, or a device not known: neither CUDA's nor a CPU's units
            moves.append({"kind": "kernels"})
    # no roof explains it: the first lever (a host-bound point has its own)
    eff = f.efficiency
    if isnum(eff) and float(eff) < LOW_EFFICIENCY and f.bound != "host":
        moves.insert(1 if f.above else 0, {"kind": "overheads", "eff": float(eff),
                                           "cuda": f.device == "cuda"})  # fmt: skip
    if isnum(f.data_wait_share) and float(f.data_wait_share) > HIGH_DATA_WAIT:
        moves.append({"kind": "data_loading", "share": float(f.data_wait_share)})
    if f.device == "cpu" and f.paging and all(isnum(v) for v in f.paging):
        mib, share = (float(v) for v in f.paging)
        if mib >= PAGING_MIB and share >= PAGING_SYS_SHARE:
            moves.append({"kind": "page_faults", "mib": mib, "sys_share": share})
    return moves


# --------------------------------------------------------------------------- one line

#: Each memory lever in the one line (channels-last is left to the full analysis).
_MEMORY_WORDS = {
    "larger_batch": "larger batch",
    "fusion": "operator fusion",
    "lower_precision": "lower-precision activations",
}
_KERNEL_LIBRARY = {"gpu_kernels": "cuDNN autotuning", "cpu_kernels": "oneDNN"}
#: Where a compute-bound point's roof is highest already: another machine.
_NO_HIGHER_ROOF = {"cuda": "a faster GPU", "cpu": "more cores"}


def _higher_roof_words(moves: list[dict], device: str | None) -> str:
    """Where a compute-bound point's higher roof is, from its levers: a faster unit of the
    same machine, or another machine where it already runs on the fastest one."""
    words = []  # faster units of the machine first, then more of them
    for m in moves:
        if m["kind"] == "tensor_cores":
            opts = "/".join(m["options"])
            words.append(
                f"tensor cores: {opts}" if "tf32" in m["options"] else f"{opts} tensor cores"
            )
        elif m["kind"] == "amp_only":
            words.append("amp tensor cores")
        elif m["kind"] == "cpu_bf16":
            words.append("bf16" + (" where the CPU has bf16 units" if m["flags"] is None else ""))
    words += [
        m["kind"].replace("_", " ") for m in moves if m["kind"] in ("more_threads", "more_cores")
    ]
    if words:
        return ", ".join(words)
    return _NO_HIGHER_ROOF.get(device or "", "tensor cores, lower precision")


def one_line(moves: list[dict], f: PointFacts) -> str:
    """The first of ``moves`` (:func:`levers`) in one line."""
    kinds = [m["kind"] for m in moves]
    first = kinds[0] if kinds else None
    if first == "fix_numbers":
        return "fix the numbers first: above its roof means a wrong peak or FLOP count"
    if first == "host":
        if f.device == "cpu":
            return "framework overhead, not a roof: larger batch, torch.compile"
        return "keep the device fed: fewer host syncs, CUDA graphs or torch.compile, larger batch"
    if first == "overheads":
        return "overheads, not a roof: larger batch, torch.compile, fewer small kernels"
    if first == "larger_batch":
        return "raise AI: " + ", ".join(_MEMORY_WORDS[k] for k in kinds if k in _MEMORY_WORDS)
    if first == "inconclusive":
        return "AI range straddles the ridge: traffic counters (perf, ncu) would decide"
    if f.bound == "compute" and moves:
        if isnum(f.efficiency) and float(f.efficiency) >= HIGH_EFFICIENCY:
            return (
                f"near its roof: only a higher roof helps ({_higher_roof_words(moves, f.device)})"
            )
        library = next((_KERNEL_LIBRARY[k] for k in kinds if k in _KERNEL_LIBRARY), "cuDNN/oneDNN")
        return f"better kernels ({library}, torch.compile) or a higher roof"
    return "unknown bound"


def short_lever(
    bound: str | None,
    efficiency: Any,
    above: bool = False,
    device: str | None = None,
    precision: str | None = None,
) -> str:
    """One line on what would move a point (the per-point analysis says it in full),
    worded for its device (cuda, cpu; None: either) and precision."""
    f = PointFacts(bound, efficiency, bool(above), device, precision)
    return one_line(levers(f), f)
