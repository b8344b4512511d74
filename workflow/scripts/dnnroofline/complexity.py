"""Analytic complexity of one training step of a torchvision classifier.

Pure logic (no Snakemake, no file I/O). ``complexity(arch, batch_size, image_size)``
returns the dict of the complexity contract (docs/contracts.md): parameters, bytes,
FLOPs of forward, backward and optimizer by layer type, an analytic lower bound on
DRAM traffic per step and an estimate of peak memory, per precision.

Counting method (also written into every result as ``method``):

* **Graph.** The model is traced in *train* mode (batch-norm batch statistics, active
  dropout and stochastic depth, GoogLeNet/Inception auxiliary heads: the graph the
  training driver runs) with fvcore's ``FlopCountAnalysis`` (a TorchScript trace), on a
  probe batch of one image, or two where train-mode batch norm refuses a single value
  per channel (a 1x1 feature map, e.g. resnet18 at 32x32). Every counted op scales
  with the batch, so the counts are scaled exactly by ``batch_size / probe``. The same
  (real) forward records the tensors saved for backward, so a 224x224 resnet50 takes
  about a second on two cores, whatever the batch.
* **FLOPs, not MACs.** One FLOP is one add, multiply, compare, divide or
  transcendental function; an FMA is 2. All of fvcore's own handles are replaced by the
  handles below (fvcore's count MACs for conv/linear/matmul, but mixed units for
  norms and pooling, and skip ReLU, add and max-pool).
* **Only batch-dependent ops are counted.** A data-flow pass over the traced graph marks
  the values that depend on the input images; ops on parameters or buffers only
  (``num_batches_tracked += 1``, Swin's relative-position tables) and 0-dim shape
  arithmetic are per-step constants and are left out.
* **Backward** is counted per op, from the same data-flow pass, which also marks the
  values that require grad (the input image does not; parameters do). An op none of
  whose inputs require grad has no backward, so the first convolution computes only
  its weight gradient (its input gradient is not computed by autograd and not counted).

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

**Optimizer**: SGD with momentum 0.9 and weight decay 1e-4, 6 FLOPs per parameter
(``g += wd * p``: 2; ``m = mu * m + g``: 2; ``p -= lr * m``: 2).

**Memory.** ``P`` = parameters, ``A`` = bytes of the tensors saved for backward,
measured by ``torch.autograd.graph.saved_tensors_hooks`` on the real train-mode forward
of the probe batch: unique storages, excluding parameters, buffers and the input batch
itself (max-pool indices and dropout masks included at their own dtype), scaled by
``batch_size / probe``, except 0/1-dim saved tensors (batch norm's per-channel mean
and inverse std), which do not grow with the batch. ``I`` = bytes of the fp32 input batch
(``batch * 3 * H * W * 4``).

* fp32/tf32: params ``4P``, grads ``4P``, momentum ``4P``.
* amp (fp16 autocast + GradScaler) and bf16 (bf16 autocast): master params, grads and
  momentum stay fp32 (autocast never changes parameters), floating-point saved
  activations are 2 bytes (``A_half``), and autocast keeps a 2-byte copy of the
  weights for the forward and backward (``2P``; all parameters, a slight
  over-estimate, since norm-layer parameters are not cast).

``min_dram_bytes_per_step`` (analytic lower bound; activation gradients and forward
intermediates that are not saved are assumed to stay on chip, so real traffic is higher):

* fp32/tf32: ``32P + 2A + 2I`` = params read in forward (4P) and in backward (4P),
  grads written (4P), optimizer reads p, g, momentum (12P) and writes p, momentum (8P);
  saved activations written in forward and read once in backward (2A); the input batch
  read in forward and read again for the first layer's weight gradient (2I).
* bf16: ``34P + 2A_half + 2I``: the weights are read as fp32 to make the 2-byte copy
  (4P) which is written (2P) and read in forward (2P) and backward (2P); fp32 grads
  written (4P); optimizer 20P.
* amp: bf16 + ``8P``: GradScaler's unscale reads and writes every fp32 grad.

``peak_memory_bytes`` (estimate, at the start of backward): params + grads (counted in
full, conservative) + momentum + saved activations + input batch (+ 2-byte weight copy
under amp/bf16) + a workspace allowance of ``2 x`` the largest saved activation
(the gradient buffers of the largest layer in flight in backward) + ``WORKSPACE_FIXED_BYTES``
(64 MB: convolution algorithm workspace). The CUDA context and allocator fragmentation
are not included.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dnnroofline.errors import InputError

SCHEMA_VERSION = 1
OPTIMIZER_FLOPS_PER_PARAM = 6
OPTIMIZER = {"name": "SGD", "momentum": 0.9, "weight_decay": 1e-4}
PRECISIONS = ("fp32", "tf32", "amp", "bf16")
FP32_BYTES = 4
HALF_BYTES = 2
WORKSPACE_FIXED_BYTES = 64_000_000
IN_CHANNELS = 3

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

METHOD = (
    "FLOPs, not MACs (an FMA is 2 FLOPs; one add, multiply, compare, divide or "
    "transcendental is 1). Train-mode graph traced with fvcore FlopCountAnalysis on a probe "
    "batch of 1 (2 where train-mode batch norm needs it), scaled linearly to the batch; "
    "every fvcore handle replaced: "
    "conv/linear/matmul = 2*MACs (grouped and depthwise convs: 2*N*Cout*Hout*Wout*"
    "(Cin/groups)*kh*kw, reported as conv_grouped / conv_depthwise) + 1 add per output "
    "for a bias; batchnorm (train)/layer/group norm 5 FLOPs per element; pooling: max k-1 "
    "compares, avg k per output, adaptive avg 1 per input element; activations per element "
    "(relu 1, relu6 2, sigmoid 4, silu 5, hardswish 5, gelu 5); softmax 5; elementwise "
    "add/mul/... 1; dropout 2. Only ops on batch-dependent data are counted. Backward per "
    "op from a requires-grad data-flow pass: conv/linear/matmul 2*MACs per operand that "
    "requires grad (grad wrt input + grad wrt weight = 2x forward; the first layer's "
    "input needs no gradient and is not counted) + 1 add per output for a bias gradient; "
    "batchnorm/norm 9 per element; max-pool 1 per output; other types 1x forward. "
    f"Optimizer: SGD momentum {OPTIMIZER['momentum']}, weight decay "
    f"{OPTIMIZER['weight_decay']}, {OPTIMIZER_FLOPS_PER_PARAM} FLOPs and one fp32 momentum "
    "buffer per parameter; loss not counted. Activations: unique storages saved for "
    "backward (saved_tensors_hooks on the real train-mode probe forward), without "
    "parameters, buffers and the input batch, scaled with the batch except 0/1-dim "
    "per-channel statistics. min DRAM bytes per step (lower bound): fp32 32P + 2A + "
    "2I (params read fwd+bwd, grads written, optimizer reads p,g,m and writes p,m; saved "
    "activations written and read once; input read in forward and for the first layer's "
    "weight grad); bf16 34P + 2A_half + 2I (fp32 weights read for the 2-byte autocast "
    "copy, copy written and read in fwd and bwd); amp = bf16 + 8P (GradScaler unscale). "
    "Peak memory: params + grads + momentum + activations + input (+ 2-byte weight copy "
    f"under amp/bf16) + workspace (2x the largest saved activation + "
    f"{WORKSPACE_FIXED_BYTES // 1_000_000} MB)."
)


# --------------------------------------------------------------------------- models


class ModelCannotRun(InputError):
    """The model cannot train at this configuration (e.g. an image too small for its
    kernels). A property of the (model, image size), not a bad argument: the CLI records
    it as a complexity JSON with ``status: "error"``, as the driver records a failed run."""


def available_models() -> list[str]:
    """torchvision classification model names (the values ``--arch`` accepts)."""
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def unknown_model_message(arch: str, names: Sequence[str] | None = None) -> str:
    names = available_models() if names is None else list(names)
    close = difflib.get_close_matches(arch, names, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return (
        f"--arch {arch!r}: not a torchvision classification model{hint} "
        "(see torchvision.models.list_models(module=torchvision.models))"
    )


def build_model(arch: str, num_classes: int = 1000) -> nn.Module:
    """A randomly initialised torchvision classifier (``weights=None``: nothing is downloaded).

    Raises InputError for an unknown name, with close names as suggestions.
    """
    import torchvision

    names = available_models()
    if arch not in names:
        raise InputError(unknown_model_message(arch, names))
    if not isinstance(num_classes, int) or num_classes < 1:
        raise InputError(f"--num-classes {num_classes!r}: must be a positive integer")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # googlenet/inception init_weights notices
        return torchvision.models.get_model(arch, weights=None, num_classes=num_classes)


# --------------------------------------------------------------------------- FLOPs


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
def _preserved_state(model: nn.Module) -> Iterator[None]:
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


def _flop_count(model: nn.Module, args: tuple, saved: _SavedCollector | None = None) -> FlopCount:
    """Trace ``model(*args)`` with fvcore and our handles; optionally collect saved tensors
    in the same (real) forward, so one forward serves both counts."""
    from fvcore.nn import FlopCountAnalysis

    counter = _GraphCounter(args, _unique_state(model))
    with contextlib.ExitStack() as stack:
        stack.enter_context(_preserved_state(model))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")  # TracerWarnings, torch.jit deprecation notices
        if saved is None:
            stack.enter_context(torch.no_grad())
        else:  # a real autograd forward: the saved tensors are recorded while tracing
            stack.enter_context(torch.enable_grad())
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack))
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
    return _flop_count(model, _as_args(inputs))


def _as_args(inputs: torch.Tensor | Sequence[torch.Tensor]) -> tuple:
    return (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)


# --------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class SavedTensors:
    """Unique storages autograd saves for backward in one forward call."""

    float_bytes: int  # floating point (2 bytes each under amp/bf16)
    other_bytes: int  # integer and bool (max-pool indices, masks)
    fixed_bytes: int  # of float_bytes: 0/1-dim tensors (per-channel BN statistics)
    largest_bytes: int
    largest_is_float: bool
    count: int

    @property
    def total_bytes(self) -> int:
        return self.float_bytes + self.other_bytes

    def scaled(self, batch_size: int, probe: int, precision: str = "fp32") -> int:
        """Bytes at ``precision`` for ``batch_size`` images, measured on ``probe`` images.

        Everything scales with the batch except the 0/1-dim saved tensors (batch norm's
        per-channel mean and inverse std), which are batch-independent.
        """
        _check_precision(precision)
        num, den = (1, 1) if precision in ("fp32", "tf32") else (HALF_BYTES, FP32_BYTES)
        per_batch = (self.float_bytes - self.fixed_bytes) * num // den + self.other_bytes
        fixed = self.fixed_bytes * num // den
        return fixed + _scale(per_batch, batch_size, probe)


class _SavedCollector:
    """``saved_tensors_hooks`` pack/unpack pair recording unique saved storages.

    Parameters, buffers and the model inputs are excluded (they are resident anyway).
    The packed tensors are kept referenced so that no storage address is reused.
    """

    def __init__(self, model: nn.Module, args: tuple):
        self._exclude = {t.untyped_storage().data_ptr() for t in args}
        self._exclude |= {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._exclude |= {b.untyped_storage().data_ptr() for b in model.buffers()}
        self._storages: dict[int, tuple[int, bool, bool]] = {}
        self._keep: list[torch.Tensor] = []

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        ptr = s.data_ptr()
        if ptr not in self._exclude and s.nbytes() > 0:
            fixed = t.dim() <= 1 and t.is_floating_point()
            self._storages[ptr] = (int(s.nbytes()), t.is_floating_point(), fixed)
        self._keep.append(t)
        return t

    @staticmethod
    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    def result(self) -> SavedTensors:
        self._keep.clear()
        values = self._storages.values()
        largest = max(values, default=(0, True, False))
        return SavedTensors(
            float_bytes=sum(n for n, is_float, _ in values if is_float),
            other_bytes=sum(n for n, is_float, _ in values if not is_float),
            fixed_bytes=sum(n for n, _, fixed in values if fixed),
            largest_bytes=largest[0],
            largest_is_float=largest[1],
            count=len(self._storages),
        )


def measure_saved_tensors(
    model: nn.Module, inputs: torch.Tensor | Sequence[torch.Tensor]
) -> SavedTensors:
    """Bytes of the tensors saved for backward by one real forward (grad enabled).

    Deduplicated by storage; parameters, buffers and the inputs themselves are left out.
    Runs the model in its current mode; buffers and mode are restored afterwards.
    """
    args = _as_args(inputs)
    collector = _SavedCollector(model, args)
    with (
        _preserved_state(model),
        warnings.catch_warnings(),
        torch.enable_grad(),
        torch.autograd.graph.saved_tensors_hooks(collector.pack, collector.unpack),
    ):
        warnings.simplefilter("ignore")
        out = model(*args)
    del out
    return collector.result()


def count_flops_and_saved_tensors(
    model: nn.Module, inputs: torch.Tensor | Sequence[torch.Tensor]
) -> tuple[FlopCount, SavedTensors]:
    """``count_flops`` and ``measure_saved_tensors`` from one traced forward."""
    args = _as_args(inputs)
    collector = _SavedCollector(model, args)
    flops = _flop_count(model, args, collector)
    return flops, collector.result()


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise InputError(f"precision {precision!r}: choose from {', '.join(PRECISIONS)}")


def min_dram_bytes_per_step(
    params: int, activation_bytes: int, input_bytes: int, precision: str = "fp32"
) -> int:
    """Analytic lower bound on DRAM bytes of one training step (SGD with momentum).

    fp32/tf32: ``32P + 2A + 2I``: params read in forward and backward (4P + 4P), grads
    written (4P), optimizer reads p, g, momentum (12P) and writes p, momentum (8P),
    saved activations written in forward and read once in backward (2A), input batch
    read in forward and again for the first layer's weight gradient (2I).
    bf16: ``34P + 2A + 2I``: fp32 weights read (4P) to write the 2-byte autocast copy
    (2P), which forward and backward each read (2P + 2P); fp32 grads (4P); optimizer
    (20P). amp: the bf16 formula + 8P for GradScaler's unscale (read and write each
    grad). ``A`` is the activation bytes *at that precision*, ``I`` the fp32 input bytes.
    """
    _check_precision(precision)
    p = params
    optimizer = 3 * FP32_BYTES * p + 2 * FP32_BYTES * p  # read p, g, m; write p, m
    if precision in ("fp32", "tf32"):
        weights = 2 * FP32_BYTES * p  # read in forward and in backward
    else:
        weights = FP32_BYTES * p + 3 * HALF_BYTES * p  # cast: read fp32, write; read x2
    grads = FP32_BYTES * p
    scaler = 2 * FP32_BYTES * p if precision == "amp" else 0
    return weights + grads + optimizer + scaler + 2 * activation_bytes + 2 * input_bytes


def peak_memory_bytes(
    params: int,
    activation_bytes: int,
    input_bytes: int,
    largest_activation_bytes: int,
    precision: str = "fp32",
) -> int:
    """Estimated peak memory of a training step: weights, grads, momentum, saved
    activations and input, the 2-byte weight copy under amp/bf16, and a workspace of
    2x the largest saved activation + WORKSPACE_FIXED_BYTES."""
    _check_precision(precision)
    state = 3 * FP32_BYTES * params  # params, grads (conservatively in full), momentum
    copy = HALF_BYTES * params if precision in ("amp", "bf16") else 0
    workspace = 2 * largest_activation_bytes + WORKSPACE_FIXED_BYTES
    return state + copy + activation_bytes + input_bytes + workspace


# --------------------------------------------------------------------------- traffic


def _alias_outputs(func: Any) -> bool:
    """True for view ops (outputs alias an input without writing it): no data moves."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return False
    for ret in schema.returns:
        info = ret.alias_info
        if info is not None and not info.is_write:
            return True
    return False


def trace_traffic(model: nn.Module, x: torch.Tensor) -> list[dict]:
    """Every data-moving aten op of one real train-mode forward of ``model(x)``.

    Returns one record per op: ``inputs`` and ``outputs`` as lists of
    ``(storage key, bytes, kind, fixed)``, kind ``param``, ``input``, ``act`` or
    ``other`` (integer/bool tensors and buffers); ``fixed`` marks what does not grow
    with the batch (weights, buffers, 0/1-dim tensors such as per-channel statistics).
    Storages are keyed by address, and every tensor seen is kept alive until the end,
    so no address is reused for another.
    Views (outputs that alias an input) move nothing and are skipped. Buffers and
    the train/eval mode are restored afterwards.
    """
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    buffers = {b.untyped_storage().data_ptr() for b in model.buffers()}
    image = x.untyped_storage().data_ptr()
    records: list[dict] = []
    keep: list[torch.Tensor] = []

    def describe(t: torch.Tensor) -> tuple[int, int, str, bool]:
        s = t.untyped_storage()
        ptr = s.data_ptr()
        if ptr in params:
            kind = "param"
        elif ptr == image:
            kind = "input"
        elif ptr in buffers or not t.is_floating_point():
            kind = "other"
        else:
            kind = "act"
        fixed = kind in ("param", "other") and ptr in params | buffers or t.dim() <= 1
        return ptr, int(s.nbytes()), kind, fixed

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if _alias_outputs(func):
                return out
            ins = [a for a in tree_flatten((args, kwargs or {}))[0] if isinstance(a, torch.Tensor)]
            outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
            ins = [t for t in ins if t.untyped_storage().nbytes() > 0]
            outs = [t for t in outs if t.untyped_storage().nbytes() > 0]
            if ins or outs:
                keep.extend(ins + outs)
                records.append(
                    {
                        "op": str(func),
                        "inputs": list(dict.fromkeys(describe(t) for t in ins)),
                        "outputs": list(dict.fromkeys(describe(t) for t in outs)),
                    }
                )
            return out

    with (
        _preserved_state(model),
        warnings.catch_warnings(),
        torch.enable_grad(),
        Recorder(),
    ):
        warnings.simplefilter("ignore")
        model.train()
        out = model(x)
    del out
    keep.clear()
    return records


def traffic_table(records: Sequence[dict], batch_size: int, probe: int) -> list[list[int | str]]:
    """The per-layer model's table (see :mod:`dnnroofline.traffic`) from traced op records.

    Accesses per tensor: forward, one per op that reads or writes it; backward, per op
    with a weight or activation input: saved activation inputs read, activation-input
    gradients written, output gradients read, weights read and weight gradients
    written. Bytes are scaled from ``probe`` images to ``batch_size`` (weights,
    buffers and 0/1-dim tensors excepted; those are recorded at their own size).
    """
    size: dict[tuple[str, int], tuple[int, str, bool]] = {}
    fwd: Counter[tuple[str, int]] = Counter()
    bwd: Counter[tuple[str, int]] = Counter()
    for rec in records:
        for ptr, nbytes, kind, fixed in list(rec["inputs"]) + list(rec["outputs"]):
            size.setdefault(("t", ptr), (nbytes, kind, fixed))
            fwd[("t", ptr)] += 1
        ins = rec["inputs"]
        if not any(kind in ("param", "act") for _, _, kind, _ in ins):
            continue  # buffer updates, integer bookkeeping, ops on the image alone
        for ptr, nbytes, kind, fixed in ins:
            if kind in ("act", "input", "other"):
                bwd[("t", ptr)] += 1  # the saved input
            if kind == "act":
                size.setdefault(("g", ptr), (nbytes, "act_grad", fixed))
                bwd[("g", ptr)] += 1  # input gradient written
            if kind == "param":
                bwd[("t", ptr)] += 1  # weight read (input gradient needs it)
                size.setdefault(("w", ptr), (nbytes, "param_grad", True))
                bwd[("w", ptr)] += 1  # weight gradient written
        for ptr, nbytes, kind, fixed in rec["outputs"]:
            if kind == "act":
                size.setdefault(("g", ptr), (nbytes, "act_grad", fixed))
                bwd[("g", ptr)] += 1  # output gradient read
    rows: Counter[tuple[int, str, int, int]] = Counter()
    for key, (nbytes, kind, fixed) in size.items():
        b = nbytes if fixed else _scale(nbytes, batch_size, probe)
        rows[(b, kind, fwd[key], bwd[key])] += 1
    return [[b, kind, f, g, n] for (b, kind, f, g), n in sorted(rows.items())]


def traffic_of_model(model: nn.Module, x: torch.Tensor, batch_size: int) -> dict:
    """The ``traffic`` block of the complexity JSON: method and table at ``batch_size``."""
    from dnnroofline import traffic as tr

    records = trace_traffic(model, x)
    return {
        "method": tr.METHOD,
        "ops": len(records),
        "table": traffic_table(records, batch_size, int(x.shape[0])),
    }


# --------------------------------------------------------------------------- whole model


def _scale(count: int, batch_size: int, probe: int) -> int:
    return (count * batch_size + probe // 2) // probe


def count_params(model: nn.Module) -> int:
    """Unique parameters (shared tensors counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def complexity_of_model(
    model: nn.Module,
    *,
    batch_size: int,
    image_size: int,
    in_channels: int = IN_CHANNELS,
    arch: str | None = None,
    probe_batch: int | None = None,
) -> dict:
    """The complexity contract for ``model`` trained on ``batch_size`` square images.

    Counts are taken in train mode on a probe batch and scaled linearly to
    ``batch_size``: one image by default, two where train-mode batch norm needs more
    than one value per channel (a 1x1 feature map, e.g. resnet18 at 32x32).
    Raises InputError when the model cannot run at this image size.
    """
    from dnnroofline import traffic as tr

    if not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"--batch-size {batch_size!r}: must be a positive integer")
    if not isinstance(image_size, int) or image_size < 1:
        raise InputError(f"--image-size {image_size!r}: must be a positive integer")
    name = arch or type(model).__name__
    probes = [probe_batch] if probe_batch else [1, 2]
    gen = torch.Generator().manual_seed(0)
    with _preserved_state(model):
        model.train()
        for i, probe_batch in enumerate(probes):
            x = torch.randn(probe_batch, in_channels, image_size, image_size, generator=gen)
            try:
                flops, saved = count_flops_and_saved_tensors(model, x)
                break
            except ValueError as exc:
                if i + 1 < len(probes) and "more than 1 value per channel" in str(exc):
                    continue
                raise ModelCannotRun(
                    f"--arch {name!r} at --image-size {image_size}: {exc}"
                ) from exc
            except (RuntimeError, AssertionError) as exc:
                raise ModelCannotRun(
                    f"--arch {name!r} cannot train on {image_size}x{image_size} images "
                    f"(--image-size {image_size}): {exc}"
                ) from exc

    def sc(n: int) -> int:
        return _scale(n, batch_size, probe_batch)

    by_type = {
        k: {"forward": sc(v["forward"]), "backward": sc(v["backward"])}
        for k, v in flops.by_layer_type.items()
    }
    params = count_params(model)
    forward = sum(v["forward"] for v in by_type.values())
    backward = sum(v["backward"] for v in by_type.values())
    optimizer = OPTIMIZER_FLOPS_PER_PARAM * params
    input_bytes = batch_size * in_channels * image_size * image_size * FP32_BYTES

    by_precision = {}
    for prec in PRECISIONS:
        act = saved.scaled(batch_size, probe_batch, prec)
        half = prec in ("amp", "bf16") and saved.largest_is_float
        largest = sc(saved.largest_bytes // 2 if half else saved.largest_bytes)
        by_precision[prec] = {
            "activation_bytes": act,
            "min_dram_bytes_per_step": min_dram_bytes_per_step(params, act, input_bytes, prec),
            "peak_memory_bytes": peak_memory_bytes(params, act, input_bytes, largest, prec),
            "weight_copy_bytes": HALF_BYTES * params if prec in ("amp", "bf16") else 0,
        }
    fp32 = by_precision["fp32"]
    largest_fp32 = sc(saved.largest_bytes)
    x = torch.randn(probe_batch, in_channels, image_size, image_size, generator=gen)
    traffic = traffic_of_model(model, x, batch_size)
    for prec in PRECISIONS:
        by_precision[prec]["traffic_bytes_no_cache"] = tr.step_traffic_bytes(
            traffic, params, llc_bytes=None, precision=prec
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "ok",
        "message": None,
        "arch": name,
        "batch_size": batch_size,
        "image_size": image_size,
        "in_channels": in_channels,
        "params": params,
        "bytes": {
            "params": FP32_BYTES * params,
            "grads": FP32_BYTES * params,
            "optimizer_state": FP32_BYTES * params,
            "activations": fp32["activation_bytes"],
            "input": input_bytes,
            "workspace": 2 * largest_fp32 + WORKSPACE_FIXED_BYTES,
        },
        "flops": {
            "forward": forward,
            "backward": backward,
            "optimizer": optimizer,
            "train_step": forward + backward + optimizer,
            "by_layer_type": by_type,
        },
        "min_dram_bytes_per_step": fp32["min_dram_bytes_per_step"],
        "peak_memory_bytes": fp32["peak_memory_bytes"],
        "by_precision": by_precision,
        "traffic": traffic,
        "optimizer": dict(OPTIMIZER),
        "probe_batch": probe_batch,
        "saved_tensors_per_probe": saved.count,
        "uncounted_ops": flops.uncounted_ops,
        "method": METHOD,
    }


def complexity(
    arch: str,
    batch_size: int,
    image_size: int,
    num_classes: int = 1000,
    factory: str | None = None,
    kwargs: dict | None = None,
) -> dict:
    """The complexity contract of torchvision model ``arch`` (``weights=None``), or of the
    user's model built by ``factory`` (``module:callable``) under the name ``arch``."""
    if factory:
        from dnnroofline.models import build_custom

        model = build_custom(factory, kwargs, num_classes)
    else:
        model = build_model(arch, num_classes=num_classes)
    result = complexity_of_model(model, batch_size=batch_size, image_size=image_size, arch=arch)
    result["num_classes"] = num_classes
    return result


def failed_complexity(
    arch: str, batch_size: int, image_size: int, num_classes: int, message: str
) -> dict:
    """The complexity record of a (model, batch) that cannot train at this image size.

    Keeps the keys that name it (``arch``, ``batch_size``, ``image_size``) and the
    reason; every count is absent. Aggregation needs no counts for a group whose runs
    all failed, and refuses, naming this file, a group with an ok run.
    """
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "error",
        "message": message,
        "arch": arch,
        "batch_size": batch_size,
        "image_size": image_size,
        "num_classes": num_classes,
        "params": None,
        "flops": None,
        "bytes": None,
        "min_dram_bytes_per_step": None,
        "peak_memory_bytes": None,
        "by_precision": None,
        "method": METHOD,
    }
