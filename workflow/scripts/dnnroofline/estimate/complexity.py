"""Analytic complexity of one training step of a torchvision classifier.

Pure logic (no Snakemake, no file I/O). ``complexity(arch, batch_size, image_size)``
returns the dict of the complexity contract (docs/contracts.md): parameters, bytes,
FLOPs of forward, backward and optimizer by layer type, an analytic lower bound on
DRAM traffic per step and an estimate of peak memory, per precision.

Counting method (also written into every result as ``method``):

* **FLOPs by layer type** come from the op recorder (:mod:`dnnroofline.estimate.op_recorder`):
  one fp32 training step on a CPU, contiguous, on fake tensors at the real batch (no
  arithmetic, so any batch costs the same), every aten op described by
  :mod:`dnnroofline.estimate.op_rules` (the rules the op inventory uses). A forward op's
  layer type is its own (a GEMM with a weight operand is ``linear``; the ops of a
  dropout call are ``dropout``); a backward op takes the layer of the forward op whose
  autograd node runs it (a linear layer's weight-gradient ``mm`` and bias-gradient
  ``sum`` are ``linear``, a convolution's backward by its output mask, so the first
  convolution computes no input gradient), and the engine's adds of a gradient that
  fans in are ``elementwise``. The loss (log-softmax and NLL) is the step's, not the
  model's, and is left out, as is integer arithmetic (``num_batches_tracked``).
* **FLOPs, not MACs.** One FLOP is one add, multiply, compare, divide or
  transcendental function; an FMA is 2.
* **Reference.** fvcore's own count of the forward (a TorchScript trace of the
  train-mode forward on a probe batch of one image, or two where train-mode batch norm
  refuses a single value per channel, scaled by ``batch_size / probe``) with our
  forward handles (:mod:`dnnroofline.estimate.flop_count`), in ``flops.reference``: an
  independent check of the recorder's forward.

**Optimizer**: SGD with momentum 0.9 and weight decay 1e-4, 6 FLOPs per parameter
(``g += wd * p``: 2; ``m = mu * m + g``: 2; ``p -= lr * m``: 2).

**Memory.** ``P`` = parameters, ``A`` = bytes of the tensors saved for backward,
measured by ``torch.autograd.graph.saved_tensors_hooks`` on the real train-mode forward
of the probe batch (the one fvcore traces): unique storages, excluding parameters,
buffers and the input batch itself (max-pool indices and dropout masks included at
their own dtype), scaled by ``batch_size / probe``, except 0/1-dim saved tensors
(batch norm's per-channel mean and inverse std), which do not grow with the batch.
``I`` = bytes of the fp32 input batch (``batch * 3 * H * W * 4``).

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

import torch
from torch import nn

from dnnroofline.estimate import flop_count as fc
from dnnroofline.estimate import traffic as tr
from dnnroofline.estimate.op_recorder import (
    IN_CHANNELS,
    OPTIMIZER,
    ModelCannotRun,
    RecordedStep,
    StepSpec,
    build_model,
    positive,
    record_step,
)
from dnnroofline.estimate.op_rules import LAYER_TYPES
from dnnroofline.study.precisions import HALF_PRECISIONS, PRECISIONS, require_known

__all__ = ["IN_CHANNELS", "OPTIMIZER", "ModelCannotRun", "build_model", "complexity"]

SCHEMA_VERSION = 1
OPTIMIZER_FLOPS_PER_PARAM = 6
FP32_BYTES = 4
HALF_BYTES = 2
WORKSPACE_FIXED_BYTES = 64_000_000
#: Layer types of the step that are not the model's layers.
NOT_LAYERS = ("loss", "optimizer")

METHOD = (
    "FLOPs, not MACs (an FMA is 2 FLOPs; one add, multiply, compare, divide or "
    "transcendental is 1), by layer type, from the op recorder: one fp32 training step "
    "on a CPU on fake tensors at the batch (every aten op at dispatch, described by "
    "dnnroofline.estimate.op_rules, as the op inventory): conv/linear/matmul = 2*MACs "
    "(grouped and depthwise convs: 2*N*Cout*Hout*Wout*(Cin/groups)*kh*kw, reported as "
    "conv_grouped / conv_depthwise) + 1 add per output for a bias; a GEMM with a weight "
    "operand is linear, else matmul; batchnorm (train)/layer/group norm 5 FLOPs per "
    "element; pooling: max k-1 compares, avg k per output, adaptive avg/mean 1 per input "
    "element; activations per element (relu 1, relu6 2, sigmoid 4, silu 5, hardswish 5, "
    "gelu 5); softmax 5; elementwise add/mul/... 1 per floating-point element; dropout "
    "2 (its ops on a CPU: a scale and a mask multiply). Backward: each aten op autograd "
    "runs, charged to the layer whose node runs it: convolution_backward by its output "
    "mask (grad input and grad weight 2*MACs each, the first layer's input needs none; "
    "grad bias 1 per output), a linear layer's two GEMMs and its bias-gradient sum, "
    "batchnorm/norm 9 per element, max-pool 1 per output, activations as forward, the "
    "fan-in adds of a gradient used twice elementwise. Loss and integer bookkeeping "
    "(num_batches_tracked) not counted. Reference: fvcore's forward count with our "
    f"forward handles, in flops.reference. Optimizer: SGD momentum {OPTIMIZER['momentum']}, "
    f"weight decay {OPTIMIZER['weight_decay']}, {OPTIMIZER_FLOPS_PER_PARAM} FLOPs and one "
    "fp32 momentum buffer per trained parameter (frozen ones, requires_grad False, have "
    "no gradient, no momentum and no backward weight read). Activations: unique "
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
    args = fc.as_args(inputs)
    collector = _SavedCollector(model, args)
    with (
        fc.preserved_state(model),
        warnings.catch_warnings(),
        torch.enable_grad(),
        torch.autograd.graph.saved_tensors_hooks(collector.pack, collector.unpack),
    ):
        warnings.simplefilter("ignore")
        out = model(*args)
    del out
    return collector.result()


def reference_and_saved_tensors(
    model: nn.Module, inputs: torch.Tensor | Sequence[torch.Tensor]
) -> tuple[fc.FlopCount, SavedTensors]:
    """fvcore's forward count and ``measure_saved_tensors`` from one traced forward."""
    args = fc.as_args(inputs)
    collector = _SavedCollector(model, args)
    flops = fc.trace_forward(model, args, (collector.pack, collector.unpack))
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


# --------------------------------------------------------------------------- the step


def flops_by_layer_type(step: RecordedStep) -> dict[str, dict[str, int]]:
    """Forward and backward FLOPs of a recorded step by the model's layer types (the
    loss and the optimizer left out), in LAYER_TYPES order, zeros dropped."""
    by = {k: {"forward": 0, "backward": 0} for k in LAYER_TYPES if k not in NOT_LAYERS}
    for op in step.ops():
        if op["phase"] in ("forward", "backward") and op["layer"] in by:
            by[op["layer"]][op["phase"]] += op["flops"]
    return {k: v for k, v in by.items() if v["forward"] or v["backward"]}


def traffic_of_step(step: RecordedStep, batch_size: int) -> dict:
    """The ``traffic`` block of the complexity JSON from a step recorded with its
    forward tensors (``record_step(..., traffic=True)``), at the step's own batch."""
    return {
        "method": tr.METHOD,
        "ops": len(step.traffic),
        "table": tr.traffic_table(step.traffic, batch_size, batch_size),
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
) -> tuple[fc.FlopCount, SavedTensors, int]:
    """(fvcore's forward count, saved tensors, probe batch) of one real train-mode
    forward on the first probe batch of ``image`` = (channels, size) images the model
    trains on: train-mode batch norm needs 2 images where a feature map is 1x1.
    ModelCannotRun where none does."""
    in_channels, image_size = image
    with fc.preserved_state(model):
        model.train()
        for i, probe_batch in enumerate(probes):
            x = torch.randn(probe_batch, in_channels, image_size, image_size, generator=gen)
            try:
                flops, saved = reference_and_saved_tensors(model, x)
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


def _reference(flops: fc.FlopCount, batch_size: int, probe_batch: int) -> dict:
    """``flops.reference``: fvcore's forward count, scaled from the probe to the batch."""
    return {
        "fvcore_forward": _scale(flops.forward, batch_size, probe_batch),
        "method": fc.METHOD,
        "uncounted_ops": flops.uncounted_ops,
    }


def complexity_of_model(
    model: nn.Module,
    *,
    batch_size: int,
    image_size: int,
    arch: str | None = None,
    probe_batch: int | None = None,
    step: RecordedStep | None = None,
) -> dict:
    """The complexity contract for ``model`` trained on ``batch_size`` square images.

    FLOPs and the traffic table come from the op recorder's fp32 step on a CPU at the
    batch (``step``, where the caller recorded it already with ``traffic=True``); the
    saved tensors and fvcore's reference from a real forward of a probe batch scaled
    linearly to ``batch_size``: one image by default, two where train-mode batch norm
    needs more than one value per channel (a 1x1 feature map, e.g. resnet18 at 32x32).
    Raises InputError when the model cannot run at this image size.
    """
    positive(batch_size, "--batch-size")
    positive(image_size, "--image-size")
    name = arch or type(model).__name__
    if step is None:
        step = record_step(
            model, StepSpec("fp32"), batch_size=batch_size, image_size=image_size, traffic=True
        )
    gen = torch.Generator().manual_seed(0)
    reference, saved, probe_batch = _probe_step(
        model, name, (IN_CHANNELS, image_size), [probe_batch] if probe_batch else [1, 2], gen
    )
    by_type = flops_by_layer_type(step)
    params = count_params(model)
    trainable = count_params(model, trainable_only=True)  # SGD skips frozen ones
    forward = sum(v["forward"] for v in by_type.values())
    backward = sum(v["backward"] for v in by_type.values())
    optimizer = OPTIMIZER_FLOPS_PER_PARAM * trainable
    input_bytes = batch_size * IN_CHANNELS * image_size * image_size * FP32_BYTES
    by_precision = {
        prec: _bytes_at(prec, saved, (batch_size, probe_batch), params, trainable, input_bytes)
        for prec in PRECISIONS
    }
    fp32 = by_precision["fp32"]
    largest_fp32 = _scale(saved.largest_bytes, batch_size, probe_batch)
    traffic = traffic_of_step(step, batch_size)
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
        "in_channels": IN_CHANNELS,
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
            "reference": _reference(reference, batch_size, probe_batch),
        },
        "min_dram_bytes_per_step": fp32["min_dram_bytes_per_step"],
        "peak_memory_bytes": fp32["peak_memory_bytes"],
        "by_precision": by_precision,
        "traffic": traffic,
        "optimizer": dict(OPTIMIZER),
        "probe_batch": probe_batch,
        "saved_tensors_per_probe": saved.count,
        "uncounted_ops": dict(sorted(step.uncounted.items())),
        "method": METHOD,
    }


def complexity(
    arch: str,
    batch_size: int,
    image_size: int,
    num_classes: int = 1000,
    factory: str | None = None,
    kwargs: dict | None = None,
    step: RecordedStep | None = None,
) -> dict:
    """The complexity contract of torchvision model ``arch`` (``weights=None``), or of the
    user's model built by ``factory`` (``module:callable``) under the name ``arch``
    (``step``: its fp32 CPU step, where recorded already with ``traffic=True``)."""
    from dnnroofline.study.models import build_custom, refuse_kwargs_without_factory

    refuse_kwargs_without_factory(arch, factory, kwargs)
    if factory:
        model = build_custom(factory, kwargs, num_classes)
    else:
        model = build_model(arch, num_classes=num_classes)
    result = complexity_of_model(
        model, batch_size=batch_size, image_size=image_size, arch=arch, step=step
    )
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
