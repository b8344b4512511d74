"""The op-rule registry: what one aten op of a training step is, costs and moves.

:func:`describe` takes an aten op as dispatch sees it (the op, its arguments and
outputs) and gives its class (:data:`dnnroofline.estimate.op_classes.OP_CLASSES`), its
layer type (the complexity JSON's ``by_layer_type`` keys, :data:`LAYER_TYPES`), its
FLOPs, the bytes it reads and writes, its dtype and its shape features. The op
inventory, the complexity JSON's FLOPs by layer type and its traffic table all read the
step through it, so that they cannot drift apart.

FLOPs (one add, multiply, compare, divide or transcendental is 1; an FMA is 2):

============================  ==========================================================
op                            FLOPs
============================  ==========================================================
convolution                   2 * MACs, MACs = N * |W| * output positions; + 1 per output
                              for a bias
convolution_backward          by its output mask: input gradient 2 * MACs, weight
                              gradient 2 * MACs, bias gradient 1 per output
mm, bmm / addmm, baddbmm      2 * MACs / + 1 per output for the added term
fused attention               QK^T and PV products 2 * MACs, softmax 5 and a scale 1 per
                              score; backward twice the products
batch/layer/group norm        5 per element (train), 2 (eval); backward 9 per element
max pool / its backward       window - 1 compares per output / 1 per output
avg pool (and backward)       window per output
mean, adaptive average pool   1 per input element (backward 1 per gradient element)
sum, amax, ...                input - output elements
softmax, log-softmax          5 per element (backward too)
NLL loss                      1 per label
activations                   per element (:data:`ACTIVATION_FLOPS`), backward as forward
elementwise arithmetic        1 per output element (:data:`ELEMENTWISE_FLOPS`), + 1 with
                              an ``alpha`` scale, so SGD's updates are 6 per parameter
dropout                       2 per element
GradScaler unscale            2 per gradient element
compares, copies, fills       0
============================  ==========================================================

Only floating-point arithmetic is a FLOP: an op whose outputs are integers (batch
norm's ``num_batches_tracked += 1``) counts 0. Ops without a rule have ``flops`` None.

Bytes: every tensor argument read in full and every output (and argument written in
place) written in full, each tensor once per op, no cache credit; an expanded argument
counts its storage. Views, metadata-only ops, allocations and ops that write no element
move nothing: :func:`describe` gives None for them, and they are in no inventory.
"""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

import torch

# Per-element forward FLOPs of unary activations; backward: 1x forward.
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
# fmt: off
#: Elementwise arithmetic: FLOPs per output element.
ELEMENTWISE_FLOPS: dict[str, int] = {
    **dict.fromkeys((
        "add", "sub", "rsub", "mul", "div", "pow", "exp", "log", "sqrt", "rsqrt", "neg",
        "abs", "reciprocal", "square", "clamp_min", "clamp_max", "maximum", "minimum",
        "erf", "sin", "cos", "where", "sign",
    ), 1),
    "clamp": 2, "addcmul": 2, "addcdiv": 2, "lerp": 2,
}
# fmt: on
SOFTMAX_FLOPS = 5
NORM_FWD_FLOPS = 5
NORM_BWD_FLOPS = 9
BN_EVAL_FWD_FLOPS = 2
DROPOUT_FLOPS = 2
#: GradScaler's unscale multiplies each gradient element and checks it is finite.
UNSCALE_FLOPS_PER_ELEMENT = 2

#: The layer types of the complexity JSON's ``by_layer_type`` (``loss`` and
#: ``optimizer`` are the step's, not the model's: complexity leaves them out).
LAYER_TYPES: tuple[str, ...] = (
    "conv",
    "conv_grouped",
    "conv_depthwise",
    "linear",
    "matmul",
    "batchnorm",
    "norm",
    "pool",
    "activation",
    "softmax",
    "elementwise",
    "dropout",
    "loss",
    "optimizer",
)
#: Torch functions whose every op belongs to one layer type, whatever its own rule
#: (dropout on a CPU is a bernoulli_, a div_ and a mul).
CALL_LAYERS: dict[str, str] = {
    **dict.fromkeys(("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout"), "dropout"),
    "feature_alpha_dropout": "dropout",
}

# aten op names (without overload) by rule.
_CONV = {"convolution", "convolution_backward", "_convolution"}
_GEMM = {"mm", "addmm", "bmm", "baddbmm"}
_ATTENTION_PREFIX = "_scaled_dot_product"
_NORM_FWD = {
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional",
    "cudnn_batch_norm",
    "miopen_batch_norm",
    "native_layer_norm",
    "native_group_norm",
}
_NORM_BWD = {
    "native_batch_norm_backward",
    "cudnn_batch_norm_backward",
    "miopen_batch_norm_backward",
    "native_layer_norm_backward",
    "native_group_norm_backward",
}
_BN_EVAL = {"_native_batch_norm_legit_no_training"}
_MAX_POOL = {"max_pool2d_with_indices", "max_pool3d_with_indices", "max_pool1d"}
_MAX_POOL_BWD = {"max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward"}
_AVG_POOL = {"avg_pool2d", "avg_pool3d", "avg_pool2d_backward", "avg_pool3d_backward"}
_MEAN_LIKE = {"mean", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_avg_pool1d"}
_MEAN_LIKE_BWD = {"_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward"}
_SUM_LIKE = {"sum", "amax", "amin", "max", "min", "argmax", "argmin"}
_SOFTMAX = {
    "_softmax",
    "_safe_softmax",
    "_log_softmax",
    "_softmax_backward_data",
    "_log_softmax_backward_data",
}
_LOSS = {"nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward"}
_UNSCALE = {"_amp_foreach_non_finite_check_and_unscale_"}
_SCALE_UPDATE = {"_amp_update_scale_"}
_DROPOUT = {"native_dropout", "native_dropout_backward"}
# fmt: off
# Comparisons and masks: no arithmetic, elementwise traffic.
_COMPARE = {
    "eq", "ne", "lt", "le", "gt", "ge", "isfinite", "isnan", "logical_not", "masked_fill",
    "masked_fill_",
}
# Data movement and creation: 0 FLOPs.
_COPY = {
    "_to_copy", "clone", "copy_", "copy", "fill_", "fill", "zero_", "full", "full_like",
    "zeros", "zeros_like", "ones", "ones_like", "new_zeros", "new_ones", "new_full",
    "scalar_tensor", "cat", "stack", "constant_pad_nd", "index", "index_select", "gather",
    "scatter", "slice_backward", "select_backward", "index_put_", "index_put", "contiguous",
    "bernoulli_", "bernoulli", "rand_like", "randn_like", "uniform_", "normal_", "roll",
    "flip", "repeat", "channel_shuffle", "pixel_shuffle", "_foreach_zero_", "_foreach_copy_",
}
# fmt: on
# Creation ops that write nothing (an allocation), and views whose schema does not say
# so: dropped like views.
_NO_DATA = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "_unsafe_view",
    "lift_fresh",
    "alias",
    "detach",
}
# In-place ops that change a tensor's metadata only.
_METADATA_ONLY = {"as_strided_", "resize_", "set_"}
_CLASS_BY_NAME: dict[str, str] = {
    **dict.fromkeys(_GEMM, "gemm"),
    **dict.fromkeys(_NORM_FWD | _NORM_BWD | _BN_EVAL, "normalization"),
    **dict.fromkeys(_MAX_POOL | _MAX_POOL_BWD | _AVG_POOL, "pooling"),
    **dict.fromkeys(_MEAN_LIKE | _MEAN_LIKE_BWD | _SUM_LIKE | _SOFTMAX | _LOSS, "reduction"),
    **dict.fromkeys(_UNSCALE | _SCALE_UPDATE, "optimizer"),
    **dict.fromkeys(_DROPOUT | _COMPARE, "elementwise"),
    **dict.fromkeys(_COPY, "copy"),
}


@dataclass
class OpInfo:
    """One data-moving aten op, as the registry describes it."""

    name: str  # "aten.convolution.default"
    cls: str  # one of OP_CLASSES
    kind: str | None  # convolutions: dense, grouped or depthwise
    layer: str | None  # one of LAYER_TYPES; None for data movement
    flops: int | None  # None: no rule
    dtype: str
    bytes_read: int
    bytes_written: int
    shape: dict = field(default_factory=dict)
    # the sizes of the outputs the op allocates (at least FRESH_FLOOR_BYTES)
    fresh_bytes: list[int] = field(default_factory=list)
    reads: list[torch.Tensor] = field(default_factory=list, repr=False)
    writes: list[torch.Tensor] = field(default_factory=list, repr=False)

    def record(self, phase: str) -> dict:
        """The op as the inventory lists it (JSON-ready)."""
        return {
            "name": self.name,
            "phase": phase,
            "class": self.cls,
            "kind": self.kind,
            "layer": self.layer,
            "dtype": self.dtype,
            "flops": int(self.flops or 0),
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "shape": self.shape,
            **({"fresh_bytes": self.fresh_bytes} if self.fresh_bytes else {}),
        }


# --------------------------------------------------------------------------- tensors


#: Allocated outputs smaller than this are left out of an op's ``fresh_bytes``: no
#: allocator maps smaller blocks from the OS on every call, and the list stays short.
FRESH_FLOOR_BYTES = 2**20


def base_name(func: Any) -> str:
    """``aten.relu_.default`` -> ``relu_``."""
    return func._schema.name.split("::")[-1]


def tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors in an op's arguments or outputs (tensors, lists, tuples, dicts)."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        tree = tree.values()
    elif not isinstance(tree, (list, tuple)):
        return []
    return [t for item in tree for t in tensors(item)]


def storage_key(t: torch.Tensor) -> int:
    """The identity of a tensor's storage (stable while the tensor lives; fake tensors
    have no data pointer)."""
    return t.untyped_storage()._cdata


def _unique(ts: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor once (the same storage, offset, shape and strides passed twice is one)."""
    seen: dict[tuple, torch.Tensor] = {}
    for t in ts:
        seen.setdefault((storage_key(t), t.storage_offset(), tuple(t.shape), t.stride()), t)
    return list(seen.values())


def nbytes(t: torch.Tensor) -> int:
    """Bytes of a tensor read or written in full: an expanded view counts its storage."""
    return min(t.numel() * t.element_size(), int(t.untyped_storage().nbytes()))


def _written_args(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The arguments an op writes in place (``Tensor(a!)`` in its schema)."""
    written = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = kwargs.get(arg.name, args[i] if i < len(args) else None)
        written.extend(tensors(value))
    if base_name(func) in ("native_batch_norm", "cudnn_batch_norm") and args[5]:
        written.extend(tensors(args[3:5]))  # running stats: updated in place, schema silent
    return written


def fresh_outputs(out: Any, kept: list[torch.Tensor]) -> list[int]:
    """The sizes (bytes, at least :data:`FRESH_FLOOR_BYTES`, largest first) of the
    tensors in ``out`` whose storage is none of ``kept``'s: the blocks a call allocated,
    which a CPU pays for in pages fresh from the OS where they are large
    (:mod:`dnnroofline.measure.fresh_pages`)."""
    keep = {storage_key(t) for t in kept}
    sizes = {
        storage_key(t): int(t.untyped_storage().nbytes())
        for t in tensors(out)
        if storage_key(t) not in keep
    }
    return sorted((b for b in sizes.values() if b >= FRESH_FLOOR_BYTES), reverse=True)


def is_view(func: Any) -> bool:
    """Views and metadata-only ops: outputs alias an input without writing it."""
    if any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns):
        return True
    return base_name(func) in _NO_DATA | _METADATA_ONLY


def _dtype_name(ins: list[torch.Tensor], outs: list[torch.Tensor]) -> str:
    """The dtype an op computes in: its first floating-point output's, else its first
    floating-point input's, else its first tensor's."""
    for t in [*outs, *ins]:
        if t.is_floating_point():
            return str(t.dtype).removeprefix("torch.")
    return str((outs or ins)[0].dtype).removeprefix("torch.")


def _dims(t: torch.Tensor) -> list[int]:
    return [int(d) for d in t.shape]


# --------------------------------------------------------------------------- rules


def _conv(name: str, args: tuple, out: Any) -> tuple[str, str, int, dict]:
    """(class, kind, FLOPs, shape) of a convolution or its backward (by its output mask)."""
    backward = name == "convolution_backward"
    grad_out = args[0] if backward else out
    x, w = args[1] if backward else args[0], args[2] if backward else args[1]
    transposed, groups = bool(args[7 if backward else 6]), int(args[9 if backward else 8])
    spatial = _dims(x if transposed else grad_out)[2:]
    macs = _dims(x)[0] * w.numel() * math.prod(spatial)
    n_out = grad_out.numel()
    # forward: no gradient, a bias or not; backward: which gradients it computes
    mask = [bool(m) for m in args[10]] if backward else [False, False, args[2] is not None]
    products = mask[0] + mask[1] if backward else 1
    flops = 2 * macs * products + (n_out if mask[2] else 0)
    if groups == 1:
        kind = "dense"
    elif _dims(w)[1] == 1 and not transposed:
        kind = "depthwise"
    else:
        kind = "grouped"
    in_hw, out_hw, k_hw = _dims(x)[2:] or [1], _dims(grad_out)[2:] or [1], _dims(w)[2:] or [1]
    shape = {
        "n": _dims(x)[0],
        "c_in": _dims(x)[1],
        "c_out": _dims(grad_out)[1],
        "h": in_hw[0],
        "w": in_hw[-1],
        "h_out": out_hw[0],
        "w_out": out_hw[-1],
        "kh": k_hw[0],
        "kw": k_hw[-1],
        "stride": int(args[4 if backward else 3][0]),
        "groups": groups,
        "input_grad": mask[0],
        "weight_grad": mask[1],
        "bias": mask[2],
    }
    return ("conv_depthwise" if kind == "depthwise" else "conv"), kind, flops, shape


def _gemm(name: str, args: tuple, out: torch.Tensor) -> tuple[int, dict]:
    """(FLOPs, shape) of mm, addmm, bmm, baddbmm: 2 per MAC, + 1 per output for a bias."""
    a, b = (args[1], args[2]) if name in ("addmm", "baddbmm") else (args[0], args[1])
    *batch, m, k = _dims(a)
    n = _dims(b)[-1]
    shape = {"m": m, "n": n, "k": k} | ({"batch": batch[0]} if batch else {})
    flops = 2 * math.prod(batch) * m * n * k
    return flops + (out.numel() if name in ("addmm", "baddbmm") else 0), shape


def _attention(name: str, args: tuple) -> tuple[int, dict]:
    """(FLOPs, shape) of a fused attention: QK^T and PV products, a softmax of 5 and a
    scale per score; backward twice the products."""
    backward = name.endswith("_backward")
    q, k, v = args[1:4] if backward else args[0:3]
    *batch, n_q, e = _dims(q)
    n_k, e_v = _dims(k)[-2], _dims(v)[-1]
    scores = math.prod(batch) * n_q * n_k
    macs = scores * (e + e_v)
    flops = (4 if backward else 2) * macs + (SOFTMAX_FLOPS + 1) * scores
    return flops, {"m": n_q, "n": n_k, "k": e, "batch": math.prod(batch)}


def _window(kernel: Any) -> list[int]:
    k = list(kernel) if isinstance(kernel, (list, tuple)) else [kernel]
    return k * 2 if len(k) == 1 else k


def _activation_per_element(name: str, kwargs: dict) -> int | None:
    """FLOPs per element of an activation or of its backward (1x the forward), else None."""
    root = name.removesuffix("_backward").rstrip("_")
    if root == "gelu":
        return GELU_TANH_FLOPS if kwargs.get("approximate") == "tanh" else ACTIVATION_FLOPS[root]
    return ACTIVATION_FLOPS.get(root)


def _elementwise_per_element(name: str, kwargs: dict) -> int | None:
    """FLOPs per output element of elementwise arithmetic (+ 1 for an alpha scale)."""
    per = ELEMENTWISE_FLOPS.get(name.removeprefix("_foreach_").rstrip("_"))
    if per is None:
        return None
    return per + (0 if kwargs.get("alpha", 1) == 1 else 1)


def _table_flops(name: str, args: tuple, outs: list) -> int | None:
    """FLOPs of a normalization, pooling, reduction or bookkeeping op, else None."""
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    n_out = outs[0].numel() if outs else 0
    if name in _NORM_FWD:
        training = name not in ("native_batch_norm", "cudnn_batch_norm") or bool(args[5])
        return (NORM_FWD_FLOPS if training else BN_EVAL_FWD_FLOPS) * x.numel()
    if name in _NORM_BWD:
        return NORM_BWD_FLOPS * args[1].numel()
    if name in _BN_EVAL:
        return BN_EVAL_FWD_FLOPS * x.numel()
    if name in _MAX_POOL:
        return (math.prod(_window(args[1])) - 1) * n_out
    if name in _MAX_POOL_BWD:
        return x.numel()  # one add per forward output, routed to its argmax
    if name in _AVG_POOL:
        backward = name.endswith("_backward")
        per = math.prod(_window(args[2] if backward else args[1]))
        return per * (x if backward else outs[0]).numel()
    if name in _MEAN_LIKE:
        return x.numel()
    if name in _MEAN_LIKE_BWD:
        return args[1].numel()
    if name in _SUM_LIKE:
        return max(x.numel() - n_out, 0)
    if name in _SOFTMAX:
        return SOFTMAX_FLOPS * n_out
    if name in _LOSS:
        return args[1 if name.endswith("_forward") else 2].numel()  # one per label
    if name in _DROPOUT:
        return DROPOUT_FLOPS * x.numel()
    if name in _UNSCALE:
        return UNSCALE_FLOPS_PER_ELEMENT * sum(g.numel() for g in args[0])
    if name in _SCALE_UPDATE or name in _COPY or name in _COMPARE:
        return 0  # scalar bookkeeping; data movement; comparisons and masks
    return None


def _other_flops(name: str, args: tuple, kwargs: dict, written: list) -> int | None:
    """FLOPs of any op but a convolution or GEMM, or None (no rule)."""
    flops = _table_flops(name, args, written)
    if flops is not None:
        return flops
    per = _activation_per_element(name, kwargs)
    if per is None:
        per = _elementwise_per_element(name, kwargs)
    if per is None:
        return None
    floats = [t for t in written if t.is_floating_point()]
    return per * sum(t.numel() for t in floats)  # integer arithmetic is no FLOP


# --------------------------------------------------------------------------- features


def _norm_shape(name: str, args: tuple) -> dict:
    """n, c, spatial of a normalization (layer norm: the features are c, spatial 1)."""
    if name == "native_group_norm":
        return {"n": int(args[3]), "c": int(args[4]), "spatial": int(args[5])}
    if name == "native_group_norm_backward":
        return {"n": int(args[5]), "c": int(args[6]), "spatial": int(args[7])}
    if name.startswith("native_layer_norm"):
        x, normalized = (args[1], args[2]) if name.endswith("_backward") else (args[0], args[1])
        c = math.prod(int(d) for d in normalized)
        return {"n": x.numel() // max(c, 1), "c": c, "spatial": 1}
    x = args[1] if name.endswith("_backward") else args[0]
    dims = _dims(x)
    return {"n": dims[0], "c": dims[1] if len(dims) > 1 else 1, "spatial": math.prod(dims[2:])}


def _pool_shape(name: str, args: tuple, outs: list) -> dict:
    """n, c, h, w, h_out, w_out, kh, kw, stride of a windowed pooling or its backward."""
    backward = name.endswith("_backward")
    x, y = (args[1], args[0]) if backward else (args[0], outs[0])
    kernel = _window(args[2] if backward else args[1])
    at = 3 if backward else 2
    stride = list(args[at]) if len(args) > at and list(args[at]) else kernel
    dims, out = _dims(x), _dims(y)
    return {
        "n": dims[0] if len(dims) == 4 else 1,
        "c": dims[-3] if len(dims) >= 3 else 1,
        "h": dims[-2] if len(dims) >= 2 else 1,
        "w": dims[-1],
        "h_out": out[-2] if len(out) >= 2 else 1,
        "w_out": out[-1],
        "kh": int(kernel[0]),
        "kw": int(kernel[-1]),
        "stride": int(stride[0]),
    }


def _elementwise_shape(ins: list, outs: list, written: list) -> dict:
    numel = max((t.numel() for t in outs), default=0)
    return {
        "numel": numel,
        "inputs": len(ins),
        "in_place": bool(written),
        "broadcast": any(t.numel() < numel for t in ins),
    }


def _features(cls: str, name: str, args: tuple, ins: list, outs: list, extra: dict) -> dict:
    """The shape features of an op of class ``cls`` (conv and GEMM have theirs already)."""
    if extra:
        return extra
    if cls == "normalization":
        return _norm_shape(name, args)
    if cls == "pooling":
        return _pool_shape(name, args, outs)
    if cls == "reduction":
        return {
            "numel_in": ins[0].numel() if ins else 0,
            "numel_out": outs[0].numel() if outs else 0,
        }
    return {"numel": sum(t.numel() for t in outs)}  # copy


# --------------------------------------------------------------------------- the registry


def own_layer(name: str, cls: str, kind: str | None, shape: dict, weight: bool) -> str | None:
    """The layer type of an op by its own rule (the recorder may know better: a dropout's
    ops, or the backward ops of a layer's autograd node)."""
    if cls in ("conv", "conv_depthwise"):
        return {"dense": "conv", "grouped": "conv_grouped"}.get(kind or "", "conv_depthwise")
    if cls == "gemm":
        return "linear" if weight and not name.startswith(_ATTENTION_PREFIX) else "matmul"
    if cls == "normalization":
        return "batchnorm" if "batch_norm" in name else "norm"
    if cls == "pooling":
        return "pool"
    if cls == "reduction":
        if name in _SOFTMAX:
            return "softmax"
        return "loss" if name in _LOSS else "pool"
    if cls == "elementwise":
        if name in _DROPOUT:
            return "dropout"
        return "activation" if _activation_per_element(name, {}) is not None else "elementwise"
    return "optimizer" if cls == "optimizer" else None


def describe(
    func: Any,
    args: tuple,
    kwargs: dict,
    out: Any,
    *,
    optimizer: bool = False,
    weights: Container[int] = (),
) -> OpInfo | None:
    """The registry's description of one aten op; None for a view, a metadata-only op,
    an allocation or an op that writes nothing. ``optimizer``: the op is in the
    optimizer's phase (class ``optimizer``, features numel and tensors).
    ``weights``: the storage keys of the weights (and of their copies): a GEMM with a
    weight operand is a ``linear`` layer, else a ``matmul``."""
    if func.namespace != "aten" or is_view(func):
        return None
    name = base_name(func)
    ins = _unique(tensors((args, kwargs)))
    written = _unique(_written_args(func, args, kwargs))
    returned = tensors(out)
    outs = _unique(returned + written)
    if not any(t.numel() for t in outs):
        return None  # queries (device, size), empty tensors: nothing written, no kernel
    first = returned or outs
    extra: dict = {}
    kind = None
    weight = False
    if name in _CONV:
        cls, kind, flops, extra = _conv(name, args, first[0])
    elif name in _GEMM or name.startswith(_ATTENTION_PREFIX):
        cls = "gemm"
        gemm = _attention if name.startswith(_ATTENTION_PREFIX) else _gemm
        flops, extra = gemm(name, args) if gemm is _attention else gemm(name, args, first[0])
        weight = any(storage_key(t) in weights for t in ins)
    else:
        flops = _other_flops(name, args, kwargs, first)
        cls = _CLASS_BY_NAME.get(name, "elementwise" if flops is not None else "copy")
    layer = own_layer(name, cls, kind, extra, weight)
    if optimizer:
        cls, layer = "optimizer", "optimizer"
        listed = name.startswith("_foreach_") or name in _UNSCALE
        count = len(args[0]) if listed and isinstance(args[0], (list, tuple)) else 1
        shape = {"numel": sum(t.numel() for t in outs), "tensors": count}
    elif cls == "elementwise":
        shape = _elementwise_shape(ins, first, written)
    else:
        shape = _features(cls, name, args, ins, first, extra)
    return OpInfo(
        name=str(func),
        cls=cls,
        kind=kind,
        layer=layer,
        flops=flops,
        dtype=_dtype_name(ins, outs),
        bytes_read=sum(nbytes(t) for t in ins),
        bytes_written=sum(nbytes(t) for t in outs),
        shape=shape,
        fresh_bytes=fresh_outputs(returned, ins + written),
        reads=ins,
        writes=outs,
    )
