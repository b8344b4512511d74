"""The independent reference for forward FLOPs: fvcore's TorchScript trace.

The complexity JSON counts FLOPs from the op recorder (:mod:`dnnroofline.estimate.op_recorder`,
aten ops at dispatch). This module counts the same forward another way, as a check:
fvcore's ``FlopCountAnalysis`` traces the model (TorchScript, the ops the Python code
calls: ``aten::linear``, ``aten::_convolution``, ``aten::batch_norm``...) and every one
of fvcore's handles is replaced by one of ours, with the per-element rules of
:mod:`dnnroofline.estimate.op_rules` (fvcore's own count MACs for conv/linear/matmul,
mixed units for norms and pooling, and skip ReLU, add and max-pool):

* conv, conv_grouped, conv_depthwise: 2 * MACs + 1 per output for a bias; linear and
  addmm: 2 * MACs + 1 per output; matmul, bmm, einsum: 2 * MACs; scaled dot-product
  attention: its products (matmul), a softmax of 5 and a scale (+ mask add) per score;
* batch norm 5 per element in training, 2 in eval; layer/group/instance norm 5;
* pooling: max window - 1 compares per output, average window per output, adaptive
  average and mean 1 per input element, sum input - output elements;
* activations, softmax, elementwise arithmetic and dropout per element.

Ops with only 0-dim tensors (shape arithmetic, ``num_batches_tracked``) count nothing;
views, copies and RNG are ignored; any other op fvcore meets is listed in
``uncounted_ops``. No backward: the trace is of the forward alone.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dnnroofline.estimate import op_rules as rules

METHOD = (
    "fvcore FlopCountAnalysis (TorchScript trace of the train-mode forward on the probe "
    "batch, scaled to the batch) with every fvcore handle replaced by ours: conv/linear/"
    "matmul 2*MACs (+1 per output for a bias), norms 5 per element (batch norm in eval "
    "2), pooling, activations, softmax, elementwise and dropout per element as "
    "dnnroofline.estimate.op_rules; no loss, no backward"
)

# Ops that move or create data without arithmetic (views, copies, RNG, shape maths).
ZERO_FLOP_OPS = (
    "aten::unflatten",
    "aten::clone",
    "aten::expand_as",
    "aten::pad",
    "aten::new_zeros",
    "aten::new_ones",
    "aten::fill_",
    "aten::zero_",
    "aten::bernoulli",
    "aten::bernoulli_",
    "aten::numel",
    "aten::ne",
    "aten::lt",
    "aten::le",
    "aten::view_as",
    "aten::repeat",
    "aten::flip",
    "aten::channel_shuffle",
    "aten::pixel_shuffle",
    "aten::pixel_unshuffle",
    "aten::empty_like",
    "aten::ones_like",
    "aten::rand_like",
    "aten::randn_like",
)


@dataclass
class FlopCount:
    """Forward FLOPs of one traced call by layer type, for exactly the inputs given."""

    by_layer_type: dict[str, int]
    uncounted_ops: dict[str, int] = field(default_factory=dict)

    @property
    def forward(self) -> int:
        return sum(self.by_layer_type.values())


def _shape(v: Any) -> list[int] | None:
    return list(v.type().sizes()) if v.isCompleteTensor() else None


def _numel(v: Any) -> int:
    return int(math.prod(_shape(v)))


def _const(v: Any) -> Any:
    """The constant value of a JIT value (lists built from constants included), else None."""
    try:
        val = v.toIValue()
    except RuntimeError:
        val = None
    if val is not None:
        return val
    node = v.node()
    if node.kind() == "prim::ListConstruct":
        items = [_const(i) for i in node.inputs()]
        return None if any(i is None for i in items) else items
    return None


def _conv(inputs: list, outputs: list) -> Counter:
    x, w, b = inputs[0], inputs[1], inputs[2]
    transposed, groups = bool(_const(inputs[6])), int(_const(inputs[8]) or 1)
    spatial = (_shape(x) if transposed else _shape(outputs[0]))[2:]
    macs = _shape(x)[0] * _numel(w) * math.prod(spatial)
    in_per_group = _shape(w)[0 if transposed else 1]
    if groups == 1:
        group = "conv"
    elif in_per_group == 1 and not transposed:
        group = "conv_depthwise"
    else:
        group = "conv_grouped"
    bias = _numel(outputs[0]) if _shape(b) is not None else 0
    return Counter({group: 2 * macs + bias})


def _linear(inputs: list, outputs: list) -> Counter:
    macs = _numel(inputs[0]) * _shape(inputs[1])[0]
    bias = _numel(outputs[0]) if _shape(inputs[2]) is not None else 0
    return Counter({"linear": 2 * macs + bias})


def _addmm(inputs: list, outputs: list) -> Counter:
    s1, s2 = _shape(inputs[1]), _shape(inputs[2])
    return Counter({"linear": 2 * s1[0] * s1[1] * s2[1] + _numel(outputs[0])})


def _matmul(inputs: list, outputs: list) -> Counter:
    sa, sb = _shape(inputs[0]), _shape(inputs[1])
    if len(sa) == 1 and len(sb) == 1:
        macs = sa[0]
    elif len(sb) == 1:
        macs = math.prod(sa)
    else:
        macs = _numel(outputs[0]) * sb[-2]
    return Counter({"matmul": 2 * macs})


def _einsum(inputs: list, outputs: list) -> Counter:
    from fvcore.nn.jit_handles import einsum_flop_jit

    return Counter({"matmul": 2 * int(einsum_flop_jit(inputs, outputs))})


def _sdpa(inputs: list, outputs: list) -> Counter:
    sq, sk, sv = _shape(inputs[0]), _shape(inputs[1]), _shape(inputs[2])
    scores = math.prod(sq[:-2]) * sq[-2] * sk[-2]
    scale = scores * (2 if _shape(inputs[3]) is not None else 1)  # scale (+ mask add)
    return Counter(
        {
            "matmul": 2 * scores * (sq[-1] + sv[-1]),
            "softmax": rules.SOFTMAX_FLOPS * scores,
            "elementwise": scale,
        }
    )


def _batch_norm(inputs: list, outputs: list) -> Counter:
    per = rules.NORM_FWD_FLOPS if _const(inputs[5]) else rules.BN_EVAL_FWD_FLOPS
    return Counter({"batchnorm": per * _numel(inputs[0])})


def _norm(inputs: list, outputs: list) -> Counter:
    return Counter({"norm": rules.NORM_FWD_FLOPS * _numel(inputs[0])})


def _window(inputs: list, outputs: list) -> int:
    k = _const(inputs[1])
    k = list(k) if isinstance(k, (list, tuple)) else [k]
    nd = len(_shape(outputs[0])) - 2
    return math.prod(k * nd if len(k) == 1 and nd > 1 else k)


def _max_pool(inputs: list, outputs: list) -> Counter:
    return Counter({"pool": (_window(inputs, outputs) - 1) * _numel(outputs[0])})


def _avg_pool(inputs: list, outputs: list) -> Counter:
    return Counter({"pool": _window(inputs, outputs) * _numel(outputs[0])})


def _per_element(group: str, per: int, basis: str = "out") -> Callable:
    def handle(inputs: list, outputs: list) -> Counter:
        return Counter({group: per * _numel(outputs[0] if basis == "out" else inputs[0])})

    return handle


def _reduce(inputs: list, outputs: list) -> Counter:
    return Counter({"pool": max(_numel(inputs[0]) - _numel(outputs[0]), 0)})


def _gelu(inputs: list, outputs: list) -> Counter:
    tanh = len(inputs) > 1 and _const(inputs[1]) == "tanh"
    per = rules.GELU_TANH_FLOPS if tanh else rules.ACTIVATION_FLOPS["gelu"]
    return Counter({"activation": per * _numel(outputs[0])})


def _dropout(inputs: list, outputs: list) -> Counter:
    if not _const(inputs[2]) or not _const(inputs[1]):
        return Counter()  # eval mode, or p = 0: the input itself
    return Counter({"dropout": rules.DROPOUT_FLOPS * _numel(outputs[0])})


_RULES: dict[str, Callable[[list, list], Counter]] = {
    "aten::_convolution": _conv,
    "aten::linear": _linear,
    "aten::addmm": _addmm,
    "aten::matmul": _matmul,
    "aten::mm": _matmul,
    "aten::bmm": _matmul,
    "aten::einsum": _einsum,
    "aten::scaled_dot_product_attention": _sdpa,
    "aten::batch_norm": _batch_norm,
    "aten::layer_norm": _norm,
    "aten::group_norm": _norm,
    "aten::instance_norm": _norm,
    **dict.fromkeys(("aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d"), _max_pool),
    **dict.fromkeys(("aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d"), _avg_pool),
    **{f"aten::adaptive_avg_pool{d}d": _per_element("pool", 1, basis="in") for d in (1, 2, 3)},
    "aten::mean": _per_element("pool", 1, basis="in"),
    "aten::sum": _reduce,
    "aten::adaptive_max_pool2d": _reduce,
    **{
        f"aten::{name}": _per_element("softmax", rules.SOFTMAX_FLOPS)
        for name in ("softmax", "log_softmax", "_softmax")
    },
    "aten::gelu": _gelu,
    "aten::gelu_": _gelu,
    **{
        f"aten::{name}{suffix}": _dropout
        for name in ("dropout", "feature_dropout")
        for suffix in ("", "_")
    },
}
for _name, _per in rules.ACTIVATION_FLOPS.items():
    for _suffix in ("", "_"):
        _RULES.setdefault(f"aten::{_name}{_suffix}", _per_element("activation", _per))
for _name, _per in rules.ELEMENTWISE_FLOPS.items():
    for _suffix in ("", "_"):
        _RULES.setdefault(f"aten::{_name}{_suffix}", _per_element("elementwise", _per))


def _handle(kind: str, rule: Callable, unknown: Counter) -> Callable:
    """fvcore's handle signature around a rule: ops on 0-dim tensors count nothing, a
    tensor of unknown shape is noted."""

    def handle(inputs: list, outputs: list) -> Counter:
        tensors = [v for v in [*inputs, *outputs[:1]] if v.type().kind() == "TensorType"]
        shapes = [_shape(v) for v in tensors]
        if any(s is None for s in shapes):
            unknown[kind] += 1
            return Counter()
        if all(len(s) == 0 for s in shapes):
            return Counter()
        return rule(inputs, outputs)

    return handle


@contextlib.contextmanager
def preserved_state(model: nn.Module) -> Iterator[None]:
    """Restore the buffers (BN running stats) and the train/eval mode after a probe run."""
    modes = {m: m.training for m in model.modules()}
    saved = {name: b.detach().clone() for name, b in model.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in saved:
                    b.copy_(saved[name])
        for m, mode in modes.items():
            m.training = mode


def trace_forward(
    model: nn.Module, args: tuple, saved_hooks: tuple[Callable, Callable] | None = None
) -> FlopCount:
    """fvcore's count of ``model(*args)``'s forward with our handles; ``saved_hooks`` (a
    ``saved_tensors_hooks`` pack/unpack pair) record the tensors saved for backward in
    the same (real, grad-enabled) forward, so one forward serves both."""
    with warnings.catch_warnings():  # fvcore.nn torch.jit.scripts a loss at import
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.script")
        from fvcore.nn import FlopCountAnalysis

    unknown: Counter[str] = Counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(preserved_state(model))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")  # TracerWarnings, torch.jit deprecation notices
        if saved_hooks is None:
            stack.enter_context(torch.no_grad())
        else:
            stack.enter_context(torch.enable_grad())
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(*saved_hooks))
        analysis = FlopCountAnalysis(model, args)
        analysis.clear_op_handles()
        analysis.set_op_handle(**{k: _handle(k, r, unknown) for k, r in _RULES.items()})
        analysis.set_op_handle(**dict.fromkeys(ZERO_FLOP_OPS))
        analysis.unsupported_ops_warnings(False)
        analysis.uncalled_modules_warnings(False)
        analysis.tracer_warnings("none")
        by_type = {k: int(v) for k, v in sorted(analysis.by_operator().items()) if v}
        unsupported = dict(analysis.unsupported_ops())
    unsupported.update({f"{k} (shape unknown)": n for k, n in unknown.items()})
    return FlopCount(by_layer_type=by_type, uncounted_ops=dict(sorted(unsupported.items())))


def as_args(inputs: torch.Tensor | Sequence[torch.Tensor]) -> tuple:
    return (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
