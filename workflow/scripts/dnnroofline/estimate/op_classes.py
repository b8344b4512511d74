"""The operator classes of the predictive model: one home for their names.

The op inventory (:mod:`dnnroofline.estimate.op_inventory`) gives every operator of a
training step one of :data:`OP_CLASSES`; the op-class sweep
(:mod:`dnnroofline.measure.op_class_sweep`) measures one table per :func:`table_key`; the
model (:mod:`dnnroofline.perfmodel.predict`) looks each op up in the table of its key.
Pure names, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The version of an env's tables document (``efficiency.json``), written by the sweep
#: and by the tables derived from a ceilings file.
TABLES_SCHEMA_VERSION = 2

#: Every class an operator of a training step can have.
OP_CLASSES: tuple[str, ...] = (
    "gemm",  # mm, addmm, bmm, linear
    "conv",  # dense and grouped convolutions (kind "dense" or "grouped")
    "conv_depthwise",  # groups == in channels == out channels / multiplier
    "elementwise",  # activations, add, mul, their backward, dropout
    "reduction",  # sum, mean, adaptive average pooling, log-softmax, the loss
    "normalization",  # batch, layer and group norm, forward and backward
    "pooling",  # max and average pooling with a window, forward and backward
    "optimizer",  # SGD's per-parameter updates, GradScaler's unscale and checks
    "copy",  # dtype casts, layout changes, clones, fills
)

#: Phases of a training step, in step order.
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")

#: The table an op class falls back to where its own was not measured (an env whose
#: sweep left a class out, or the tables derived from a ceilings file): the closest
#: measured behaviour, said in the prediction's notes.
FALLBACK_TABLE: dict[str, str] = {
    "conv_bwd": "conv_fwd",
    "conv_depthwise_fwd": "elementwise",
    "conv_depthwise_bwd": "conv_depthwise_fwd",
    "gemm": "conv_fwd",
    "conv_fwd": "gemm",
    "reduction": "elementwise",
    "normalization": "elementwise",
    "pooling": "elementwise",
    "optimizer": "elementwise",
    "copy": "elementwise",
}


def table_key(op: Mapping) -> str:
    """The op-class table an inventory op is timed by: convolutions by kind and by
    direction (a backward convolution computes the input and the weight gradients),
    every other class by its name."""
    cls = op["class"]
    if cls not in OP_CLASSES:
        raise ValueError(f"op class {cls!r}: expected one of {', '.join(OP_CLASSES)}")
    if cls in ("conv", "conv_depthwise"):
        direction = "bwd" if op.get("phase") == "backward" else "fwd"
        return f"{cls}_{direction}"
    return cls


#: Every table key the sweep can measure.
TABLE_KEYS: tuple[str, ...] = (
    "gemm",
    "conv_fwd",
    "conv_bwd",
    "conv_depthwise_fwd",
    "conv_depthwise_bwd",
    "elementwise",
    "reduction",
    "normalization",
    "pooling",
    "optimizer",
    "copy",
)


#: How a step runs, as an op inventory's file name says it: the device type, and
#: ``_cl`` where the images and 4-d weights are channels_last.
STEP_VARIANTS: tuple[str, ...] = ("cpu", "cpu_cl", "cuda", "cuda_cl")


def step_variant(device: str, channels_last: bool = False) -> str:
    """The step variant of an env's device (``cuda:0`` is cuda; mps, whose ops the
    recorder cannot dispatch, is recorded as cpu) and memory format."""
    kind = str(device).split(":")[0]
    if kind not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device {device!r}: expected cpu, cuda or mps")
    return ("cuda" if kind == "cuda" else "cpu") + ("_cl" if channels_last else "")


def parse_step_variant(step: str) -> tuple[str, bool]:
    """(device, channels_last) of a step variant: the inverse of :func:`step_variant`."""
    if step not in STEP_VARIANTS:
        raise ValueError(f"step variant {step!r}: expected one of {', '.join(STEP_VARIANTS)}")
    device, _, layout = step.partition("_")
    return device, layout == "cl"


def inventory_variant(inventory: Mapping) -> str:
    """The step variant an op inventory records (one without, schema version 1, was
    recorded on a CPU, contiguous)."""
    if inventory.get("step_variant") in STEP_VARIANTS:
        return str(inventory["step_variant"])
    step = inventory.get("step")
    if not isinstance(step, Mapping):
        return "cpu"
    return step_variant(str(step.get("device") or "cpu"), bool(step.get("channels_last")))
