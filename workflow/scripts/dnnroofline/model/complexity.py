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

Per-op FLOP rules: :mod:`dnnroofline.model.flop_count`.

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
* Frozen weights (``requires_grad`` False, e.g. a fine-tuned model's backbone): grads,
  momentum, optimizer FLOPs and bytes, the GradScaler term and the backward weight
  reads count only the ``T`` parameters that train (``trainable_params``), so fp32 is
  ``4P + 28T + 2A + 2I`` and bf16 ``8P + 26T + 2A_half + 2I``.

``peak_memory_bytes`` (estimate, at the start of backward): params + grads (counted in
full, conservative) + momentum + saved activations + input batch (+ 2-byte weight copy
under amp/bf16) + a workspace allowance of ``2 x`` the largest saved activation
(the gradient buffers of the largest layer in flight in backward) + ``WORKSPACE_FIXED_BYTES``
(64 MB: convolution algorithm workspace). The CUDA context and allocator fragmentation
are not included.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dnnroofline.errors import InputError
from dnnroofline.model import traffic as tr
from dnnroofline.model.flop_count import FlopCount, as_args, preserved_state, trace_flops
from dnnroofline.study.models import check_arch
from dnnroofline.study.precisions import HALF_PRECISIONS, PRECISIONS, require_known

SCHEMA_VERSION = 1
OPTIMIZER_FLOPS_PER_PARAM = 6
OPTIMIZER = {"name": "SGD", "momentum": 0.9, "weight_decay": 1e-4}
FP32_BYTES = 4
HALF_BYTES = 2
WORKSPACE_FIXED_BYTES = 64_000_000
IN_CHANNELS = 3

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
    f"{OPTIMIZER['weight_decay']}, {OPTIMIZER_FLOPS_PER_PARAM} FLOPs and one fp32 momentum"
    " buffer per trained parameter (frozen ones, requires_grad False, have no gradient, "
    "no momentum and no backward weight read); loss not counted. Activations: unique "
    "storages saved for backward (saved_tensors_hooks on the real train-mode probe "
    "forward), without parameters, buffers and the input batch, scaled with the batch "
    "except 0/1-dim per-channel statistics. min DRAM bytes per step (lower bound): fp32 "
    "32P + 2A + 2I (params read fwd+bwd, grads written, optimizer reads p,g,m and writes "
    "p,m; saved activations written and read once; input read in forward and for the "
    "first layer's weight grad); bf16 34P + 2A_half + 2I (fp32 weights read for the "
    "2-byte autocast copy, copy written and read in fwd and bwd); amp = bf16 + 8P "
    "(GradScaler unscale). "
    "Peak memory: params + grads + momentum + activations + input (+ 2-byte weight copy "
    f"under amp/bf16) + workspace (2x the largest saved activation + "
    f"{WORKSPACE_FIXED_BYTES // 1_000_000} MB)."
)


# --------------------------------------------------------------------------- models


class ModelCannotRun(InputError):
    """The model cannot train at this configuration (e.g. an image too small for its
    kernels). A property of the (model, image size), not a bad argument: the CLI records
    it as a complexity JSON with ``status: "error"``, as the driver records a failed run."""


def build_model(arch: str, num_classes: int = 1000) -> nn.Module:
    """A randomly initialised torchvision classifier (``weights=None``: nothing is downloaded).

    Raises InputError for an unknown name, with close names as suggestions.
    """
    check_arch(arch)
    if not isinstance(num_classes, int) or num_classes < 1:
        raise InputError(f"--num-classes {num_classes!r}: must be a positive integer")
    import torchvision

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # googlenet/inception init_weights notices
        return torchvision.models.get_model(arch, weights=None, num_classes=num_classes)


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
        require_known(precision)
        num, den = (HALF_BYTES, FP32_BYTES) if precision in HALF_PRECISIONS else (1, 1)
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
    args = as_args(inputs)
    collector = _SavedCollector(model, args)
    with (
        preserved_state(model),
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
    args = as_args(inputs)
    collector = _SavedCollector(model, args)
    flops = trace_flops(model, args, (collector.pack, collector.unpack))
    return flops, collector.result()


def min_dram_bytes_per_step(
    params: int,
    activation_bytes: int,
    input_bytes: int,
    precision: str = "fp32",
    trainable: int | None = None,
) -> int:
    """Analytic lower bound on DRAM bytes of one training step (SGD with momentum).

    fp32/tf32: ``4P + 28T + 2A + 2I``: params read in forward (4P) and, the trained
    ones, in backward (4T), grads written (4T), optimizer reads p, g, momentum (12T)
    and writes p, momentum (8T), saved activations written in forward and read once in
    backward (2A), input batch read in forward and again for the first layer's weight
    gradient (2I). bf16: ``8P + 26T + 2A + 2I``: fp32 weights read (4P) to write the
    2-byte autocast copy (2P), which forward reads (2P) and backward reads for the
    trained ones (2T); fp32 grads (4T); optimizer (20T). amp: the bf16 formula + 8T
    for GradScaler's unscale (read and write each grad). ``P`` counts every parameter,
    ``T`` those that train (default P, where the formulas are 32P and 34P): a frozen
    one (requires_grad False) has no gradient, SGD skips it, and backward reads it
    only where a layer before it trains, so it is left out there (a lower bound). ``A``
    is the activation bytes *at that precision*, ``I`` the fp32 input bytes.
    """
    require_known(precision)
    p = params
    t = params if trainable is None else trainable
    optimizer = 3 * FP32_BYTES * t + 2 * FP32_BYTES * t  # read p, g, m; write p, m
    if precision in HALF_PRECISIONS:  # cast: read fp32, write the copy; forward reads it,
        weights = FP32_BYTES * p + HALF_BYTES * (2 * p + t)  # backward (trained ones)
    else:
        weights = FP32_BYTES * (p + t)  # read in forward and (trained ones) in backward
    grads = FP32_BYTES * t
    scaler = 2 * FP32_BYTES * t if precision == "amp" else 0
    return weights + grads + optimizer + scaler + 2 * activation_bytes + 2 * input_bytes


def peak_memory_bytes(
    params: int,
    activation_bytes: int,
    input_bytes: int,
    largest_activation_bytes: int,
    precision: str = "fp32",
    trainable: int | None = None,
) -> int:
    """Estimated peak memory of a training step: weights, grads and momentum (of the
    ``trainable`` parameters; default all), saved activations and input, the 2-byte
    weight copy under amp/bf16, and a workspace of 2x the largest saved activation +
    WORKSPACE_FIXED_BYTES."""
    require_known(precision)
    t = params if trainable is None else trainable
    state = FP32_BYTES * params + 2 * FP32_BYTES * t  # params; grads (in full), momentum
    copy = HALF_BYTES * params if precision in HALF_PRECISIONS else 0
    workspace = 2 * largest_activation_bytes + WORKSPACE_FIXED_BYTES
    return state + copy + activation_bytes + input_bytes + workspace


# --------------------------------------------------------------------------- traffic


# In-place ops that change a tensor's metadata only: no data moves.
_METADATA_ONLY = frozenset({torch.ops.aten.as_strided_.default})


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


def _returns_its_inputs(func: Any, ins: list, outs: list) -> bool:
    """True for an op that writes none of its arguments and whose every output is
    storage of an input: a view whose schema does not say so (``_unsafe_view``)."""
    schema = getattr(func, "_schema", None)
    if schema is None or not outs:
        return False
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        return False
    storages = {t.untyped_storage().data_ptr() for t in ins}
    return all(o.untyped_storage().data_ptr() in storages for o in outs)


def trace_traffic(model: nn.Module, x: torch.Tensor) -> list[dict]:
    """Every data-moving aten op of one real train-mode forward of ``model(x)``.

    Returns one record per op: ``inputs`` and ``outputs`` as lists of
    ``(storage key, bytes, kind, fixed)``, kind ``param``, ``input``, ``act`` or
    ``other`` (integer/bool tensors, buffers, and frozen weights: no gradient to write);
    ``fixed`` marks what does not grow
    with the batch (weights, buffers, 0/1-dim tensors such as per-channel statistics).
    Storages are keyed by address, and every tensor seen is kept alive until the end,
    so no address is reused for another.
    Views move nothing and are skipped: ops whose outputs alias an input by their
    schema, and ops that write no argument and return only storage of their inputs
    (``_unsafe_view``, which matmul's reshapes use, declares no alias), and
    ``as_strided_`` (it changes metadata only). Buffers and the train/eval mode are
    restored afterwards.
    """
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    params = {p.untyped_storage().data_ptr() for p in model.parameters() if p.requires_grad}
    frozen = {p.untyped_storage().data_ptr() for p in model.parameters()} - params
    buffers = {b.untyped_storage().data_ptr() for b in model.buffers()} | frozen
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
            if _alias_outputs(func) or func in _METADATA_ONLY:
                return out
            ins = [a for a in tree_flatten((args, kwargs or {}))[0] if isinstance(a, torch.Tensor)]
            outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
            if _returns_its_inputs(func, ins, outs):
                return out
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
        preserved_state(model),
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


def traffic_of_model(model: nn.Module, x: torch.Tensor, batch_size: int) -> dict:
    """The ``traffic`` block of the complexity JSON: method and table at ``batch_size``."""
    records = trace_traffic(model, x)
    return {
        "method": tr.METHOD,
        "ops": len(records),
        "table": tr.traffic_table(records, batch_size, int(x.shape[0])),
    }


# --------------------------------------------------------------------------- whole model


def _scale(count: int, batch_size: int, probe: int) -> int:
    return (count * batch_size + probe // 2) // probe


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Unique parameters (shared tensors counted once); with ``trainable_only``, those
    the optimizer updates (requires_grad)."""
    unique = {id(p): p for p in model.parameters()}.values()
    return sum(p.numel() for p in unique if p.requires_grad or not trainable_only)


def _probe_step(
    model: nn.Module,
    name: str,
    image: tuple[int, int],
    probes: list[int],
    gen: torch.Generator,
) -> tuple[FlopCount, SavedTensors, int]:
    """(FLOPs, saved tensors, probe batch) of one train-mode step on the first probe
    batch of ``image`` = (channels, size) images the model trains on: train-mode batch
    norm needs 2 images where a feature map is 1x1. ModelCannotRun where none does."""
    in_channels, image_size = image
    with preserved_state(model):
        model.train()
        for i, probe_batch in enumerate(probes):
            x = torch.randn(probe_batch, in_channels, image_size, image_size, generator=gen)
            try:
                flops, saved = count_flops_and_saved_tensors(model, x)
                return flops, saved, probe_batch
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
    raise ValueError("no probe batch given")


def _bytes_at(
    precision: str,
    saved: SavedTensors,
    batches: tuple[int, int],
    params: int,
    trainable: int,
    input_bytes: int,
) -> dict:
    """The ``by_precision`` entry of one precision (its traffic added later), with
    ``batches`` = (batch size, probe batch) to scale the saved tensors by."""
    batch_size, probe_batch = batches
    act = saved.scaled(batch_size, probe_batch, precision)
    half = precision in HALF_PRECISIONS and saved.largest_is_float
    largest = _scale(
        saved.largest_bytes // 2 if half else saved.largest_bytes, batch_size, probe_batch
    )
    return {
        "activation_bytes": act,
        "min_dram_bytes_per_step": min_dram_bytes_per_step(
            params, act, input_bytes, precision, trainable
        ),
        "peak_memory_bytes": peak_memory_bytes(
            params, act, input_bytes, largest, precision, trainable
        ),
        "weight_copy_bytes": HALF_BYTES * params if precision in HALF_PRECISIONS else 0,
    }


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
    if not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"--batch-size {batch_size!r}: must be a positive integer")
    if not isinstance(image_size, int) or image_size < 1:
        raise InputError(f"--image-size {image_size!r}: must be a positive integer")
    name = arch or type(model).__name__
    gen = torch.Generator().manual_seed(0)
    flops, saved, probe_batch = _probe_step(
        model, name, (in_channels, image_size), [probe_batch] if probe_batch else [1, 2], gen
    )

    def sc(n: int) -> int:
        return _scale(n, batch_size, probe_batch)

    by_type = {
        k: {"forward": sc(v["forward"]), "backward": sc(v["backward"])}
        for k, v in flops.by_layer_type.items()
    }
    params = count_params(model)
    trainable = count_params(model, trainable_only=True)  # SGD skips frozen ones
    forward = sum(v["forward"] for v in by_type.values())
    backward = sum(v["backward"] for v in by_type.values())
    optimizer = OPTIMIZER_FLOPS_PER_PARAM * trainable
    input_bytes = batch_size * in_channels * image_size * image_size * FP32_BYTES
    by_precision = {
        prec: _bytes_at(prec, saved, (batch_size, probe_batch), params, trainable, input_bytes)
        for prec in PRECISIONS
    }
    fp32 = by_precision["fp32"]
    largest_fp32 = sc(saved.largest_bytes)
    x = torch.randn(probe_batch, in_channels, image_size, image_size, generator=gen)
    traffic = traffic_of_model(model, x, batch_size)
    for prec in PRECISIONS:
        by_precision[prec]["traffic_bytes_per_step"] = tr.step_traffic_bytes(
            traffic, params, precision=prec, trainable=trainable
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
        "trainable_params": trainable,
        "bytes": {
            "params": FP32_BYTES * params,
            "grads": FP32_BYTES * trainable,
            "optimizer_state": FP32_BYTES * trainable,
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
    from dnnroofline.study.models import build_custom, refuse_kwargs_without_factory

    refuse_kwargs_without_factory(arch, factory, kwargs)
    if factory:
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
