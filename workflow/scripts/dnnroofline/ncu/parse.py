"""Parse Nsight Compute (``ncu``) CSV output into per-kernel and total counters.

The accepted input (the details or the raw page, with ncu's and the application's
own lines around the table) is read by :mod:`dnnroofline.ncu.table`.

Method (see docs/gpu.md):

* Units are parsed per value and are decimal: 1 Kbyte = 1,000 bytes. Times go to
  seconds, rates to "per second". Scaling is done in :class:`decimal.Decimal`, so
  "1.08 Mbyte" is exactly 1,080,000 bytes.
* ``n/a`` (and an empty cell) is *missing*, never 0. A quantity whose counters are
  all missing is ``None`` (JSON ``null``).
* CUDA-core FLOPs: ``smsp__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum``
  with each FMA counted as 2 FLOPs, less the half-precision instructions that do no
  arithmetic (HFMA2.MMA moves, HADD2.F32 widenings): see :mod:`dnnroofline.ncu.fp16`.
* Tensor-core FLOPs: ``sm__ops_path_tensor_*.sum`` counters. They count math
  operations (2 per multiply-accumulate), so they are used as they are; no fixed
  FLOPs-per-instruction multiplier on ``*_inst_executed_pipe_tensor`` is ever
  applied. Overlapping counters (an aggregate and its per-instruction breakdown,
  ``_sparsity_off`` and the plain counter, ``src_fp16`` and
  ``src_fp16_dst_fp32``) are never added twice: see :func:`select_tensor_counters`.
  Integer tensor ops (``src_int8`` ...) are not FLOPs and are left out.
* Bytes: ``dram__bytes.sum`` (else ``dram__bytes_read.sum + dram__bytes_write.sum``),
  ``lts__t_bytes.sum`` (L2), ``l1tex__t_bytes.sum`` (L1).
* Time: ``gpu__time_duration.sum``, else
  ``smsp__cycles_elapsed.avg / smsp__cycles_elapsed.avg.per_second``.

Everything here is pure: text in, dict out. :func:`parse_ncu_csv` only reads the
file it is given.
"""

from __future__ import annotations

import gzip
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.ncu.fp16 import corrections_summary, without_non_arithmetic_half
from dnnroofline.ncu.hierarchy import issues_wgmma, wgmma_totals
from dnnroofline.ncu.metrics import (
    ALT_CYCLES_METRIC,
    ALT_CYCLES_RATE_METRIC,
    CUDA_CORE_FLOP_METRICS,
    CUDA_CORE_METRIC_NAMES,
    CYCLES_METRIC,
    CYCLES_RATE_METRIC,
    DRAM_METRIC,
    DRAM_READ_METRIC,
    DRAM_READ_METRICS,
    DRAM_WRITE_METRIC,
    DRAM_WRITE_METRICS,
    HIERARCHY_PEAK_METRICS,
    L1_METRIC,
    L1_WRITEBACK_BYTES_PER_CYCLE,
    L1_WRITEBACK_METRICS,
    L2_METRIC,
    L2_XBAR_BYTES_PER_CYCLE,
    L2_XBAR_METRIC,
    MEMORY_PEAK_METRICS,
    SHARED_BYTES_METRIC,
    TENSOR_OPS_RE,
    TIME_METRIC,
    parse_tensor_counter,
    select_tensor_counters,
    tensor_pipe_instructions,
)
from dnnroofline.ncu.table import Kernel, Table, read_table

# --------------------------------------------------------------------------- quantities


def _out(value: Decimal | None, integral: bool = True) -> int | float | None:
    if value is None:
        return None
    if integral and value == value.to_integral_value() and abs(value) < 2**63:
        return int(value)
    return float(value)


class _Missing:
    """Counts kernels where a quantity could not be computed, per reason."""

    def __init__(self) -> None:
        self.reasons: Counter[str] = Counter()

    def add(self, reason: str) -> None:
        self.reasons[reason] += 1


def _weighted_sum(
    values: dict[str, Decimal | None],
    terms: tuple[tuple[str, int], ...] | list[tuple[str, int]],
    what: str,
    missing: _Missing,
) -> Decimal | None:
    found = [(n, f) for n, f in terms if n in values]
    known = [values[n] * f for n, f in found if values[n] is not None]
    if found and len(known) < len(found):
        gone = sorted(n for n, _ in found if values[n] is None)
        if known:
            missing.add(f"{what}: {', '.join(gone)} n/a, summed the other counters")
        else:
            missing.add(f"{what}: {', '.join(gone)} n/a, {what} is null")
    return sum(known, Decimal(0)) if known else None


def _kernel_quantities(k: Kernel, tensor_names: list[str], missing: _Missing) -> dict:
    v = k.values
    flop: dict[str, Decimal | None] = {}
    for prec, terms in CUDA_CORE_FLOP_METRICS.items():
        flop[prec] = _weighted_sum(v, terms, f"flop.{prec}", missing)
    flop["tensor"] = _weighted_sum(v, [(n, 1) for n in tensor_names], "flop.tensor", missing)
    # HFMA2.MMA moves and HADD2.F32 conversions are no FLOPs (dnnroofline.ncu.fp16)
    flop["fp16"], removed = without_non_arithmetic_half(v, flop["fp16"])
    parts = [x for x in flop.values() if x is not None]
    flop["total"] = sum(parts, Decimal(0)) if parts else None

    time = v.get(TIME_METRIC)
    if time is None:
        for cyc, rate in (
            (CYCLES_METRIC, CYCLES_RATE_METRIC),
            (ALT_CYCLES_METRIC, ALT_CYCLES_RATE_METRIC),
        ):
            c, r = v.get(cyc), v.get(rate)
            if c is not None and r is not None and r > 0:
                time = c / r
                break

    read = next((v[m] for m in DRAM_READ_METRICS if v.get(m) is not None), None)
    write = next((v[m] for m in DRAM_WRITE_METRICS if v.get(m) is not None), None)
    dram = v.get(DRAM_METRIC)
    if dram is None and read is not None and write is not None:
        dram = read + write
    if dram is None and (read is None) != (write is None) and DRAM_METRIC not in v:
        gone = " / ".join(DRAM_WRITE_METRICS if write is None else DRAM_READ_METRICS)
        missing.add(f"bytes.dram: {gone} absent or n/a, DRAM bytes are null")
    l1_cycles = next((v[m] for m in L1_WRITEBACK_METRICS if v.get(m) is not None), None)
    l2_cycles = v.get(L2_XBAR_METRIC)
    bytes_ = {
        "dram": dram,
        "l2": v.get(L2_METRIC),
        "l1": v.get(L1_METRIC),
        "dram_read": read,
        "dram_write": write,
        # ncu's hierarchical-chart definitions (ncu_metrics.HIERARCHY_PEAK_METRICS)
        "l1_writeback": None if l1_cycles is None else l1_cycles * L1_WRITEBACK_BYTES_PER_CYCLE,
        "l2_xbar": None if l2_cycles is None else l2_cycles * L2_XBAR_BYTES_PER_CYCLE,
        "shared": v.get(SHARED_BYTES_METRIC),
    }
    wgmma = issues_wgmma(v)
    return {"time_s": time, "flop": flop, "bytes": bytes_, "wgmma": wgmma, "removed": removed}


def _sum_optional(values: list[Decimal | None]) -> Decimal | None:
    known = [x for x in values if x is not None]
    return sum(known, Decimal(0)) if known else None


FLOP_KEYS = ("fp64", "fp32", "fp16", "tensor", "total")
BYTES_KEYS = (
    "dram",
    "l2",
    "l1",
    "dram_read",
    "dram_write",
    "l1_writeback",
    "l2_xbar",
    "shared",
)


def _missing_roofline_metrics(present: set[str], tensor_names: list[str]) -> list[str]:
    problems = []
    if not (set(CUDA_CORE_METRIC_NAMES) & present) and not tensor_names:
        problems.append(
            "no FLOP counters: need "
            "smsp__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum "
            "and/or sm__ops_path_tensor_*_sparsity_off.sum"
        )
    has_read = bool(set(DRAM_READ_METRICS) & present)
    has_write = bool(set(DRAM_WRITE_METRICS) & present)
    if DRAM_METRIC not in present and not (has_read and has_write):
        problems.append(
            f"no DRAM byte counters: need {DRAM_METRIC} or {DRAM_READ_METRIC} + {DRAM_WRITE_METRIC}"
        )
    return problems


def _kernel_entry(k: Kernel, q: Mapping) -> dict:
    """One kernel's record in the parsed JSON, from its quantities."""
    return {
        "id": k.id,
        "name": k.name,
        "time_s": _out(q["time_s"], integral=False),
        "flop": {key: _out(q["flop"][key]) for key in FLOP_KEYS},
        "bytes": {key: _out(q["bytes"][key]) for key in BYTES_KEYS},
        "wgmma": q["wgmma"],
        "flop_removed": {r.rule: _out(r.flop) for r in q["removed"]},
    }


def _sum_over_kernels(
    per_kernel: list[dict], path: tuple[str, ...], incomplete: dict[str, int]
) -> Decimal | None:
    """One quantity summed over the kernels that have it; where only some have it,
    ``incomplete`` counts the others under the quantity's dotted path."""
    vals = []
    for q in per_kernel:
        x: Any = q
        for p in path:
            x = x[p]
        vals.append(x)
    gaps = sum(1 for x in vals if x is None)
    if 0 < gaps < len(vals):
        incomplete[".".join(path)] = gaps
    return _sum_optional(vals)


def _tensor_counter_warnings(
    table: Table, tensor_names: list[str], tensor_flop: Decimal | None
) -> tuple[Decimal | None, list[str]]:
    """(tensor-pipe instructions, warnings): tensor work the chosen counters miss, seen
    through the pipe's instruction count or the per-instruction counters."""
    warnings = []
    pipe = _sum_optional([tensor_pipe_instructions(k.values) for k in table.kernels])
    if tensor_flop is None and pipe:
        warnings.append(
            f"{_out(pipe)} tensor-pipe instructions executed but the CSV has no "
            "sm__ops_path_tensor_* counters: tensor-core FLOPs are not counted (null)"
        )
    per_instruction = [
        n for n in table.present if (c := parse_tensor_counter(n)) is not None and c.op is not None
    ]
    if tensor_flop is not None and set(per_instruction) - set(tensor_names):
        # The aggregates are taken to hold every instruction path; check it.
        op_names, _ = select_tensor_counters(per_instruction)
        op_sum = _sum_optional([k.values.get(m) for k in table.kernels for m in op_names])
        if op_sum is not None and op_sum > tensor_flop:
            warnings.append(
                f"per-instruction tensor counters ({', '.join(op_names)}) sum to {_out(op_sum)}, "
                f"more than the aggregate counters used ({_out(tensor_flop)}): "
                "tensor FLOPs may be undercounted"
            )
    return pipe, warnings


def parse_ncu_text(
    text: str, source: str = "<ncu csv>", *, require_roofline_metrics: bool = False
) -> dict:
    """Parse the text of an ncu CSV (details or raw page). See :func:`parse_ncu_csv`."""
    table = read_table(text, source)
    if not table.kernels:
        msgs = "".join(f"\n  {m}" for m in table.messages[-10:])
        raise InputError(f"{source}: the ncu table has a header but no kernel rows{msgs}")
    tensor_names, notes = select_tensor_counters(
        {n for n in table.present if TENSOR_OPS_RE.match(n)}
    )
    warnings = list(table.warnings) + notes
    if require_roofline_metrics:
        problems = _missing_roofline_metrics(table.present, tensor_names)
        if problems:
            raise InputError(
                f"{source}: cannot place this capture on a roofline: " + "; ".join(problems)
            )

    missing = _Missing()
    per_kernel = [_kernel_quantities(k, tensor_names, missing) for k in table.kernels]
    n = len(per_kernel)
    incomplete: dict[str, int] = {}
    time_total = _sum_over_kernels(per_kernel, ("time_s",), incomplete)
    flop_totals = {
        key: _sum_over_kernels(per_kernel, ("flop", key), incomplete) for key in FLOP_KEYS
    }
    bytes_totals = {
        key: _sum_over_kernels(per_kernel, ("bytes", key), incomplete) for key in BYTES_KEYS
    }

    if require_roofline_metrics:
        nulls = [
            name
            for name, x in (("FLOP", flop_totals["total"]), ("DRAM bytes", bytes_totals["dram"]))
            if x is None
        ]
        if nulls:
            raise InputError(
                f"{source}: the counters are present but n/a for every kernel, "
                f"so {' and '.join(nulls)} "
                "cannot be computed (does this GPU support them?)"
            )

    for reason, count in sorted(missing.reasons.items()):
        warnings.append(f"{count} kernel(s): {reason}")
    for path, gaps in incomplete.items():
        warnings.append(f"totals.{path} sums {n - gaps} of {n} kernels; {gaps} kernel(s) lack it")
    pipe, tensor_warnings = _tensor_counter_warnings(table, tensor_names, flop_totals["tensor"])
    warnings += tensor_warnings

    ai = None
    if flop_totals["total"] is not None and bytes_totals["dram"]:
        ai = float(flop_totals["total"] / bytes_totals["dram"])
    ccs = sorted({k.cc for k in table.kernels if k.cc})
    return {
        "source_file": source,
        "layout": table.layout,
        "kernels": [_kernel_entry(k, q) for k, q in zip(table.kernels, per_kernel, strict=True)],
        "totals": {
            "kernels": n,
            "time_s": _out(time_total, integral=False),
            "flop": {key: _out(flop_totals[key]) for key in FLOP_KEYS},
            "bytes": {key: _out(bytes_totals[key]) for key in BYTES_KEYS},
            "arithmetic_intensity_dram": ai,
            "incomplete": incomplete,
            "wgmma": wgmma_totals([(q["wgmma"], q["flop"]["total"]) for q in per_kernel]),
        },
        "flop_corrections": corrections_summary(
            [q["removed"] for q in per_kernel], flop_totals["total"]
        ),
        "tensor_counters_used": tensor_names,
        "tensor_pipe_instructions": _out(pipe),
        "memory_roofs": memory_roofs(table.kernels),
        "metrics_found": sorted(table.present),
        "compute_capability": ccs[0] if len(ccs) == 1 else (ccs or None),
        "warnings": warnings,
        "ncu_messages": table.messages,
    }


#: Source name of the bandwidth roofs an ncu capture states itself: theoretical peaks
#: (peak bytes per cycle x the unit's clock), not measurements. For DRAM that is the
#: datasheet figure: bus width x memory clock.
NCU_THEORETICAL = "ncu-theoretical"


def _roof_candidates(level: str) -> list[tuple[str, int, str]]:
    """(peak counter, bytes per counted unit, clock) per level, preferred first: the
    hierarchical chart's own counters, then the byte counters' peaks."""
    legacy = (MEMORY_PEAK_METRICS[level][0], 1, MEMORY_PEAK_METRICS[level][1])
    return [*HIERARCHY_PEAK_METRICS.get(level, ()), legacy]


def memory_roofs(kernels: list[Kernel]) -> dict[str, dict | None]:
    """L1, L2 and DRAM bandwidth roofs from the capture's own counters.

    Per level: a peak per cycle times that unit's measured clock
    (``<unit>__cycles_elapsed.avg.per_second``). L1 and L2 take the counters of ncu's
    hierarchical chart where the capture has them (LSU writeback cycles x 128 B,
    L2-to-crossbar cycles x 32 B), else ``l1tex__t_bytes`` / ``lts__t_bytes``
    ``.peak_sustained``. Over several rows (kernels) the median of the per-row
    products is taken. None for a level without a peak and its clock.
    """
    out: dict[str, dict | None] = {}
    for level in MEMORY_PEAK_METRICS:
        out[level] = None
        for peak_name, per_unit, rate_name in _roof_candidates(level):
            pairs = [
                (k.values[peak_name] * per_unit, k.values[rate_name])
                for k in kernels
                if k.values.get(peak_name) is not None and k.values.get(rate_name) is not None
            ]
            if not pairs:
                continue
            pairs.sort(key=lambda pr: pr[0] * pr[1])
            peak, rate = pairs[len(pairs) // 2]
            out[level] = {
                "bytes_per_s": float(peak * rate),
                "bytes_per_cycle": float(peak),
                "clock_hz": float(rate),
                "metrics": [peak_name + (f" x {per_unit}" if per_unit != 1 else ""), rate_name],
                "rows": len(pairs),
                "source": NCU_THEORETICAL,
                "ncu_chart": level == "dram" or per_unit != 1,
            }
            break
    return out


def tensor_counter_gap(parsed: Mapping, requested: Sequence[str] = ()) -> list[str] | None:
    """The tensor-op counters that are missing, when the tensor pipe ran without them.

    None when there is no gap: no tensor-pipe instructions, or a usable
    ``sm__ops_path_tensor_*`` count. Otherwise the names of the tensor-op counters
    that were requested (or, with none requested, the pattern) and are not in the
    capture: the step's tensor-core FLOPs are unknown, never zero.
    """
    pipe = parsed.get("tensor_pipe_instructions")
    tensor = (parsed.get("totals") or {}).get("flop", {}).get("tensor")
    if not pipe or tensor is not None:
        return None
    found = set(parsed.get("metrics_found") or [])
    names = [m for m in requested if TENSOR_OPS_RE.match(m) and m not in found]
    return names or ["sm__ops_path_tensor_*_sparsity_off.sum (none collected)"]


def read_text(path: str | os.PathLike) -> str:
    """The file as text: UTF-8 (a byte-order mark is dropped), undecodable bytes replaced;
    a ``.gz`` file (as examples/ keep kernel-pass CSVs) is decompressed first."""
    data = Path(path).read_bytes()
    if str(path).endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8-sig", errors="replace")


def parse_ncu_csv(path: str | os.PathLike, *, require_roofline_metrics: bool = False) -> dict:
    """Parse an ncu CSV file into the parsed-ncu JSON shape (docs/contracts.md).

    Returns ``{source_file, layout, kernels: [...], totals: {...}, ...}``. Raises
    :class:`~dnnroofline.errors.InputError` naming the file (and line) for a file
    with no table (quoting ncu's ``==ERROR==`` lines), a truncated or malformed
    row, a value that is not a number, a unit that does not fit its metric, or a
    table with no kernels. With ``require_roofline_metrics`` it also raises when
    the CSV has no FLOP counters or no DRAM byte counters, naming them.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{path}: no such ncu CSV file")
    return parse_ncu_text(
        read_text(p), str(path), require_roofline_metrics=require_roofline_metrics
    )


def empty_result(source: str) -> dict:
    """The parsed-ncu shape with no kernels and null totals (a failed or missing capture)."""
    return {
        "source_file": source,
        "layout": None,
        "kernels": [],
        "totals": {
            "kernels": 0,
            "time_s": None,
            "flop": dict.fromkeys(FLOP_KEYS),
            "bytes": dict.fromkeys(BYTES_KEYS),
            "arithmetic_intensity_dram": None,
            "incomplete": {},
        },
        "flop_corrections": [],
        "tensor_counters_used": [],
        "tensor_pipe_instructions": None,
        "memory_roofs": dict.fromkeys(MEMORY_PEAK_METRICS),
        "metrics_found": [],
        "compute_capability": None,
        "warnings": [],
        "ncu_messages": [],
    }
