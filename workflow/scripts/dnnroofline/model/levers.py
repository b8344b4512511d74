"""What would move a roofline point: the one-line lever that the interactive chart's
tooltips and the report's tables show, worded for the point's device and precision.

Pure logic: a point's bound, its efficiency (attained / roof) and whether it is above
its roof in, one sentence out. The report's per-point analysis says it in full.
"""

from __future__ import annotations

from typing import Any

from dnnroofline.formatting import isnum
from dnnroofline.study.precisions import HALF_PRECISIONS

#: Below this share of its roof, a point is limited by neither roof: overheads.
LOW_EFFICIENCY = 0.30
#: Close to its roof above this share.
HIGH_EFFICIENCY = 0.70


def higher_roof(device: str | None, precision: str | None) -> str:
    """Where a compute-bound point's higher roof is: a faster unit of the same machine, or
    another machine where it already runs on the fastest one."""
    if device == "cuda":
        if precision == "fp32":
            return "tensor cores: tf32/bf16/amp"
        if precision == "tf32":
            return "bf16/amp tensor cores"
        return "a faster GPU"
    if device == "cpu":
        if precision == "bf16":
            return "more cores"
        return "bf16 where the CPU has bf16 units, more cores"
    return "tensor cores, lower precision"


def short_lever(
    bound: str | None,
    efficiency: Any,
    above: bool = False,
    device: str | None = None,
    precision: str | None = None,
) -> str:
    """One line on what would move a point (the per-point analysis says it in full),
    worded for its device (cuda, cpu; None: either) and precision."""
    if above:
        return "fix the numbers first: above its roof means a wrong peak or FLOP count"
    if bound == "host":
        if device == "cpu":
            return "framework overhead, not a roof: larger batch, torch.compile"
        return "keep the device fed: fewer host syncs, CUDA graphs or torch.compile, larger batch"
    if isnum(efficiency) and float(efficiency) < LOW_EFFICIENCY:
        return "overheads, not a roof: larger batch, torch.compile, fewer small kernels"
    if bound == "memory":
        if precision in HALF_PRECISIONS:
            return "raise AI: larger batch, operator fusion"
        return "raise AI: larger batch, operator fusion, lower-precision activations"
    if bound == "inconclusive":
        return "AI range straddles the ridge: traffic counters (perf, ncu) would decide"
    if bound == "compute":
        if isnum(efficiency) and float(efficiency) >= HIGH_EFFICIENCY:
            return f"near its roof: only a higher roof helps ({higher_roof(device, precision)})"
        kernels = {"cuda": "cuDNN autotuning", "cpu": "oneDNN"}.get(device, "cuDNN/oneDNN")
        return f"better kernels ({kernels}, torch.compile) or a higher roof"
    return "unknown bound"
