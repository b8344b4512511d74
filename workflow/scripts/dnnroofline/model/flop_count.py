"""Training FLOPs of a model, by layer type: fvcore's trace with our own per-op rules.

``count_flops(model, inputs)`` traces the model in its current mode and counts forward
and backward FLOPs per op from a data-flow pass over the traced graph (see
:mod:`dnnroofline.model.complexity` for how the training step is assembled).

Per-op rules (``N`` = elements of the output unless said otherwise):

=============================  ========================================  ======================
type (``by_layer_type`` key)   forward                                   backward
=============================  ========================================  ======================
conv, conv_grouped,            2 * MACs, MACs = N_batch * C_out * H_out  2 * MACs for grad wrt
conv_depthwise                 * W_out * (C_in / groups) * k_h * k_w;    input (if it requires
                               + N bias adds (if the conv has a bias)    grad) + 2 * MACs for
                                                                         grad wrt weight + N
                                                                         adds for grad wrt bias
linear (linear, addmm)         2 * MACs + N bias adds                    same rule as conv
matmul (matmul, mm, bmm,       2 * MACs                                  2 * MACs per operand
einsum, attention products)                                              that requires grad
batchnorm (train mode)         5 / input element: sum, sum of squares    9 / element (x_hat,
                               (3), then one FMA (2) with per-channel    sum(dy),
                               scale and shift                           sum(dy * x_hat), dx)
batchnorm (eval mode)          2 / element (one FMA)                     1x forward
norm (layer/group/instance     5 / input element (as batchnorm train);   9 / element;
norm; vector norm)             vector norm 2 / input element             vector norm 1x fwd
pool                           max: k-1 compares per output;             max: 1 add per output
                               avg: k per output (k-1 adds + 1 div);     (grad routed to the
                               adaptive avg / mean: 1 per input element  argmax); others 1x fwd
activation                     relu 1, relu6/hardtanh 2, leaky_relu 2,   1x forward
                               sigmoid 4, tanh 1, silu 5, hardsigmoid 4,
                               hardswish 5, gelu 5 (tanh approx. 9),
                               elu 3 ... per element
softmax (softmax, log_softmax  5 / element (max, sub, exp, sum, div)     1x forward
and inside attention)
elementwise (add, mul, div,    1 / output element (the residual adds     1x forward (chain-rule
sub, pow, exp, sqrt, ...)      and the stochastic-depth scaling)         multiply, or the add
                                                                         of a fanned-out grad)
dropout (train mode, p > 0)    2 / element (mask multiply, scale)        2 / element
=============================  ========================================  ======================

Convolutions with ``groups > 1`` are reported apart: ``conv_depthwise`` when each group
has one input channel, ``conv_grouped`` otherwise; ``conv`` is ``groups == 1``. The MAC
formula above already divides by ``groups``. Bias adds are counted (1 add per output
element; backward: the bias gradient, 1 add per output element), so conv + linear FLOPs
exceed 2 x the MACs that torchvision publishes by the bias adds only (< 0.1% for
torchvision models). Scaled dot-product attention is split into matmul (QK^T and PV),
softmax and elementwise (scaling, mask add) parts; flash-attention's backward
recomputation of QK^T is not counted. Zero-FLOP ops (views, permutes, cat, pad, index,
RNG) are ignored; any other op fvcore meets is listed in ``uncounted_ops``. The loss
(cross entropy over ``num_classes`` logits, < 0.001% of a step) is not counted.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

# Per-element forward FLOPs of unary activations (each add, mul, div, compare and
# transcendental function is one FLOP). Backward: 1x forward.
ACTIVATION_FLOPS: dict[str, int] = {
    "relu": 1,
    "relu6": 2,
    "hardtanh": 2,
    "leaky_relu": 2,
    "prelu": 2,
    "rrelu": 2,
    "threshold": 1,
    "sigmoid": 4,
    "tanh": 1,
    "silu": 5,
    "hardsigmoid": 4,
    "hardswish": 5,
    "gelu": 5,
    "elu": 3,
    "selu": 4,
    "celu": 4,
    "softplus": 3,
    "mish": 7,
    "hardshrink": 2,
    "softshrink": 3,
    "logsigmoid": 4,
}
GELU_TANH_FLOPS = 9

# Elementwise ops: forward FLOPs per output element. Backward: 1x forward.
ELEMENTWISE_FLOPS: dict[str, int] = {
    name: 1
    for name in (
        "add",
        "sub",
        "rsub",
        "mul",
        "div",
        "pow",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "neg",
        "abs",
        "reciprocal",
        "square",
        "clamp_min",
        "clamp_max",
        "maximum",
        "minimum",
        "erf",
        "sin",
        "cos",
        "where",
    )
}
ELEMENTWISE_FLOPS.update({"clamp": 2, "addcmul": 2, "addcdiv": 2, "lerp": 2})

SOFTMAX_FLOPS = 5
NORM_FWD_FLOPS = 5
NORM_BWD_FLOPS = 9
BN_EVAL_FWD_FLOPS = 2
DROPOUT_FLOPS = 2

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

# Ops whose output never requires grad, whatever their inputs.
_NON_DIFFERENTIABLE = {
    "aten::detach",
    "aten::size",
    "aten::numel",
    "aten::zeros_like",
    "aten::ones_like",
    "aten::empty_like",
    "aten::full_like",
    "aten::rand_like",
    "aten::randn_like",
    "aten::new_zeros",
    "aten::new_ones",
    "aten::new_empty",
    "aten::new_full",
    "aten::bernoulli",
    "aten::bernoulli_",
    "aten::eq",
    "aten::ne",
    "aten::lt",
    "aten::le",
    "aten::gt",
    "aten::ge",
    "aten::argmax",
    "aten::argmin",
    "aten::sign",
}


@dataclass
class FlopCount:
    """FLOPs of one traced call, for exactly the inputs given (no batch scaling)."""

    by_layer_type: dict[str, dict[str, int]]
    uncounted_ops: dict[str, int] = field(default_factory=dict)

    @property
    def forward(self) -> int:
        return sum(v["forward"] for v in self.by_layer_type.values())

    @property
    def backward(self) -> int:
        return sum(v["backward"] for v in self.by_layer_type.values())

    def total(self, *types: str, prefix: bool = False) -> dict[str, int]:
        """Forward and backward summed over the given types (or names starting with them)."""
        out = {"forward": 0, "backward": 0}
        for name, v in self.by_layer_type.items():
            if (prefix and name.startswith(types)) or (not prefix and name in types):
                out["forward"] += v["forward"]
                out["backward"] += v["backward"]
        return out


def _shape(v: Any) -> list[int] | None:
    if v.isCompleteTensor():
        return list(v.type().sizes())
    return None


def _numel(shape: Sequence[int]) -> int:
    return int(math.prod(shape))


def _carries_tensor(t: Any) -> bool:
    kind = t.kind()
    if kind == "TensorType":
        return True
    if kind in ("ListType", "OptionalType"):
        return _carries_tensor(t.getElementType())
    if kind == "TupleType":
        return any(_carries_tensor(e) for e in t.elements())
    return False


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


class TraceLayoutError(Exception):
    """The traced graph's inputs are not (model inputs + unique state dict): a torch change."""


Group = tuple[str, int, int]  # (layer type, forward FLOPs, backward FLOPs)


class _GraphCounter:
    """fvcore op handles that count forward and backward FLOPs per layer type.

    Each handle returns a Counter keyed ``"<type>/forward"`` and ``"<type>/backward"``.
    A memoised data-flow pass over the traced graph decides, per value, whether it
    depends on the input batch and whether it requires grad. The traced graph's inputs
    are the flattened model inputs, then the module's unique state dict (this is how
    ``torch.jit._get_trace_graph`` builds it); their flags are the seeds.
    """

    def __init__(self, inputs: Sequence[torch.Tensor], state: Sequence[torch.Tensor]):
        self._seeds = [(True, bool(t.requires_grad)) for t in inputs] + [
            (False, bool(t.requires_grad)) for t in state
        ]
        self._memo: dict[int, tuple[bool, bool]] = {}
        self.unknown_shape: Counter[str] = Counter()

    # -- data flow -----------------------------------------------------------------
    def _seed(self, v: Any) -> tuple[bool, bool]:
        n_graph_inputs = len(list(v.node().outputs()))
        if n_graph_inputs != len(self._seeds):
            raise TraceLayoutError(
                f"traced graph has {n_graph_inputs} inputs, expected {len(self._seeds)} "
                "(model inputs + unique state dict): torch.jit tracing changed"
            )
        return self._seeds[v.offset()]

    def flags(self, value: Any) -> tuple[bool, bool]:
        """(depends on the input batch, requires grad) of a JIT value."""
        memo = self._memo
        if value.unique() in memo:
            return memo[value.unique()]
        stack = [value]
        while stack:
            v = stack[-1]
            if v.unique() in memo:
                stack.pop()
                continue
            node = v.node()
            kind = node.kind()
            if kind == "prim::Param":
                memo[v.unique()] = self._seed(v)
                stack.pop()
                continue
            ins = list(node.inputs())
            pending = [i for i in ins if i.unique() not in memo]
            if pending:
                stack.extend(pending)
                continue
            data = any(memo[i.unique()][0] for i in ins)
            grad = kind not in _NON_DIFFERENTIABLE and any(
                memo[i.unique()][1] for i in ins if _carries_tensor(i.type())
            )
            for o in node.outputs():
                memo[o.unique()] = (data, grad and _carries_tensor(o.type()))
            stack.pop()
        return memo[value.unique()]

    def data(self, v: Any) -> bool:
        return self.flags(v)[0]

    def grad(self, v: Any) -> bool:
        return self.flags(v)[1]

    # -- handle plumbing -----------------------------------------------------------
    def _wrap(self, kind: str, rule: Callable[[list, list], Iterable[Group]]) -> Callable:
        def handle(inputs: list, outputs: list) -> Counter[str]:
            carriers = [i for i in inputs if _carries_tensor(i.type())]  # einsum: a list
            if not any(self.data(i) for i in carriers):
                return Counter()  # parameters/buffers only: a per-step constant
            tensors = [i for i in carriers if i.type().kind() == "TensorType"]
            shapes = [_shape(t) for t in tensors + list(outputs[:1])]
            if any(s is None for s in shapes):
                self.unknown_shape[kind] += 1
                return Counter()
            if all(len(s) == 0 for s in shapes):
                return Counter()  # 0-dim shape arithmetic / bookkeeping
            counts: Counter[str] = Counter()
            for group, fwd, bwd in rule(inputs, outputs):
                counts[f"{group}/forward"] += int(fwd)
                counts[f"{group}/backward"] += int(bwd)
            return counts

        return handle

    def _any_grad(self, inputs: list) -> bool:
        return any(self.grad(i) for i in inputs if _carries_tensor(i.type()))

    def _unary(self, group: str, per_elem: int, basis: str = "out", bwd_factor: int = 1):
        def rule(inputs: list, outputs: list) -> Iterable[Group]:
            n = _numel(_shape(outputs[0]) if basis == "out" else _shape(inputs[0]))
            fwd = per_elem * n
            yield group, fwd, bwd_factor * fwd if self._any_grad(inputs) else 0

        return rule

    # -- rules ---------------------------------------------------------------------
    def _conv(self, inputs: list, outputs: list) -> Iterable[Group]:
        x, w, b = inputs[0], inputs[1], inputs[2]
        x_shape, w_shape, out_shape = _shape(x), _shape(w), _shape(outputs[0])
        transposed = bool(_const(inputs[6]))
        groups = int(_const(inputs[8]) or 1)
        # w: [C_out, C_in/groups, k...] (transposed: [C_in, C_out/groups, k...])
        spatial = (x_shape if transposed else out_shape)[2:]
        macs = x_shape[0] * _numel(w_shape) * _numel(spatial)
        in_per_group = w_shape[0] if transposed else w_shape[1]
        if groups == 1:
            group = "conv"
        elif in_per_group == 1 and not transposed:
            group = "conv_depthwise"
        else:
            group = "conv_grouped"
        n_out = _numel(out_shape)
        has_bias = _shape(b) is not None
        fwd = 2 * macs + (n_out if has_bias else 0)
        bwd = (2 * macs if self.grad(x) else 0) + (2 * macs if self.grad(w) else 0)
        bwd += n_out if has_bias and self.grad(b) else 0
        yield group, fwd, bwd

    def _linear(self, inputs: list, outputs: list) -> Iterable[Group]:
        x, w, b = inputs[0], inputs[1], inputs[2]
        x_shape, w_shape = _shape(x), _shape(w)
        macs = _numel(x_shape) * w_shape[0]
        n_out = _numel(_shape(outputs[0]))
        has_bias = _shape(b) is not None
        fwd = 2 * macs + (n_out if has_bias else 0)
        bwd = (2 * macs if self.grad(x) else 0) + (2 * macs if self.grad(w) else 0)
        bwd += n_out if has_bias and self.grad(b) else 0
        yield "linear", fwd, bwd

    def _addmm(self, inputs: list, outputs: list) -> Iterable[Group]:
        b, m1, m2 = inputs[0], inputs[1], inputs[2]
        s1, s2 = _shape(m1), _shape(m2)
        macs = s1[0] * s1[1] * s2[1]
        n_out = _numel(_shape(outputs[0]))
        fwd = 2 * macs + n_out
        bwd = (2 * macs if self.grad(m1) else 0) + (2 * macs if self.grad(m2) else 0)
        bwd += n_out if self.grad(b) else 0
        yield "linear", fwd, bwd

    def _matmul(self, inputs: list, outputs: list) -> Iterable[Group]:
        a, b = inputs[0], inputs[1]
        sa, sb = _shape(a), _shape(b)
        if len(sa) == 1 and len(sb) == 1:
            macs = sa[0]
        elif len(sb) == 1:
            macs = _numel(sa)
        else:
            # output [..., n, m]; MACs = output elements * contracted dim
            macs = _numel(_shape(outputs[0])) * sb[-2]
        n_grad = int(self.grad(a)) + int(self.grad(b))
        yield "matmul", 2 * macs, 2 * macs * n_grad

    def _einsum(self, inputs: list, outputs: list) -> Iterable[Group]:
        from fvcore.nn.jit_handles import einsum_flop_jit

        macs = int(einsum_flop_jit(inputs, outputs))
        operands = list(inputs[1].node().inputs())
        n_grad = sum(int(self.grad(o)) for o in operands)
        yield "matmul", 2 * macs, 2 * macs * n_grad

    def _sdpa(self, inputs: list, outputs: list) -> Iterable[Group]:
        q, k, v, mask = inputs[0], inputs[1], inputs[2], inputs[3]
        sq, sk, sv = _shape(q), _shape(k), _shape(v)
        batch = _numel(sq[:-2])
        n_q, e = sq[-2], sq[-1]
        n_k, e_v = sk[-2], sv[-1]
        scores = batch * n_q * n_k
        macs = scores * e + scores * e_v
        grad = self._any_grad([q, k, v])
        yield "matmul", 2 * macs, 4 * macs if grad else 0
        yield "softmax", SOFTMAX_FLOPS * scores, SOFTMAX_FLOPS * scores if grad else 0
        ew = scores * (2 if _shape(mask) is not None else 1)  # scale (+ mask add)
        yield "elementwise", ew, ew if grad else 0

    def _batch_norm(self, inputs: list, outputs: list) -> Iterable[Group]:
        n = _numel(_shape(inputs[0]))
        training = bool(_const(inputs[5]))
        grad = self._any_grad(inputs[:3])
        if training:
            yield "batchnorm", NORM_FWD_FLOPS * n, NORM_BWD_FLOPS * n if grad else 0
        else:
            fwd = BN_EVAL_FWD_FLOPS * n
            yield "batchnorm", fwd, fwd if grad else 0

    def _norm(self, inputs: list, outputs: list) -> Iterable[Group]:
        n = _numel(_shape(inputs[0]))
        grad = self._any_grad(inputs)
        yield "norm", NORM_FWD_FLOPS * n, NORM_BWD_FLOPS * n if grad else 0

    def _vector_norm(self, inputs: list, outputs: list) -> Iterable[Group]:
        fwd = 2 * _numel(_shape(inputs[0])) + _numel(_shape(outputs[0]))
        yield "norm", fwd, fwd if self._any_grad(inputs) else 0

    def _window(self, kernel: Any, out_shape: list[int]) -> int:
        k = list(kernel) if isinstance(kernel, (list, tuple)) else [kernel]
        nd = len(out_shape) - 2
        if len(k) == 1 and nd > 1:
            k = k * nd
        return _numel(k)

    def _max_pool(self, inputs: list, outputs: list) -> Iterable[Group]:
        out = _shape(outputs[0])
        n_out = _numel(out)
        k = self._window(_const(inputs[1]), out)
        yield "pool", (k - 1) * n_out, n_out if self._any_grad(inputs[:1]) else 0

    def _avg_pool(self, inputs: list, outputs: list) -> Iterable[Group]:
        out = _shape(outputs[0])
        fwd = self._window(_const(inputs[1]), out) * _numel(out)
        yield "pool", fwd, fwd if self._any_grad(inputs[:1]) else 0

    def _adaptive_max_pool(self, inputs: list, outputs: list) -> Iterable[Group]:
        n_in, n_out = _numel(_shape(inputs[0])), _numel(_shape(outputs[0]))
        yield "pool", max(n_in - n_out, 0), n_out if self._any_grad(inputs[:1]) else 0

    def _sum(self, inputs: list, outputs: list) -> Iterable[Group]:
        n_in, n_out = _numel(_shape(inputs[0])), _numel(_shape(outputs[0]))
        fwd = max(n_in - n_out, 0)
        yield "pool", fwd, fwd if self._any_grad(inputs[:1]) else 0

    def _gelu(self, inputs: list, outputs: list) -> Iterable[Group]:
        approx = _const(inputs[1]) if len(inputs) > 1 else "none"
        per = GELU_TANH_FLOPS if approx == "tanh" else ACTIVATION_FLOPS["gelu"]
        fwd = per * _numel(_shape(outputs[0]))
        yield "activation", fwd, fwd if self._any_grad(inputs[:1]) else 0

    def _dropout(self, inputs: list, outputs: list) -> Iterable[Group]:
        p, train = _const(inputs[1]), _const(inputs[2])
        if not train or not p:
            return
        fwd = DROPOUT_FLOPS * _numel(_shape(outputs[0]))
        yield "dropout", fwd, fwd if self._any_grad(inputs[:1]) else 0

    def handles(self) -> dict[str, Callable]:
        rules: dict[str, Callable[[list, list], Iterable[Group]]] = {
            "aten::_convolution": self._conv,
            "aten::linear": self._linear,
            "aten::addmm": self._addmm,
            "aten::matmul": self._matmul,
            "aten::mm": self._matmul,
            "aten::bmm": self._matmul,
            "aten::einsum": self._einsum,
            "aten::scaled_dot_product_attention": self._sdpa,
            "aten::batch_norm": self._batch_norm,
            "aten::layer_norm": self._norm,
            "aten::group_norm": self._norm,
            "aten::instance_norm": self._norm,
            "aten::linalg_vector_norm": self._vector_norm,
            "aten::max_pool1d": self._max_pool,
            "aten::max_pool2d": self._max_pool,
            "aten::max_pool3d": self._max_pool,
            "aten::avg_pool1d": self._avg_pool,
            "aten::avg_pool2d": self._avg_pool,
            "aten::avg_pool3d": self._avg_pool,
            "aten::adaptive_avg_pool1d": self._unary("pool", 1, basis="in"),
            "aten::adaptive_avg_pool2d": self._unary("pool", 1, basis="in"),
            "aten::adaptive_avg_pool3d": self._unary("pool", 1, basis="in"),
            "aten::adaptive_max_pool2d": self._adaptive_max_pool,
            "aten::mean": self._unary("pool", 1, basis="in"),
            "aten::sum": self._sum,
            "aten::softmax": self._unary("softmax", SOFTMAX_FLOPS),
            "aten::log_softmax": self._unary("softmax", SOFTMAX_FLOPS),
            "aten::_softmax": self._unary("softmax", SOFTMAX_FLOPS),
            "aten::gelu": self._gelu,
            "aten::gelu_": self._gelu,
            "aten::dropout": self._dropout,
            "aten::dropout_": self._dropout,
            "aten::feature_dropout": self._dropout,
            "aten::feature_dropout_": self._dropout,
        }
        for name, per in ACTIVATION_FLOPS.items():
            if name == "gelu":
                continue
            for suffix in ("", "_"):
                rules[f"aten::{name}{suffix}"] = self._unary("activation", per)
        for name, per in ELEMENTWISE_FLOPS.items():
            for suffix in ("", "_"):
                rules.setdefault(f"aten::{name}{suffix}", self._unary("elementwise", per))
        return {kind: self._wrap(kind, rule) for kind, rule in rules.items()}


def _unique_state(model: nn.Module) -> list[torch.Tensor]:
    """The module state in the order torch.jit._get_trace_graph appends it to the inputs."""
    seen: set[int] = set()
    out = []
    for v in model.state_dict(keep_vars=True).values():
        if id(v) in seen:
            continue
        seen.add(id(v))
        out.append(v)
    return out


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


def trace_flops(
    model: nn.Module, args: tuple, saved_hooks: tuple[Callable, Callable] | None = None
) -> FlopCount:
    """Trace ``model(*args)`` with fvcore and our handles; ``saved_hooks`` (a
    ``saved_tensors_hooks`` pack/unpack pair) record the saved tensors in the same (real)
    forward, so one forward serves both counts."""
    with warnings.catch_warnings():  # fvcore.nn torch.jit.scripts a loss at import
        # the deprecation notice is a FutureWarning in torch 2.14, a DeprecationWarning in 2.11
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.script")
        from fvcore.nn import FlopCountAnalysis

    counter = _GraphCounter(args, _unique_state(model))
    with contextlib.ExitStack() as stack:
        stack.enter_context(preserved_state(model))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")  # TracerWarnings, torch.jit deprecation notices
        if saved_hooks is None:
            stack.enter_context(torch.no_grad())
        else:  # a real autograd forward: the saved tensors are recorded while tracing
            stack.enter_context(torch.enable_grad())
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(*saved_hooks))
        analysis = FlopCountAnalysis(model, args)
        analysis.clear_op_handles()
        analysis.set_op_handle(**counter.handles())
        analysis.set_op_handle(**dict.fromkeys(ZERO_FLOP_OPS))
        analysis.unsupported_ops_warnings(False)
        analysis.uncalled_modules_warnings(False)
        analysis.tracer_warnings("none")
        by_op = analysis.by_operator()
        unsupported = dict(analysis.unsupported_ops())
    by_type: dict[str, dict[str, int]] = {}
    for key, value in sorted(by_op.items()):
        group, _, direction = key.rpartition("/")
        by_type.setdefault(group, {"forward": 0, "backward": 0})[direction] += int(value)
    by_type = {k: v for k, v in by_type.items() if v["forward"] or v["backward"]}
    unsupported.update({f"{k} (shape unknown)": n for k, n in counter.unknown_shape.items()})
    return FlopCount(by_layer_type=by_type, uncounted_ops=dict(sorted(unsupported.items())))


def count_flops(model: nn.Module, inputs: torch.Tensor | Sequence[torch.Tensor]) -> FlopCount:
    """Forward and backward FLOPs of ``model(*inputs)`` by layer type, for these exact inputs.

    The model is traced in its current mode (call ``.train()`` for the training graph).
    A tensor input counts as needing a gradient only if it has ``requires_grad`` (an
    image batch does not, so a first convolution gets only its weight gradient).
    Buffers and the train/eval mode are restored afterwards.
    """
    return trace_flops(model, as_args(inputs))


def as_args(inputs: torch.Tensor | Sequence[torch.Tensor]) -> tuple:
    return (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
