"""The op inventory of one training step: every aten operator, its class, FLOPs and bytes.

``op_inventory(arch_or_model, precision=..., batch_size=..., image_size=...)`` returns the
ops JSON of the issue-28 contract (docs/contracts.md): one fake training step, recorded
at dispatch, each op with its class (:mod:`dnnroofline.model.op_classes`), FLOPs, bytes
read and written and the dtype it computes in under that precision; identical ops merged
with a count.

Method (also written into every result as ``method``):

* **A real step on fake tensors.** The model's parameters, the image batch and the labels
  are ``FakeTensor``s (``torch._subclasses.fake_tensor.FakeTensorMode``): every op runs
  its shape logic and no arithmetic, so a batch of 4096 costs what a batch of 1 does.
  The step is the driver's: forward, cross-entropy loss (Inception/GoogLeNet aux logits
  weighted 0.4), backward, SGD (momentum 0.9, weight decay 1e-4, ``foreach=False``),
  ``zero_grad(set_to_none=True)``; under amp the loss is scaled by a GradScaler, whose
  unscale, inf check and scale update run too. The momentum buffers exist before the
  step, as in every timed step after the first.
* **After autocast.** A ``TorchDispatchMode`` sees the aten ops autocast leaves (its
  casts included); autocast on device "cpu": amp -> float16, bf16 -> bfloat16, fp32 and
  tf32 do not autocast (tf32 changes how a GEMM computes, not which ops run).
* **FLOPs** by the rules of :mod:`dnnroofline.model.flop_count` at aten level: 2 per MAC,
  a convolution's backward by its output mask (input gradient 2*MACs, weight gradient
  2*MACs, bias gradient 1 per output), batch norm 5 per element forward and 9 backward,
  activations per element (their backward as much as their forward), an add with a scale
  (``alpha``) 2 per element, so SGD's four updates are 6 per parameter; GradScaler's
  unscale and inf check 2 per gradient element. Ops without a rule count 0 and are
  listed in ``uncounted_ops``.
* **Bytes**: every tensor argument read in full and every output (and argument the op
  writes in place) written in full, each tensor once per op, no cache credit; a
  broadcast or expanded argument counts its storage, not its view. Views and
  metadata-only ops move nothing and are dropped.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from dnnroofline.errors import InputError
from dnnroofline.model import flop_count as fc
from dnnroofline.model.complexity import (
    _METADATA_ONLY,
    IN_CHANNELS,
    OPTIMIZER,
    OPTIMIZER_FLOPS_PER_PARAM,
    SCHEMA_VERSION,
    ModelCannotRun,
    _alias_outputs,
    build_model,
)
from dnnroofline.model.op_classes import OP_CLASSES, PHASES
from dnnroofline.study.precisions import autocast_dtype, require_known

#: The learning rate changes the values of the update, never its ops.
_LR = 0.1
#: GradScaler's unscale multiplies each gradient element and checks it is finite.
UNSCALE_FLOPS_PER_ELEMENT = 2
#: Inception/GoogLeNet: the weight of an auxiliary head's loss (as the driver's).
AUX_LOSS_WEIGHT = 0.4

METHOD = (
    "One training step on fake tensors (torch FakeTensorMode: shapes, no arithmetic, "
    "so the batch costs nothing), every aten op recorded by a TorchDispatchMode after "
    "autocast (device cpu: amp float16, bf16 bfloat16; fp32/tf32 none): forward, "
    "cross-entropy loss, backward, SGD momentum "
    f"{OPTIMIZER['momentum']} weight decay {OPTIMIZER['weight_decay']} foreach=False "
    "(momentum buffers already there, as in every step after the first), GradScaler "
    "scale/unscale/inf check/update under amp. FLOPs by dnnroofline.model.flop_count's "
    "rules at aten level: 2 per MAC; convolution_backward by its output mask (grad input "
    "2*MACs, grad weight 2*MACs, grad bias 1 per output); batch/layer/group norm 5 per "
    "element, their backward 9; activations and their backward per element (relu 1, ...); "
    "elementwise 1 per output element, 2 with an alpha scale (SGD: "
    f"{OPTIMIZER_FLOPS_PER_PARAM} per parameter); softmax 5; mean/sum/adaptive average "
    "pooling 1 per input element; max pool k-1 compares per output, its backward 1; "
    f"unscale and inf check {UNSCALE_FLOPS_PER_ELEMENT} per gradient element; ops "
    "without a rule 0 (listed in uncounted_ops). Bytes: every tensor argument read in "
    "full, every output and in-place target written in full, each tensor once per op, "
    "no cache credit (an expanded argument counts its storage); views and metadata-only "
    "ops (views, empty, device queries) dropped. Left out: the data loader, the "
    "host-to-device copy, allocator and launch work, and a backend's fused or extra "
    "kernels (cuDNN's layout transposes, workspace)."
)

# --------------------------------------------------------------------------- op rules

# aten op names (without overload) by class, where the name alone decides it.
_CONV = {"convolution", "convolution_backward", "_convolution"}
_GEMM = {"mm", "addmm", "bmm", "baddbmm"}
_ATTENTION_PREFIX = "_scaled_dot_product"
_NORM_FWD = {
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional",
    "cudnn_batch_norm",
    "native_layer_norm",
    "native_group_norm",
}
_NORM_BWD = {
    "native_batch_norm_backward",
    "cudnn_batch_norm_backward",
    "native_layer_norm_backward",
    "native_group_norm_backward",
}
_BN_EVAL = {"_native_batch_norm_legit_no_training"}
_MAX_POOL = {"max_pool2d_with_indices", "max_pool3d_with_indices", "max_pool1d"}
_MAX_POOL_BWD = {"max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward"}
_AVG_POOL = {"avg_pool2d", "avg_pool3d", "avg_pool2d_backward", "avg_pool3d_backward"}
# Reductions: 1 FLOP per input element ("mean"/adaptive average), or n_in - n_out (sum).
_MEAN_LIKE = {"mean", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_avg_pool1d"}
_MEAN_LIKE_BWD = {"_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward"}
_SUM_LIKE = {"sum", "amax", "amin", "max", "min", "argmax", "argmin"}
_SOFTMAX = {"_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data"}
_LOSS = {"nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward"}
_UNSCALE = {"_amp_foreach_non_finite_check_and_unscale_"}
_SCALE_UPDATE = {"_amp_update_scale_"}
_DROPOUT = {"native_dropout", "native_dropout_backward"}
# Comparisons and masks: no arithmetic (as flop_count's zero-FLOP ops), elementwise traffic.
# fmt: off
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
    "flip", "repeat", "channel_shuffle", "pixel_shuffle",
}
# fmt: on
# Creation ops that write nothing (an allocation): dropped like views.
_ALLOCATION = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
_CLASS_BY_NAME: dict[str, str] = {
    **dict.fromkeys(_GEMM, "gemm"),
    **dict.fromkeys(_NORM_FWD | _NORM_BWD | _BN_EVAL, "normalization"),
    **dict.fromkeys(_MAX_POOL | _MAX_POOL_BWD | _AVG_POOL, "pooling"),
    **dict.fromkeys(_MEAN_LIKE | _MEAN_LIKE_BWD | _SUM_LIKE | _SOFTMAX | _LOSS, "reduction"),
    **dict.fromkeys(_UNSCALE | _SCALE_UPDATE, "optimizer"),
    **dict.fromkeys(_DROPOUT | _COMPARE, "elementwise"),
    **dict.fromkeys(_COPY, "copy"),
}


def _base(func: Any) -> str:
    """``aten.relu_.default`` -> ``relu_``."""
    return func._schema.name.split("::")[-1]


def _activation_per_element(name: str, kwargs: dict) -> int | None:
    """FLOPs per element of an activation or of its backward (1x the forward), else None."""
    root = name.removesuffix("_backward").rstrip("_")
    if root == "gelu":
        tanh = kwargs.get("approximate") == "tanh"
        return fc.GELU_TANH_FLOPS if tanh else fc.ACTIVATION_FLOPS["gelu"]
    return fc.ACTIVATION_FLOPS.get(root)


def _dims(t: torch.Tensor) -> list[int]:
    return [int(d) for d in t.shape]


def _conv_record(name: str, args: tuple, out: Any) -> tuple[str, str, int, dict]:
    """(class, kind, FLOPs, shape) of a convolution or its backward (by its output mask)."""
    backward = name == "convolution_backward"
    grad_out = args[0] if backward else out
    x, w = args[1] if backward else args[0], args[2] if backward else args[1]
    transposed, groups = bool(args[7 if backward else 6]), int(args[9 if backward else 8])
    spatial = _dims(x if transposed else grad_out)[2:]
    macs = _dims(x)[0] * w.numel() * math.prod(spatial)
    n_out = grad_out.numel()
    if backward:
        mask = args[10]
        flops = 2 * macs * (int(mask[0]) + int(mask[1])) + (n_out if mask[2] else 0)
    else:
        flops = 2 * macs + (n_out if args[2] is not None else 0)
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
    }
    return ("conv_depthwise" if kind == "depthwise" else "conv"), kind, flops, shape


def _gemm_record(name: str, args: tuple, out: torch.Tensor) -> tuple[int, dict]:
    """(FLOPs, shape) of mm, addmm, bmm, baddbmm: 2 per MAC, + 1 per output for a bias."""
    a, b = (args[1], args[2]) if name in ("addmm", "baddbmm") else (args[0], args[1])
    *batch, m, k = _dims(a)
    n = _dims(b)[-1]
    shape = {"m": m, "n": n, "k": k} | ({"batch": batch[0]} if batch else {})
    flops = 2 * math.prod(batch) * m * n * k
    return flops + (out.numel() if name in ("addmm", "baddbmm") else 0), shape


def _attention_record(name: str, args: tuple) -> tuple[int, dict]:
    """(FLOPs, shape) of a fused attention (flop_count's split: QK^T and PV products, a
    softmax of 5 per score and a scale per score; backward twice the products)."""
    backward = name.endswith("_backward")
    q, k, v = args[1:4] if backward else args[0:3]
    *batch, n_q, e = _dims(q)
    n_k, e_v = _dims(k)[-2], _dims(v)[-1]
    scores = math.prod(batch) * n_q * n_k
    macs = scores * (e + e_v)
    flops = (4 if backward else 2) * macs + (fc.SOFTMAX_FLOPS + 1) * scores
    return flops, {"m": n_q, "n": n_k, "k": e, "batch": math.prod(batch)}


def _window(kernel: Any) -> int:
    k = list(kernel) if isinstance(kernel, (list, tuple)) else [kernel]
    return math.prod(k * 2 if len(k) == 1 else k)


def _other_flops(name: str, args: tuple, kwargs: dict, outs: list) -> int | None:
    """FLOPs of a non-conv, non-GEMM op by flop_count's rules, or None (no rule)."""
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    n_out = outs[0].numel() if outs else 0
    if name in _NORM_FWD:
        training = name != "native_batch_norm" or bool(args[5])
        return (fc.NORM_FWD_FLOPS if training else fc.BN_EVAL_FWD_FLOPS) * x.numel()
    if name in _NORM_BWD:
        return fc.NORM_BWD_FLOPS * args[1].numel()
    if name in _BN_EVAL:
        return fc.BN_EVAL_FWD_FLOPS * x.numel()
    if name in _MAX_POOL:
        return (_window(args[1]) - 1) * n_out
    if name in _MAX_POOL_BWD:
        return x.numel()  # one add per forward output, routed to its argmax
    if name in _AVG_POOL:
        grad_or_out = x if name.endswith("_backward") else outs[0]
        return _window(args[2] if name.endswith("_backward") else args[1]) * grad_or_out.numel()
    if name in _MEAN_LIKE:
        return x.numel()
    if name in _MEAN_LIKE_BWD:
        return args[1].numel()
    if name in _SUM_LIKE:
        return max(x.numel() - n_out, 0)
    if name in _SOFTMAX:
        return fc.SOFTMAX_FLOPS * n_out
    if name in _LOSS:
        return args[1 if name.endswith("_forward") else 2].numel()  # one per label
    if name in _DROPOUT:
        return fc.DROPOUT_FLOPS * x.numel()
    if name in _UNSCALE:
        return UNSCALE_FLOPS_PER_ELEMENT * sum(g.numel() for g in args[0])
    if name in _SCALE_UPDATE or name in _COPY or name in _COMPARE:
        return 0  # scalar bookkeeping; data movement; comparisons and masks
    per = _activation_per_element(name, kwargs)
    if per is None:
        per = _elementwise_per_element(name, kwargs)
    return None if per is None else per * n_out


def _elementwise_per_element(name: str, kwargs: dict) -> int | None:
    """FLOPs per output element of an elementwise op (an alpha scale adds one), else None."""
    per = fc.ELEMENTWISE_FLOPS.get(name.rstrip("_"))
    if per is None:
        return None
    return per + (0 if kwargs.get("alpha", 1) == 1 else 1)


# --------------------------------------------------------------------------- recording


def _tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors in an op's arguments or outputs (tensors, lists, tuples, dicts)."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        tree = tree.values()
    elif not isinstance(tree, (list, tuple)):
        return []
    return [t for item in tree for t in _tensors(item)]


def _unique(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor once (the same storage, offset, shape and strides passed twice is one)."""
    seen: dict[tuple, torch.Tensor] = {}
    for t in tensors:
        key = (t.untyped_storage()._cdata, t.storage_offset(), tuple(t.shape), t.stride())
        seen.setdefault(key, t)
    return list(seen.values())


def _nbytes(t: torch.Tensor) -> int:
    """Bytes of a tensor read or written in full: an expanded view counts its storage."""
    return min(t.numel() * t.element_size(), int(t.untyped_storage().nbytes()))


def _written_args(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The arguments an op writes in place (``Tensor(a!)`` in its schema)."""
    written = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = kwargs.get(arg.name, args[i] if i < len(args) else None)
        written.extend(_tensors(value))
    if _base(func) in ("native_batch_norm", "cudnn_batch_norm") and args[5]:
        written.extend(_tensors(args[3:5]))  # running stats: updated in place, schema silent
    return written


def _dtype_name(ins: list[torch.Tensor], outs: list[torch.Tensor]) -> str:
    """The dtype an op computes in: its first floating-point output's, else its first
    floating-point input's, else its first tensor's."""
    for t in [*outs, *ins]:
        if t.is_floating_point():
            return str(t.dtype).removeprefix("torch.")
    return str((outs or ins)[0].dtype).removeprefix("torch.")


def _classify(
    name: str, args: tuple, kwargs: dict, outs: list
) -> tuple[str, str | None, int | None, dict]:
    """(class, conv kind, FLOPs or None where no rule, shape) of one op."""
    if name in _CONV:
        return _conv_record(name, args, outs[0] if outs else None)
    if name in _GEMM:
        flops, shape = _gemm_record(name, args, outs[0])
        return "gemm", None, flops, shape
    if name.startswith(_ATTENTION_PREFIX):
        flops, shape = _attention_record(name, args)
        return "gemm", None, flops, shape
    flops = _other_flops(name, args, kwargs, outs)
    cls = _CLASS_BY_NAME.get(name, "elementwise" if flops is not None else "copy")
    return cls, None, flops, {}


class _Recorder:
    """Collects one record per data-moving aten op, in the phase the step is in."""

    def __init__(self) -> None:
        self.phase = PHASES[0]
        self.records: Counter[str] = Counter()
        self.uncounted: Counter[str] = Counter()

    def record(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        if func.namespace != "aten":
            return  # prim.device, the profiler's record_function: no data
        name = _base(func)
        if _alias_outputs(func) or func in _METADATA_ONLY or name in _ALLOCATION:
            return
        if name in ("_unsafe_view", "lift_fresh", "alias", "detach"):
            return  # views whose schema does not say so
        ins = _unique(_tensors((args, kwargs)))
        outs = _unique(_tensors(out) + _written_args(func, args, kwargs))
        if not outs:
            return  # queries (device, size): nothing written
        cls, kind, flops, shape = _classify(name, args, kwargs, _tensors(out) or outs)
        if flops is None:
            self.uncounted[str(func)] += 1
            flops = 0
        if self.phase == "optimizer":
            cls = "optimizer"
        if not shape:
            shape = {"numel": max(t.numel() for t in [*ins, *outs])}
        op = {
            "name": str(func),
            "phase": self.phase,
            "class": cls,
            "kind": kind,
            "dtype": _dtype_name(ins, outs),
            "flops": int(flops),
            "bytes_read": sum(_nbytes(t) for t in ins),
            "bytes_written": sum(_nbytes(t) for t in outs),
            "shape": shape,
        }
        self.records[json.dumps(op, sort_keys=True)] += 1


def _recording_mode(recorder: _Recorder) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            recorder.record(func, args, kwargs, out)
            return out

    return Mode()


# --------------------------------------------------------------------------- the step


class _FakeStepScaler(torch.amp.GradScaler):
    """amp's GradScaler, but its step skips the ``found_inf.item()`` host read (a fake
    tensor has no value; the inf check has run and found none, as in a healthy step)."""

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        return optimizer.step(*args, **kwargs)


def _loss(criterion: Callable, out: Any, target: torch.Tensor) -> torch.Tensor:
    """The driver's loss: Inception/GoogLeNet train-mode outputs carry aux logits."""
    if isinstance(out, tuple):
        main, *aux = out
        total = criterion(main, target)
        for a in aux:
            if a is not None:
                total = total + AUX_LOSS_WEIGHT * criterion(a, target)
        return total
    return criterion(out, target)


def _record_step(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, precision: str
) -> _Recorder:
    """One training step of ``model`` (fake) as the driver runs it, recorded by phase."""
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(
        trained,
        lr=_LR,
        momentum=OPTIMIZER["momentum"],
        weight_decay=OPTIMIZER["weight_decay"],
        foreach=False,
    )
    for p in trained:  # steady state: the first step's buffer creation is not timed
        optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)
    dtype = autocast_dtype(precision)
    scaler = _FakeStepScaler("cpu") if precision == "amp" else None
    if scaler is not None:
        scaler.scale(torch.zeros(()))  # its scale tensor exists before a timed step
    autocast = (
        torch.autocast("cpu", dtype=getattr(torch, dtype)) if dtype else contextlib.nullcontext()
    )
    criterion = nn.CrossEntropyLoss()
    recorder = _Recorder()
    model.train()
    with _recording_mode(recorder):
        with autocast:
            loss = _loss(criterion, model(images), labels)
        recorder.phase = "backward"
        (scaler.scale(loss) if scaler is not None else loss).backward()
        recorder.phase = "optimizer"
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return recorder


def _fake_model(
    model_or_arch: nn.Module | str,
    fake_mode: Any,
    num_classes: int,
    factory: str | None,
    kwargs: dict | None,
) -> nn.Module:
    """The model with fake parameters: built inside the fake mode (its initialisation
    then costs nothing), or, where the initialisation reads a value (Inception's
    truncated normal), built for real and copied into the fake mode, as a given module is."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, FakeCopyMode

    model = model_or_arch
    if not isinstance(model, nn.Module):
        from dnnroofline.study.models import build_custom, refuse_kwargs_without_factory

        refuse_kwargs_without_factory(model, factory, kwargs)

        def build() -> nn.Module:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # googlenet/inception init notices
                if factory:
                    return build_custom(factory, kwargs, num_classes)
                return build_model(model, num_classes=num_classes)

        try:
            with fake_mode:
                return build()
        except DataDependentOutputException:
            model = build()
    with FakeCopyMode(fake_mode):
        return copy.deepcopy(model)


@contextlib.contextmanager
def _quiet_fake_tensor_log() -> Any:
    """The fake mode logs a traceback for a shape check that fails (an image too small
    for the model); the error is raised and reported as ModelCannotRun anyway."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _positive(value: Any, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{flag} {value!r}: must be a positive integer")
    return value


def _merged_ops(recorder: _Recorder) -> list[dict]:
    """Identical ops merged with a count, in phase order, the costliest first."""
    ops = [json.loads(key) | {"count": n} for key, n in recorder.records.items()]
    order = {p: i for i, p in enumerate(PHASES)}
    return sorted(ops, key=lambda o: (order[o["phase"]], -o["flops"] * o["count"], o["name"]))


def _sums(ops: list[dict]) -> dict:
    return {
        "flops": sum(o["flops"] * o["count"] for o in ops),
        "bytes": sum((o["bytes_read"] + o["bytes_written"]) * o["count"] for o in ops),
        "ops": sum(o["count"] for o in ops),
    }


def totals(ops: list[dict]) -> dict:
    """The ``totals`` block: FLOPs, bytes and op counts of the step, by phase and class."""
    return {
        "flops": sum(o["flops"] * o["count"] for o in ops),
        "bytes_read": sum(o["bytes_read"] * o["count"] for o in ops),
        "bytes_written": sum(o["bytes_written"] * o["count"] for o in ops),
        "ops": sum(o["count"] for o in ops),
        "by_phase": {p: _sums([o for o in ops if o["phase"] == p]) for p in PHASES},
        "by_class": {
            c: _sums([o for o in ops if o["class"] == c])
            for c in OP_CLASSES
            if any(o["class"] == c for o in ops)
        },
    }


def op_inventory(
    model_or_arch: nn.Module | str,
    *,
    precision: str,
    batch_size: int,
    image_size: int,
    num_classes: int = 1000,
    factory: str | None = None,
    kwargs: dict | None = None,
    arch: str | None = None,
) -> dict:
    """The ops JSON of one training step of ``model_or_arch`` (a torchvision name, the
    name of ``factory``'s model, or a module, named ``arch``) at this precision and batch.

    Raises InputError on a bad argument, ModelCannotRun where the model cannot train at
    this image size.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    require_known(precision, "--precision")
    _positive(batch_size, "--batch-size")
    _positive(image_size, "--image-size")
    _positive(num_classes, "--num-classes")
    name = arch or (
        model_or_arch if isinstance(model_or_arch, str) else type(model_or_arch).__name__
    )
    fake_mode = FakeTensorMode()
    model = _fake_model(model_or_arch, fake_mode, num_classes, factory, kwargs)
    with fake_mode:
        images = torch.empty(batch_size, IN_CHANNELS, image_size, image_size)
        labels = torch.zeros(batch_size, dtype=torch.long)
        try:
            with warnings.catch_warnings(), _quiet_fake_tensor_log():
                warnings.simplefilter("ignore")
                recorder = _record_step(model, images, labels, precision)
        except (RuntimeError, ValueError, AssertionError) as exc:
            raise ModelCannotRun(
                f"--arch {name!r} cannot train on {image_size}x{image_size} images "
                f"(--image-size {image_size}) at --batch-size {batch_size}: {exc}"
            ) from exc
    ops = _merged_ops(recorder)
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "ok",
        "message": None,
        "arch": name,
        "precision": precision,
        "batch_size": batch_size,
        "image_size": image_size,
        "num_classes": num_classes,
        "method": METHOD,
        "totals": totals(ops),
        "uncounted_ops": dict(sorted(recorder.uncounted.items())),
        "ops": ops,
    }


def failed_inventory(
    arch: str, precision: str, batch_size: int, image_size: int, num_classes: int, message: str
) -> dict:
    """The ops record of a model that cannot train at this configuration: the keys that
    name it and the reason, no totals and no ops (as ``failed_complexity``)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "error",
        "message": message,
        "arch": arch,
        "precision": precision,
        "batch_size": batch_size,
        "image_size": image_size,
        "num_classes": num_classes,
        "method": METHOD,
        "totals": None,
        "uncounted_ops": None,
        "ops": None,
    }


def inventory_or_failure(args: Any, precision: str) -> dict:
    """The ops JSON of the model that ``args`` names (``study.models.add_model_args``'s
    flags) at ``precision``; the failed record where it cannot train at that size."""
    from dnnroofline.model.complexity import ModelCannotRun
    from dnnroofline.study.models import model_step_kwargs

    try:
        return op_inventory(args.arch, precision=precision, **model_step_kwargs(args))
    except ModelCannotRun as exc:
        return failed_inventory(
            args.arch, precision, args.batch_size, args.image_size, args.num_classes, str(exc)
        )


def inventory_line(result: dict, where: str) -> str:
    """One line on what an ops JSON holds (or why the model could not train)."""
    name = f"{result['arch']} {result['precision']} bs{result['batch_size']}"
    if result["status"] != "ok":
        return (
            f"{name} cannot train at {result['image_size']} px, recorded as status error in "
            f"{where}: {result['message']}"
        )
    t = result["totals"]
    return (
        f"{name} {result['image_size']}px: {t['ops']} ops, {t['flops'] / 1e9:.3f} GFLOP, "
        f"{(t['bytes_read'] + t['bytes_written']) / 1e9:.3f} GB moved -> {where}"
    )
