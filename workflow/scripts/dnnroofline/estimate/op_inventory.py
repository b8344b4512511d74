"""The op inventory of one training step: every aten operator, its class, FLOPs and bytes.

``op_inventory(arch_or_model, precision=..., batch_size=..., image_size=...,
device=..., channels_last=...)`` returns the ops JSON (schema version 2,
docs/contracts.md): the step :func:`dnnroofline.estimate.op_recorder.record_step` records
as the device runs it, each op described by :mod:`dnnroofline.estimate.op_rules` (class,
layer type, FLOPs, bytes read and written, dtype, shape features); identical ops merged
with a count, and the step's order kept in ``sequence`` (indices into ``ops``, with
``"sync"`` where the host waits for the device).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from torch import nn

from dnnroofline.estimate import op_recorder as rec
from dnnroofline.estimate import op_rules
from dnnroofline.estimate.op_classes import OP_CLASSES, PHASES

SCHEMA_VERSION = 2

METHOD = (
    "One training step on fake tensors (torch FakeTensorMode: shapes, no arithmetic, "
    "so the batch costs nothing) as the device runs it: on cuda the parameters, images "
    "and labels are fake CUDA tensors (dispatch picks the CUDA kernels: cudnn batch norm, "
    "fused dropout) and backward runs in a Python copy of autograd's engine (same nodes, "
    "order and gradient checks; the engine itself needs a GPU), on cpu autograd's engine; "
    "autocast on the device's type (amp float16, bf16 bfloat16; fp32/tf32 none); "
    "attention on cuda in the fused kernel an sm80+ GPU runs (flash for fp16/bf16, "
    "memory-efficient for fp32, math where their shape checks fail), chosen by this "
    "host's dispatch where it has a GPU, else by the same rules here (torch's own check "
    "needs a GPU and falls back to math); "
    "channels_last images and 4-d weights where the env asks; every aten op recorded "
    "by a TorchDispatchMode after autocast: forward, cross-entropy loss, backward, "
    f"SGD momentum {rec.OPTIMIZER['momentum']} weight decay "
    f"{rec.OPTIMIZER['weight_decay']} with torch's own foreach choice for the device "
    "(CUDA: _foreach_ ops; momentum buffers already there, as in every step after the "
    "first), zero_grad(set_to_none=True), GradScaler scale/unscale/inf check/update under "
    "amp, and a sync where GradScaler.step reads found_inf on the host (cuda). FLOPs, "
    "bytes and shape features by dnnroofline.estimate.op_rules: 2 per MAC; "
    "convolution_backward by its output mask (grad input 2*MACs, grad weight 2*MACs, grad "
    "bias 1 per output); batch/layer/group norm 5 per element, their backward 9; "
    "activations and their backward per element (relu 1, ...); elementwise 1 per "
    "floating-point output element, 2 with an alpha scale (SGD: 6 per parameter); "
    "softmax 5; mean/sum/adaptive average pooling 1 per input element; max pool k-1 "
    "compares per output, its backward 1; GradScaler unscale and inf check "
    f"{op_rules.UNSCALE_FLOPS_PER_ELEMENT} per gradient element; ops without a rule 0 "
    "(listed in uncounted_ops). Bytes: every tensor argument read in full, every output "
    "and in-place target written in full, each tensor once per op, no cache credit (an "
    "expanded argument counts its storage); views, allocations and metadata-only ops "
    "dropped; per op, the sizes of the outputs it allocates (fresh_bytes, 1 MiB and up). "
    "Left out: the data loader, the host-to-device copy, allocator and launch "
    "work, and kernels a backend adds inside an op (cuDNN's layout transposes, workspace)."
)


def _merged(step: rec.RecordedStep) -> tuple[list[dict], list]:
    """(ops, sequence): identical ops merged with a count, in phase order, the costliest
    first; the step's order as indices into them, with the sync markers."""
    keys = [e if e == rec.SYNC else json.dumps(e, sort_keys=True) for e in step.events]
    counts = Counter(k for k in keys if k != rec.SYNC)
    ops = [json.loads(key) | {"count": n} for key, n in counts.items()]
    order = {p: i for i, p in enumerate(PHASES)}
    ops.sort(key=lambda o: (order[o["phase"]], -o["flops"] * o["count"], o["name"]))
    index = {json.dumps({k: v for k, v in o.items() if k != "count"}, sort_keys=True): i
             for i, o in enumerate(ops)}  # fmt: skip
    return ops, [k if k == rec.SYNC else index[k] for k in keys]


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


def _header(arch: str, spec: rec.StepSpec, batch: int, image: int, classes: int) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "arch": arch,
        "precision": spec.precision,
        "batch_size": batch,
        "image_size": image,
        "num_classes": classes,
        "step_variant": spec.variant,
        "method": METHOD,
    }


def inventory_of(
    step: rec.RecordedStep, arch: str, batch_size: int, image_size: int, num_classes: int
) -> dict:
    """The ops JSON of a recorded step."""
    ops, sequence = _merged(step)
    header = _header(arch, step.spec, batch_size, image_size, num_classes)
    return {
        **header,
        "status": "ok",
        "message": None,
        "step": step.step_block(),
        "param_tensors": step.param_tensors,
        "totals": totals(ops),
        "uncounted_ops": dict(sorted(step.uncounted.items())),
        "ops": ops,
        "sequence": sequence,
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
    device: str = "cpu",
    channels_last: bool = False,
) -> dict:
    """The ops JSON of one training step of ``model_or_arch`` (a torchvision name, the
    name of ``factory``'s model, or a module, named ``arch``) at this precision and
    batch, as ``device`` runs it (channels_last or not).

    Raises InputError on a bad argument, ModelCannotRun where the model cannot train at
    this image size.
    """
    spec = rec.StepSpec(precision, device, channels_last)
    step = rec.record_step(
        model_or_arch,
        spec,
        batch_size=batch_size,
        image_size=image_size,
        num_classes=num_classes,
        factory=factory,
        kwargs=kwargs,
        arch=arch,
    )
    name = arch or (
        model_or_arch if isinstance(model_or_arch, str) else type(model_or_arch).__name__
    )
    return inventory_of(step, name, batch_size, image_size, num_classes)


def failed_inventory(
    arch: str,
    spec: rec.StepSpec,
    batch_size: int,
    image_size: int,
    num_classes: int,
    message: str,
) -> dict:
    """The ops record of a model that cannot train at this configuration: the keys that
    name it and the reason, no totals and no ops (as ``failed_complexity``)."""
    return {
        **_header(arch, spec, batch_size, image_size, num_classes),
        "status": "error",
        "message": message,
        "step": None,
        "param_tensors": None,
        "totals": None,
        "uncounted_ops": None,
        "ops": None,
        "sequence": None,
    }


def inventory_or_failure(args: Any, spec: rec.StepSpec) -> dict:
    """The ops JSON of the model that ``args`` names (``study.models.add_model_args``'s
    flags) as ``spec`` runs it; the failed record where it cannot train at that size."""
    from dnnroofline.study.models import model_step_kwargs

    try:
        return op_inventory(
            args.arch,
            precision=spec.precision,
            device=spec.device,
            channels_last=spec.channels_last,
            **model_step_kwargs(args),
        )
    except rec.ModelCannotRun as exc:
        return failed_inventory(
            args.arch, spec, args.batch_size, args.image_size, args.num_classes, str(exc)
        )


def inventory_line(result: dict, where: str) -> str:
    """One line on what an ops JSON holds (or why the model could not train)."""
    name = f"{result['arch']} {result['precision']} bs{result['batch_size']}"
    name += f" {result.get('step_variant', 'cpu')}"
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
