"""The features an op's speed is fitted on, per op-class table: one home for both sides.

The op-class sweep (:mod:`dnnroofline.measure.op_class_sweep`) records each microbenchmark
with the same ``shape`` dict the op inventory records for an op of the step
(:mod:`dnnroofline.estimate.op_inventory`), and the model
(:mod:`dnnroofline.perfmodel.op_class_tables`) turns either into the same vector here, so
that a fit on the sweep reads the step's ops as it read its own rows.

Sizes enter as log2 (an op's speed changes with its size's order, not its last unit);
kernel, stride and flags as they are. Every vector ends with log2 of the op's ideal time
and of its arithmetic intensity, which carry what the table's other features leave out
(the precision's roofs, the whole op's size). A missing feature is refused, naming it:
an inventory or sweep that lacks it would otherwise be read as size 1.
Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from dnnroofline.errors import InputError

Shape = Mapping[str, object]


def _log(shape: Shape, key: str, at: str) -> float:
    value = shape.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InputError(f"{at}: shape feature {key!r} must be a positive number, got {value!r}")
    return math.log2(float(value))


def _flag(shape: Shape, key: str, default: bool = False) -> float:
    return 1.0 if shape.get(key, default) else 0.0


def _conv(shape: Shape, at: str) -> list[float]:
    groups = _log(shape, "groups", at)
    kernel = float(shape.get("kh", 1)) * float(shape.get("kw", 1))
    out_pixels = _log(shape, "n", at) + _log(shape, "h_out", at) + _log(shape, "w_out", at)
    return [
        _log(shape, "n", at),
        _log(shape, "c_in", at),
        _log(shape, "c_out", at),
        _log(shape, "h", at) + _log(shape, "w", at),
        _log(shape, "h_out", at) + _log(shape, "w_out", at),
        kernel,
        float(shape.get("stride", 1)),
        groups,
        _log(shape, "c_in", at) - groups,  # channels per group: dense, grouped, depthwise
        _flag(shape, "input_grad", True),
        # the convolution as the GEMM it is lowered to, per group: M output pixels,
        # N output channels, K = input channels x kernel
        out_pixels,
        _log(shape, "c_out", at) - groups,
        _log(shape, "c_in", at) - groups + math.log2(max(kernel, 1.0)),
    ]


def _depthwise(shape: Shape, at: str) -> list[float]:
    return [
        _log(shape, "n", at),
        _log(shape, "c_in", at),
        _log(shape, "h_out", at) + _log(shape, "w_out", at),
        float(shape.get("kh", 1)) * float(shape.get("kw", 1)),
        float(shape.get("stride", 1)),
        _flag(shape, "input_grad", True),
    ]


def _gemm(shape: Shape, at: str) -> list[float]:
    batch = shape.get("batch", 1) or 1
    return [
        _log(shape, "m", at),
        _log(shape, "n", at),
        _log(shape, "k", at),
        _log({"batch": batch}, "batch", at),
    ]


def _elementwise(shape: Shape, at: str) -> list[float]:
    return [
        _log(shape, "numel", at),
        float(shape.get("inputs", 1)),
        _flag(shape, "in_place"),
        _flag(shape, "broadcast"),
    ]


def _reduction(shape: Shape, at: str) -> list[float]:
    return [_log(shape, "numel_in", at), _log(shape, "numel_out", at)]


def _normalization(shape: Shape, at: str) -> list[float]:
    return [_log(shape, "n", at), _log(shape, "c", at), _log(shape, "spatial", at)]


def _pooling(shape: Shape, at: str) -> list[float]:
    return [
        _log(shape, "n", at) + _log(shape, "c", at),
        _log(shape, "h", at) + _log(shape, "w", at),
        _log(shape, "h_out", at) + _log(shape, "w_out", at),
        float(shape.get("kh", 1)) * float(shape.get("kw", 1)),
    ]


def _copy(shape: Shape, at: str) -> list[float]:
    return [_log(shape, "numel", at)]


def _optimizer(shape: Shape, at: str) -> list[float]:
    return [_log(shape, "numel", at), _log({"t": shape.get("tensors", 1) or 1}, "t", at)]


#: Per table key (:data:`dnnroofline.estimate.op_classes.TABLE_KEYS`): the shape's features.
_BY_TABLE: dict[str, Callable[[Shape, str], list[float]]] = {
    "conv_fwd": _conv,
    "conv_bwd": _conv,
    "conv_depthwise_fwd": _depthwise,
    "conv_depthwise_bwd": _depthwise,
    "gemm": _gemm,
    "elementwise": _elementwise,
    "reduction": _reduction,
    "normalization": _normalization,
    "pooling": _pooling,
    "copy": _copy,
    "optimizer": _optimizer,
}
#: Tables whose ops run forward and backward kernels of one kind: the phase is a feature.
_PHASED = frozenset({"normalization", "pooling", "reduction", "elementwise", "copy"})


def feature_vector(
    key: str,
    shape: Shape,
    phase: str,
    ideal_s: float,
    flops: float,
    nbytes: float,
    at: str = "op",
) -> list[float]:
    """The features of one op of table ``key``: its shape's, the phase where the table
    holds both directions, then log2 ideal seconds and log2 FLOP per byte."""
    build = _BY_TABLE.get(key)
    if build is None:
        raise InputError(f"{at}: no features for table {key!r} ({', '.join(_BY_TABLE)})")
    if not isinstance(shape, Mapping):
        raise InputError(f"{at}: shape must be an object, got {shape!r}")
    vector = build(shape, at)
    if key in _PHASED:
        vector.append(1.0 if phase == "backward" else 0.0)
    intensity = max(float(flops), 1.0) / max(float(nbytes), 1.0)
    return [*vector, math.log2(max(ideal_s, 1e-12)), math.log2(intensity)]
