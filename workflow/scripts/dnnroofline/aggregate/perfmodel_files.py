"""The performance model's input files, keyed by their content, for both halves of its stage.

The predictions (:mod:`dnnroofline.aggregate.predictions`) and their check
(:mod:`dnnroofline.aggregate.check`) read the same files: JSON documents keyed by what
they hold (an inventory by model, precision, batch and step variant; a complexity file by
model and batch; an env's files by env), never by their names; and predictions.csv's
class shares. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from dnnroofline.errors import InputError
from dnnroofline.estimate.op_classes import OP_CLASSES, inventory_variant, step_variant

Point = tuple[str, str, str, int]  # env, model, precision, batch


def _identity(doc: object, keys: Sequence[str], where: str) -> tuple:
    if not isinstance(doc, Mapping):
        raise InputError(f"{where}: expected a JSON object")
    values = tuple(doc.get(k) for k in keys)
    for k, v in zip(keys, values, strict=True):
        ok = (
            isinstance(v, int) and not isinstance(v, bool)
            if k == "batch_size"
            else isinstance(v, str) and v
        )
        if not ok:
            raise InputError(f"{where}: needs {k!r}, got {v!r}")
    return values


def key_docs(
    docs: Iterable[tuple[str, Mapping]], keys: Sequence[str], what: str
) -> dict[tuple, tuple[str, Mapping]]:
    """{identity: (source, doc)} of JSON files keyed by their own ``keys``; twice is refused."""
    out: dict[tuple, tuple[str, Mapping]] = {}
    for where, doc in docs:
        key = _identity(doc, keys, where)
        if key in out:
            raise InputError(f"{what} for {key} given twice: {out[key][0]} and {where}")
        out[key] = (where, doc)
    return out


def peak_memory(complexity: Mapping | None, precision: str) -> int | None:
    """The complexity JSON's predicted peak memory of the step at ``precision``."""
    value = (
        ((complexity or {}).get("by_precision") or {}).get(precision, {}).get("peak_memory_bytes")
    )
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def format_shares(shares: Mapping[str, float]) -> str:
    """``"conv=0.6120;normalization=0.1810"`` in OP_CLASSES order (:func:`parse_shares`)."""
    return ";".join(f"{c}={shares[c]:.4f}" for c in OP_CLASSES if c in shares)


def parse_shares(text: object) -> dict[str, float]:
    """The inverse of :func:`format_shares`; {} for an empty cell."""
    if not isinstance(text, str) or not text.strip():
        return {}
    out = {}
    for part in text.split(";"):
        cls, _, value = part.partition("=")
        if cls not in OP_CLASSES:
            raise InputError(f"class_shares: unknown op class {cls!r} in {text!r}")
        out[cls] = float(value)
    return out


def key_inventories(docs: Iterable[tuple[str, object]]) -> dict[tuple, tuple[str, Mapping]]:
    """{(arch, precision, batch_size, step variant): (file, doc)} of op inventories, keyed
    by their content (:func:`dnnroofline.estimate.op_classes.inventory_variant`); one given
    twice is refused, naming both files."""
    out: dict[tuple, tuple[str, Mapping]] = {}
    for where, doc in docs:
        (key,) = key_docs([(where, doc)], ("arch", "precision", "batch_size"), "op inventory")
        key = (*key, inventory_variant(doc))
        if key in out:
            raise InputError(f"op inventory for {key} given twice: {out[key][0]} and {where}")
        out[key] = (where, doc)
    return out


def find_inventory(
    inventories: Mapping, model: str, precision: str, batch: int, variant: str
) -> tuple[str, Mapping] | None:
    """(file, doc) of the op inventory of a point as its env runs the step (keyed by
    ``(model, precision, batch, variant)``: :func:`key_inventories`), or None."""
    return inventories.get((model, precision, int(batch), variant))


def inventory_on_device(
    inventories: Mapping, model: str, precision: str, batch: int, device: str
) -> tuple[str, Mapping] | None:
    """The op inventory of a point as a step on ``device``, in either memory format (the
    baselines read its FLOPs and bytes, the same in both), or None."""
    for layout in (False, True):
        found = find_inventory(inventories, model, precision, batch, step_variant(device, layout))
        if found is not None:
            return found
    return None
