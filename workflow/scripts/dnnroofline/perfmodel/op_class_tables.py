"""The op-class tables of one env: how fast each op class runs, as a share of its roof.

An env's ``efficiency.json`` (the sweep, :mod:`dnnroofline.measure.op_class_sweep`) holds,
per precision and per table key (:data:`dnnroofline.estimate.op_classes.TABLE_KEYS`), rows
of microbenchmarked ops drawn over shape ranges: their shape, FLOPs, bytes, seconds per
call, ideal time on the env's measured roofs (``ideal_s = max(flops / compute roof,
bytes / memory roof)``) and efficiency (``ideal_s / seconds``); and the host's costs
(``dispatch``: per op with and without autograd, the step's fixed costs). The timed
calls of a CPU sweep hold the host's cost of a call without autograd: :func:`load_tables`
takes it out, so that a row's efficiency is its compute's. The model looks an op up by
its shape (:meth:`Tables.efficiencies`, one fit per table:
:mod:`dnnroofline.perfmodel.shape_fit`), falling back along
:data:`~dnnroofline.estimate.op_classes.FALLBACK_TABLE` where the op's own table is missing.

Where an env has no sweep (the committed H100 example), :func:`tables_from_ceilings`
derives coarser tables from its ``ceilings.json``: the GEMM and convolution candidates
of each compute roof and the STREAM benchmarks of the memory roof, each at its best
repeat (the statistic the roofs are taken at). :func:`scaled_for_gpu` carries an env's
tables to another GPU of the datasheet by the ratio of their peaks.
Pure: no torch, no files.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dnnroofline.errors import InputError
from dnnroofline.estimate.op_classes import FALLBACK_TABLE, TABLE_KEYS, TABLES_SCHEMA_VERSION
from dnnroofline.estimate.roofline import ideal_seconds, roofs_from_ceilings
from dnnroofline.measure import fresh_pages
from dnnroofline.perfmodel import shape_fit
from dnnroofline.study.precisions import operand_bytes, roof_names

#: The ceilings' candidates record no bytes: they are derived from shapes, at the
#: precision's operand_bytes. The STREAM arrays' element size per device (float64; MPS
#: has none: float32), and each benchmark's FLOPs per element: a table row's ideal time
#: needs both FLOPs and bytes.
STREAM_ITEM_BYTES = {"mps": 4}
STREAM_ARRAYS_AND_FLOPS = {"triad": (3, 2), "scale": (2, 1), "copy": (2, 0), "d2d_copy": (2, 0)}
#: Which table each STREAM benchmark of a ceilings file stands in for.
STREAM_TABLES = {
    "triad": ("elementwise", "optimizer"),  # a = b + s*c is SGD's add_(alpha)
    "scale": ("elementwise",),
    "copy": ("copy",),
    "d2d_copy": ("copy",),
}


def table_row(
    flops: float, nbytes: float, seconds: float, roof_flops: float, roof_bw: float, what: str
) -> dict:
    """One row of a table: an op's size, its time, its ideal time and their ratio."""
    ideal = ideal_seconds(flops, nbytes, roof_flops, roof_bw)
    return {
        "flops": int(flops),
        "bytes": int(nbytes),
        "seconds": seconds,
        "ideal_s": ideal,
        "efficiency": ideal / seconds,
        "what": what,
    }


# --------------------------------------------------------------------------- lookup

#: A CPU row's device time is at least this share of its call: a call little longer than
#: the host's cost would otherwise leave a difference of two near numbers, noise.
MIN_DEVICE_SHARE = 1 / 3
#: The op class whose host cost per call (``dispatch.bare_s``) a table's calls hold.
TABLE_CLASS = {
    "conv_fwd": "conv",
    "conv_bwd": "conv",
    "conv_depthwise_fwd": "conv_depthwise",
    "conv_depthwise_bwd": "conv_depthwise",
}


def _positive(value: Any, at: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{at} must be a positive number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{at} must be a positive number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Tables:
    """An env's op-class tables, validated (:func:`load_tables`); each table's fit is
    made on its first use and kept."""

    where: str
    source: str
    roofs: dict
    dispatch: dict | None
    rows: dict[str, dict[str, tuple[dict, ...]]]  # precision -> table key -> rows
    _fits: dict = field(default_factory=dict, compare=False, repr=False)
    _residuals: dict = field(default_factory=dict, compare=False, repr=False)

    def table_used(self, precision: str, key: str) -> str:
        """The table an op of ``key`` is looked up in: its own, else the first measured
        one along :data:`FALLBACK_TABLE`."""
        by_key = self._precision(precision)
        if key not in TABLE_KEYS:
            raise InputError(f"{self.where}: unknown table key {key!r} ({', '.join(TABLE_KEYS)})")
        tried = [key]
        while not by_key.get(tried[-1]):
            nxt = FALLBACK_TABLE.get(tried[-1])
            if nxt is None or nxt in tried:
                raise InputError(
                    f"{self.where}: {precision} has no table for {key!r} nor for its "
                    f"fallbacks ({' -> '.join(tried)}); it has {sorted(k for k in by_key)}"
                )
            tried.append(nxt)
        return tried[-1]

    def efficiencies(
        self, precision: str, key: str, items: Sequence[Mapping]
    ) -> tuple[list[float], str, int]:
        """The efficiency each op of table ``key`` attains (``items``: ``shape``,
        ``phase``, ``ideal_s``, ``flops``, ``bytes``), never beyond the fit's bound; the
        table it came from; how many ops were read by their ideal time alone (a fallback
        table, of another class, reads every op so; a shape without the table's features
        too)."""
        used = self.table_used(precision, key)
        for i, item in enumerate(items):
            _positive(item.get("ideal_s"), f"ideal_s of {key} op {i}")
        fit = self._fit(precision, used)
        if used != key:  # another class's features do not describe this op
            fit = shape_fit.Fit(used, None, fit.points, fit.log_bound)
        logs, by_ideal = fit.log_efficiency(items, f"{self.where}: {precision} {key}")
        return [math.exp(v) for v in logs], used, by_ideal

    def residuals(self, precision: str, key: str) -> list[float]:
        """``log(measured / predicted time)`` of the rows of the table ``key`` is read
        from, each predicted by a fit without it (cross-validated)."""
        used = self.table_used(precision, key)
        name = self._precision_name(precision)
        if (name, used) not in self._residuals:
            rows = self.rows[name][used]
            self._residuals[(name, used)] = shape_fit.cross_validated_residuals(
                used, rows, f"{self.where}: tables.{name}.{used}"
            )
        return self._residuals[(name, used)]

    def _fit(self, precision: str, used: str) -> shape_fit.Fit:
        name = self._precision_name(precision)
        if (name, used) not in self._fits:
            at = f"{self.where}: tables.{name}.{used}"
            self._fits[(name, used)] = shape_fit.fit_table(used, self.rows[name][used], at)
        return self._fits[(name, used)]

    def _precision_name(self, precision: str) -> str:
        for name in roof_names(precision):
            if name in self.rows:
                return name
        raise InputError(
            f"{self.where}: no tables for precision {precision!r} (it has {sorted(self.rows)})"
        )

    def _precision(self, precision: str) -> dict[str, tuple[dict, ...]]:
        return self.rows[self._precision_name(precision)]


def _load_rows(
    rows: Any, at: str, bare_s: float | None, fresh: Mapping | None = None
) -> tuple[dict, ...]:
    """A table's rows, validated, each with its device efficiency: its seconds less
    ``bare_s``, the host's cost per call, and less what its fresh outputs paid for pages
    new from the OS (``fresh``, a CPU sweep's ``dispatch.fresh_pages``), where given (at
    least :data:`MIN_DEVICE_SHARE` of the call)."""
    if not isinstance(rows, list):
        raise InputError(f"{at} must be a list of rows, got {type(rows).__name__}")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise InputError(f"{at}[{i}] must be an object, got {row!r}")
        ideal = _positive(row.get("ideal_s"), f"{at}[{i}].ideal_s")
        eff = _positive(row.get("efficiency"), f"{at}[{i}].efficiency")
        paged = fresh_pages.seconds(fresh_pages.fresh_bytes(row, f"{at}[{i}]"), fresh)
        if (bare_s or paged) and row.get("seconds"):
            seconds = _positive(row["seconds"], f"{at}[{i}].seconds")
            took = seconds - (bare_s or 0.0) - paged
            eff = ideal / max(took, seconds * MIN_DEVICE_SHARE)
        out.append({**row, "ideal_s": ideal, "efficiency": eff})
    return tuple(out)


def _bare_seconds(dispatch: Mapping | None, device: str, key: str) -> float | None:
    """The host's cost of one call of table ``key``'s class without autograd, which a
    CPU sweep's timed calls hold (a CUDA sweep times the device alone)."""
    if device != "cpu" or not dispatch or not isinstance(dispatch.get("bare_s"), Mapping):
        return None
    value = dispatch["bare_s"].get(TABLE_CLASS.get(key, key))
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def fresh_pages_of(dispatch: Mapping | None, device: str, where: str = "") -> Mapping | None:
    """A CPU sweep's ``dispatch.fresh_pages`` (:mod:`dnnroofline.measure.fresh_pages`),
    validated; None on another device or where it was not measured."""
    block = (dispatch or {}).get("fresh_pages") if device == "cpu" else None
    if block is None:
        return None
    at = f"{where}: dispatch.fresh_pages"
    if not isinstance(block, Mapping):
        raise InputError(f"{at} must be an object or null, got {block!r}")
    threshold, per_byte = block.get("threshold_bytes"), block.get("s_per_byte")
    if threshold is not None and not (isinstance(threshold, int) and threshold >= 0):
        raise InputError(f"{at}.threshold_bytes must be a byte count or null, got {threshold!r}")
    if not (isinstance(per_byte, (int, float)) and math.isfinite(per_byte) and per_byte >= 0):
        raise InputError(f"{at}.s_per_byte must be seconds per byte (>= 0), got {per_byte!r}")
    return block


def load_tables(doc: Any, where: str = "efficiency.json") -> Tables:
    """Validate an efficiency document; bad content is refused naming ``where`` and the key."""
    if not isinstance(doc, Mapping):
        raise InputError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    roofs = doc.get("roofs")
    if not isinstance(roofs, Mapping) or not isinstance(roofs.get("compute"), Mapping):
        raise InputError(f"{where}: roofs must hold a compute object and a memory value")
    compute = {p: _positive(v, f"{where}: roofs.compute.{p}") for p, v in roofs["compute"].items()}
    memory = _positive(roofs.get("memory"), f"{where}: roofs.memory")
    tables = doc.get("tables")
    if not isinstance(tables, Mapping) or not tables:
        raise InputError(f"{where}: tables must map each precision to its tables")
    dispatch = doc.get("dispatch")
    if dispatch is not None and not isinstance(dispatch, Mapping):
        raise InputError(f"{where}: dispatch must be an object or null, got {dispatch!r}")
    device = str(doc.get("device") or "")
    fresh = fresh_pages_of(dispatch, device, where)
    rows: dict[str, dict[str, tuple[dict, ...]]] = {}
    for p, by_key in tables.items():
        if p not in compute:
            raise InputError(f"{where}: tables.{p} has no compute roof in roofs.compute")
        if not isinstance(by_key, Mapping):
            raise InputError(f"{where}: tables.{p} must map table keys to rows")
        rows[p] = {}
        for key, table in by_key.items():
            if key not in TABLE_KEYS:
                raise InputError(
                    f"{where}: tables.{p}.{key}: unknown table key ({', '.join(TABLE_KEYS)})"
                )
            bare = _bare_seconds(dispatch, device, key)
            rows[p][key] = _load_rows(table, f"{where}: tables.{p}.{key}", bare, fresh)
    return Tables(
        where=where,
        source=str(doc.get("source", "?")),
        roofs={"compute": compute, "memory": memory},
        dispatch=None if dispatch is None else dict(dispatch),
        rows=rows,
    )


# --------------------------------------------------------------------------- from ceilings


def _candidate_bytes(cand: Mapping, item: int) -> int:
    """Bytes a ceilings candidate moves at the least: its operands read, result written
    (a convolution with backward also reads the output gradient, writes both gradients)."""
    p = cand.get("params") or {}
    if cand["kind"] == "gemm":
        n = int(p["n"])
        m, k = int(p.get("m", n)), int(p.get("k", n))
        return item * (m * k + k * n + m * n)
    hw, kernel = int(p["hw"]), int(p["kernel"])
    x = int(p["batch"]) * int(p["c_in"]) * hw * hw
    y = int(p["batch"]) * int(p["c_out"]) * hw * hw
    w = int(p["c_out"]) * int(p["c_in"]) * kernel * kernel
    fwd = x + w + y
    return item * (fwd + (y + x + w + x + w if p.get("backward") else 0))


def _candidate_what(cand: Mapping) -> str:
    p = cand.get("params") or {}
    if cand["kind"] == "gemm":
        n = p["n"]
        return f"gemm {p.get('m', n)}x{n}x{p.get('k', n)} (ceilings candidate)"
    what = "fwd+bwd" if p.get("backward") else "fwd"
    layout = " channels_last" if p.get("channels_last") else ""
    return (
        f"conv {p['kernel']}x{p['kernel']} n{p['batch']} c{p['c_in']}->{p['c_out']} "
        f"{p['hw']}x{p['hw']} {what}{layout} (ceilings candidate)"
    )


def _candidate_shape(cand: Mapping) -> dict:
    """A ceilings candidate's shape as the op inventory records one of its class."""
    p = cand.get("params") or {}
    if cand["kind"] == "gemm":
        n = int(p["n"])
        return {"m": int(p.get("m", n)), "n": n, "k": int(p.get("k", n))}
    hw, k, bwd = int(p["hw"]), int(p["kernel"]), bool(p.get("backward"))
    return {"n": int(p["batch"]), "c_in": int(p["c_in"]), "c_out": int(p["c_out"]), "h": hw,
            "w": hw, "h_out": hw, "w_out": hw, "kh": k, "kw": k, "stride": 1, "groups": 1,
            "input_grad": bwd, "weight_grad": bwd}  # fmt: skip


def _best_seconds(entry: Mapping) -> float | None:
    times = entry.get("times_s")
    best = times.get("min") if isinstance(times, Mapping) else None
    return float(best) if isinstance(best, (int, float)) and best > 0 else None


def _compute_tables(ceilings: Mapping, p: str, roofs: dict) -> dict[str, list[dict]]:
    """The GEMM and convolution candidates of precision ``p``'s measured roof as rows."""
    tables: dict[str, list[dict]] = {}
    for roof in ceilings["roofs"]:
        if not (roof.get("kind") == "compute" and roof.get("source") == "measured"):
            continue
        if roof.get("precision") not in roof_names(p):
            continue
        for cand in roof.get("candidates") or []:
            seconds = _best_seconds(cand)
            if seconds is None or cand.get("kind") not in ("gemm", "conv"):
                continue  # a candidate that failed or was unavailable
            params = cand.get("params") or {}
            key = "gemm" if cand["kind"] == "gemm" else "conv_fwd"
            if params.get("backward"):
                key = "conv_bwd"
            row = table_row(
                cand["flop"],
                _candidate_bytes(cand, operand_bytes(p)),
                seconds,
                roofs["compute"][p],
                roofs["memory"],
                _candidate_what(cand),
            )
            phase = "backward" if key == "conv_bwd" else "forward"
            tables.setdefault(key, []).append({**row, "shape": _candidate_shape(cand),
                                               "phase": phase})  # fmt: skip
    return tables


def _memory_tables(ceilings: Mapping, roofs: dict, p: str) -> dict[str, list[dict]]:
    """The STREAM benchmarks of the measured memory roofs as elementwise, optimizer and
    copy rows."""
    item = STREAM_ITEM_BYTES.get(str(ceilings.get("device")), 8)
    tables: dict[str, list[dict]] = {}
    for roof in ceilings["roofs"]:
        bench = roof.get("benchmark")
        seconds = _best_seconds(roof)
        if roof.get("kind") != "memory" or roof.get("source") != "measured":
            continue
        if bench not in STREAM_TABLES or seconds is None or not roof.get("bytes_per_repeat"):
            continue
        nbytes = int(roof["bytes_per_repeat"])
        arrays, flops_per_elem = STREAM_ARRAYS_AND_FLOPS[bench]
        flops = flops_per_elem * nbytes // (arrays * item)
        row = table_row(
            flops, nbytes, seconds, roofs["compute"][p], roofs["memory"], f"STREAM {bench}"
        )
        numel = nbytes // (arrays * item)
        for key in STREAM_TABLES[bench]:
            shape = {"numel": numel, "inputs": arrays - 1, "in_place": False, "tensors": 1}
            tables.setdefault(key, []).append({**row, "shape": shape, "phase": "forward"})
    return tables


def tables_from_ceilings(ceilings: Mapping, where: str = "ceilings.json") -> dict:
    """An efficiency document (source ``ceilings``) from a ceilings file alone: GEMM and
    convolution candidates per precision and the STREAM benchmarks, each at its best
    repeat. Other tables fall back (:data:`FALLBACK_TABLE`); no dispatch cost."""
    roofs, notes = roofs_from_ceilings(ceilings, None, where)
    tables = {}
    for p in roofs["compute"]:
        by_key = _compute_tables(ceilings, p, roofs)
        for key, rows in _memory_tables(ceilings, roofs, p).items():
            by_key.setdefault(key, []).extend(rows)
        tables[p] = {k: sorted(v, key=lambda r: r["ideal_s"]) for k, v in by_key.items()}
    method = (
        f"derived from {where} (no sweep): the GEMM and convolution roof candidates and "
        "the STREAM benchmarks at their best repeat, the statistic of the roofs (the roof's "
        "own benchmark has efficiency 1); their sizes are large, so smaller ops take the "
        "smallest row's efficiency (clamped)"
    )
    notes += [
        "a convolution candidate with backward is timed forward and backward together: "
        "its row stands for conv_bwd",
        "no dispatch cost: a ceilings file does not measure it",
    ]
    return {
        "schema_version": TABLES_SCHEMA_VERSION,
        "env": ceilings.get("env"),
        "device": ceilings.get("device"),
        "device_name": ceilings.get("device_name"),
        "threads": ceilings.get("threads"),
        "source": "ceilings",
        "method": method,
        "roofs": roofs,
        "dispatch": None,
        "tables": tables,
        "wall_s": None,
        "notes": notes,
    }


# --------------------------------------------------------------------------- other GPUs


class PeaksRow(Protocol):
    """What :func:`scaled_for_gpu` reads of a datasheet row (:class:`GpuPeaks`)."""

    key: str
    name: str
    mem_bw: float

    def flops(self, precision: str) -> float | None: ...


def scaled_for_gpu(doc: Mapping, from_row: PeaksRow, to_row: PeaksRow) -> dict:
    """``doc``'s tables carried to another GPU: each precision's compute roof scaled by
    the ratio of the datasheet peaks (its column), the memory roof by the bandwidths';
    efficiencies kept, each row's ideal time recomputed on the scaled roofs (its seconds
    then implied, not measured). A precision either row has no peak for is dropped."""
    out = copy.deepcopy(dict(doc))
    memory = out["roofs"]["memory"] * to_row.mem_bw / from_row.mem_bw
    compute, dropped = {}, []
    for p, value in out["roofs"]["compute"].items():
        have, want = from_row.flops(p), to_row.flops(p)
        if not have or not want:
            dropped.append(p)
            continue
        compute[p] = value * want / have
    out["roofs"] = {"compute": compute, "memory": memory}
    out["tables"] = {p: t for p, t in out["tables"].items() if p in compute}
    for p, by_key in out["tables"].items():
        for rows in by_key.values():
            for row in rows:
                row["ideal_s"] = ideal_seconds(row["flops"], row["bytes"], compute[p], memory)
                row["seconds"] = row["ideal_s"] / row["efficiency"]
    out["device_name"] = to_row.name
    out["scaled_from"] = {"from": from_row.key, "to": to_row.key}
    note = (
        f"scaled from {from_row.name} to {to_row.name} by the datasheet peaks "
        f"(memory x{to_row.mem_bw / from_row.mem_bw:.3g}): efficiencies kept as measured on "
        "the first, rows' seconds implied by them; dispatch costs kept from the first host"
    )
    if dropped:
        note += f"; dropped {', '.join(dropped)} (no datasheet peak on one of them)"
    out["notes"] = [*out.get("notes", []), note]
    return out
