"""The class of a captured kernel, from its name: one home for the rules.

Used by the report's ncu comparison (DRAM bytes by class) and by the model's check
(:mod:`dnnroofline.aggregate.predictions`: kernel time by class against the model's
time by op class). Pure, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from dnnroofline.formatting import finite_number
from dnnroofline.io import dig

#: Kernel classes by name, first match wins. Winograd's batched GEMM has a plain GEMM's
#: name: :func:`kernel_classes` places it by its neighbours.
KERNEL_CLASSES = (
    ("layout transform", re.compile(r"nhwcToNchw|nchwToNhwc|AddPadding")),
    ("FFT/Winograd convolution", re.compile(r"fft2d_|flip_filter|winograd|gemm_cf32|cgemm")),
    (
        "convolution/GEMM",
        re.compile(r"xmma|nvjet|cutlass|gemm|implicit|dgrad|wgrad|convolve|scalePackedTensor"),
    ),
    ("batch norm", re.compile(r"batch_?norm", re.IGNORECASE)),
    ("pooling", re.compile(r"pool")),
    ("optimizer", re.compile(r"multi_tensor_apply")),
    ("fill", re.compile(r"FillFunctor")),
)
OTHER_CLASS = "elementwise and other"


def kernel_class(name: str) -> str:
    """The class of a kernel, from its name (:data:`KERNEL_CLASSES`)."""
    for cls, pattern in KERNEL_CLASSES:
        if pattern.search(name):
            return cls
    return OTHER_CLASS


def kernel_classes(doc: Mapping) -> list[tuple[Mapping, str]]:
    """(kernel, class) for each kernel of a parsed capture, in launch order. A GEMM
    launched between Winograd's data/delta transforms and its output transform is
    Winograd's."""
    out = []
    in_winograd = False
    for k in doc.get("kernels") or []:
        name = str(k.get("name") or "")
        cls = kernel_class(name)
        if "winogradWgradOutput" in name:
            in_winograd = False
        elif "winograd" in name:
            in_winograd = True
        elif in_winograd and cls == "convolution/GEMM":
            cls = "FFT/Winograd convolution"
        out.append((k, cls))
    return out


def totals_by_kernel_class(doc: Mapping) -> dict[str, dict[str, float]]:
    """``{class: {"kernels", "dram_bytes", "time_s"}}`` over a parsed capture's kernels
    (the kernel pass: its durations are kernel replays, its bytes L2-flushed); a kernel
    without bytes or a duration counts as a kernel only."""
    out: dict[str, dict[str, float]] = {}
    for k, cls in kernel_classes(doc):
        row = out.setdefault(cls, {"kernels": 0, "dram_bytes": 0.0, "time_s": 0.0})
        row["kernels"] += 1
        row["dram_bytes"] += finite_number(dig(k, "bytes", "dram")) or 0.0
        row["time_s"] += finite_number(k.get("time_s")) or 0.0
    return out
