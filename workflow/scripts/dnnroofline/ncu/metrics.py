"""Nsight Compute metric names, value and unit parsing, and the choice of tensor counters.

The metric names the pipeline asks ncu for and reads back (FLOPs per CUDA-core
instruction kind, tensor-path ops, bytes per memory level, time, peaks), how a value
and its unit become a number (decimal prefixes, n/a as missing), and which of the
overlapping tensor-path counters are summed. Used by the parser (:mod:`dnnroofline.ncu.parse`)
and by the capture (:mod:`dnnroofline.ncu.command`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

# --------------------------------------------------------------------------- metric names

TIME_METRIC = "gpu__time_duration.sum"
CYCLES_METRIC = "smsp__cycles_elapsed.avg"
CYCLES_RATE_METRIC = "smsp__cycles_elapsed.avg.per_second"
# sm__ variant: same meaning, used by some hand-made metric sets (e.g. NERSC scripts).
ALT_CYCLES_METRIC = "sm__cycles_elapsed.avg"
ALT_CYCLES_RATE_METRIC = "sm__cycles_elapsed.avg.per_second"

DRAM_METRIC = "dram__bytes.sum"
DRAM_READ_METRIC = "dram__bytes_read.sum"
DRAM_WRITE_METRIC = "dram__bytes_write.sum"
# Newer ncu versions / GPUs (e.g. GB202) name them dram__bytes_op_{read,write}.
DRAM_READ_ALT_METRIC = "dram__bytes_op_read.sum"
DRAM_WRITE_ALT_METRIC = "dram__bytes_op_write.sum"
DRAM_READ_METRICS = (DRAM_READ_METRIC, DRAM_READ_ALT_METRIC)
DRAM_WRITE_METRICS = (DRAM_WRITE_METRIC, DRAM_WRITE_ALT_METRIC)
L2_METRIC = "lts__t_bytes.sum"
L1_METRIC = "l1tex__t_bytes.sum"
BYTES_METRICS = (DRAM_METRIC, *DRAM_READ_METRICS, *DRAM_WRITE_METRICS, L2_METRIC, L1_METRIC)


_SASS_OP = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"


def _cuda_core(prefix: str, width: int = 1) -> tuple[tuple[str, int], ...]:
    """(counter, FLOPs per counted thread instruction) for add, mul and fma.

    ``width`` is the SIMD width of the instruction: HADD2/HMUL2/HFMA2 work on two
    halves at once, so one thread instruction is 2, 2 and 4 FLOPs, exactly as
    ncu's own ``derived__smsp__sass_thread_inst_executed_op_hadd_pred_on_x2``,
    ``..._hmul_pred_on_x2`` and ``..._hfma_pred_on_x4``.
    """
    return (
        (_SASS_OP.format(f"{prefix}add"), width),
        (_SASS_OP.format(f"{prefix}mul"), width),
        (_SASS_OP.format(f"{prefix}fma"), 2 * width),
    )


#: Packed two-wide FP32 instructions (FADD2, FMUL2, FFMA2; Blackwell, CC 10.0+):
#: 2, 2 and 4 FLOPs per thread instruction, as in ncu's roofline section.
PACKED_FP32_METRICS: tuple[tuple[str, int], ...] = (
    (_SASS_OP.format("fadd2"), 2),
    (_SASS_OP.format("fmul2"), 2),
    (_SASS_OP.format("ffma2"), 4),
)

#: CUDA-core FLOP counters per precision, with FLOPs per counted thread instruction.
CUDA_CORE_FLOP_METRICS: dict[str, tuple[tuple[str, int], ...]] = {
    "fp64": _cuda_core("d"),
    "fp32": (*_cuda_core("f"), *PACKED_FP32_METRICS),
    "fp16": _cuda_core("h", width=2),
}
CUDA_CORE_METRIC_NAMES = tuple(n for group in CUDA_CORE_FLOP_METRICS.values() for n, _ in group)
PACKED_FP32_METRIC_NAMES = tuple(n for n, _ in PACKED_FP32_METRICS)

#: Peak bytes per cycle of each memory level, and the clock of that level, from
#: the same capture: roof = ``<level>.peak_sustained`` x ``<unit>__cycles_elapsed
#: .avg.per_second``, as Nsight Compute's hierarchical roofline section does.
MEMORY_PEAK_METRICS: dict[str, tuple[str, str]] = {
    "dram": ("dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second"),
    "l2": ("lts__t_bytes.sum.peak_sustained", "lts__cycles_elapsed.avg.per_second"),
    "l1": ("l1tex__t_bytes.sum.peak_sustained", "l1tex__cycles_elapsed.avg.per_second"),
}
PEAK_METRIC_NAMES = tuple(m for pair in MEMORY_PEAK_METRICS.values() for m in pair)

# The counters Nsight Compute's own hierarchical roofline chart draws L1 and L2 from
# (sections/SpeedOfLight_Hierarchical{Single,Half,Double,Tensor}RooflineChart.section
# of Nsight Compute 2025.3.1, the version of the committed H100 captures): L1 is the
# LSU writeback's active cycles x 128 bytes, L2 the L2-to-crossbar active cycles x 32
# bytes (what L2 sends towards the SMs), each with its own ``.peak_sustained`` and the
# unit's clock. The L1 counter is named per architecture; the capture reads the names
# from the installed ncu's section files where it can (dnnroofline.ncu.hierarchy).
#: L1 writeback active cycles: CC <= 7.2, 7.5-8.9, >= 9.0 (as the sections' filters).
L1_WRITEBACK_METRICS = (
    "l1tex__lsu_writeback_active.sum",
    "l1tex__lsu_writeback_active_mem_lg.sum",
    "l1tex__lsu_writeback_active_mem_lgds.sum",
)
L1_WRITEBACK_BYTES_PER_CYCLE = 128
L2_XBAR_METRIC = "lts__lts2xbar_cycles_active.sum"
L2_XBAR_BYTES_PER_CYCLE = 32
#: Shared-memory bytes moved by SASS load/store instructions (LDS, STS, LDSM, LDGSTS,
#: atomics): SASS-patched, so the kernel pass gives it. Not TMA's writes into shared
#: memory nor wgmma's operand reads, which are no SASS load or store.
SHARED_BYTES_METRIC = "sm__sass_data_bytes_mem_shared.sum"
#: Hierarchical-roofline peaks: (active-cycles counter's peak, bytes per cycle, clock).
HIERARCHY_PEAK_METRICS: dict[str, tuple[tuple[str, int, str], ...]] = {
    "l1": tuple(
        (f"{m}.peak_sustained", L1_WRITEBACK_BYTES_PER_CYCLE, MEMORY_PEAK_METRICS["l1"][1])
        for m in L1_WRITEBACK_METRICS
    ),
    "l2": (
        (f"{L2_XBAR_METRIC}.peak_sustained", L2_XBAR_BYTES_PER_CYCLE, MEMORY_PEAK_METRICS["l2"][1]),
    ),
}
HIERARCHY_COUNT_METRICS = (*L1_WRITEBACK_METRICS, L2_XBAR_METRIC)
HIERARCHY_PEAK_METRIC_NAMES = tuple(
    peak for variants in HIERARCHY_PEAK_METRICS.values() for peak, _, _ in variants
)

#: Tensor-pipe *instruction* counters. Diagnostic only: never turned into FLOPs. The
#: first two are the same total at two levels (the first one present is read).
TENSOR_PIPE_INST_METRICS = (
    "smsp__inst_executed_pipe_tensor.sum",
    "sm__inst_executed_pipe_tensor.sum",
)
#: Hopper counts its tensor instructions per kind: HMMA (mma.sync) and HGMMA (wgmma,
#: which cuBLAS and cuDNN use on H100); summed where no total above is present.
TENSOR_PIPE_OP_INST_METRICS = (
    "sm__inst_executed_pipe_tensor_op_hmma.sum",
    "sm__inst_executed_pipe_tensor_op_gmma.sum",
)


def tensor_pipe_instructions(values: Mapping[str, Decimal | None]) -> Decimal | None:
    """One kernel's tensor-pipe instructions: its total, else the sum of its kinds."""
    for name in TENSOR_PIPE_INST_METRICS:
        if values.get(name) is not None:
            return values[name]
    kinds = [values[n] for n in TENSOR_PIPE_OP_INST_METRICS if values.get(n) is not None]
    return sum(kinds, Decimal(0)) if kinds else None


TENSOR_OPS_RE = re.compile(
    r"^sm__ops_path_tensor_"
    r"(?:op_(?P<op>[a-z0-9]+)_)?"
    r"src_(?P<src>[a-z0-9]+(?:_(?!dst_|sparsity_)[a-z0-9]+)*)"
    r"(?:_dst_(?P<dst>[a-z0-9]+))?"
    r"(?:_sparsity_(?P<sp>on|off))?"
    r"\.sum$"
)
FLOAT_TENSOR_TYPES = frozenset(
    {"fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp6", "fp4", "e4m3", "e5m2", "e2m1"}
)
INT_TENSOR_TYPES = frozenset({"int1", "int4", "int8", "b1", "u4", "s4", "u8", "s8"})

# Display names of the details page that mean the same as a raw metric.
DETAILS_ALIASES = {"Duration": TIME_METRIC}

_FIXED_METRICS = frozenset(
    {
        TIME_METRIC,
        CYCLES_METRIC,
        CYCLES_RATE_METRIC,
        ALT_CYCLES_METRIC,
        ALT_CYCLES_RATE_METRIC,
        *BYTES_METRICS,
        *CUDA_CORE_METRIC_NAMES,
        *TENSOR_PIPE_INST_METRICS,
        *TENSOR_PIPE_OP_INST_METRICS,
        *PEAK_METRIC_NAMES,
        *HIERARCHY_COUNT_METRICS,
        *HIERARCHY_PEAK_METRIC_NAMES,
        SHARED_BYTES_METRIC,
    }
)

# Expected dimension of each metric (after unit parsing); None = any count-like unit.
METRIC_DIMENSIONS: dict[str, frozenset[str]] = {
    TIME_METRIC: frozenset({"second"}),
    **{m: frozenset({"byte"}) for m in BYTES_METRICS},
    CYCLES_METRIC: frozenset({"cycle", ""}),
    ALT_CYCLES_METRIC: frozenset({"cycle", ""}),
    CYCLES_RATE_METRIC: frozenset({"cycle/second", "1/second"}),
    ALT_CYCLES_RATE_METRIC: frozenset({"cycle/second", "1/second"}),
    **{peak: frozenset({"byte/cycle", "byte", ""}) for peak, _ in MEMORY_PEAK_METRICS.values()},
    **{rate: frozenset({"cycle/second", "1/second"}) for _, rate in MEMORY_PEAK_METRICS.values()},
    **{m: frozenset({"cycle", ""}) for m in HIERARCHY_COUNT_METRICS},
    **{m: frozenset({"cycle", "cycle/cycle", ""}) for m in HIERARCHY_PEAK_METRIC_NAMES},
    SHARED_BYTES_METRIC: frozenset({"byte"}),
}
NOT_COUNT_DIMENSIONS = frozenset({"second", "byte", "%"})


def is_roofline_metric(name: str) -> bool:
    """True for the metrics this parser reads (all others are ignored)."""
    return name in _FIXED_METRICS or bool(TENSOR_OPS_RE.match(name))


# --------------------------------------------------------------------------- values and units

_PLAIN_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
_GROUPED_NUMBER = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][+-]?\d+)?$")
_MISSING = frozenset({"", "n/a", "na", "nan", "-nan", "none", "(!) n/a"})


def parse_number(text: str) -> Decimal | None:
    """``"159,383,552"`` -> Decimal; ``"n/a"`` or ``""`` -> None; garbage -> ValueError.

    Commas are accepted only as thousands separators (groups of three digits), so
    a decimal comma such as ``"1,5"`` is rejected rather than misread.
    """
    s = text.strip()
    if s.lower() in _MISSING:
        return None
    if _GROUPED_NUMBER.match(s):
        s = s.replace(",", "")
    elif not _PLAIN_NUMBER.match(s):
        raise ValueError(f"not a number: {text!r}")
    try:
        value = Decimal(s)
    except InvalidOperation as err:  # pragma: no cover - the regexes above guard this
        raise ValueError(f"not a number: {text!r}") from err
    if not value.is_finite():  # pragma: no cover - the regexes do not admit inf/nan
        return None
    return value


_DECIMAL_PREFIX = {
    "": Decimal(1),
    "K": Decimal(10) ** 3,
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
}
_BINARY_PREFIX = {
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
}
_TIME_UNITS = {
    "psecond": Decimal("1e-12"),
    "ps": Decimal("1e-12"),
    "nsecond": Decimal("1e-9"),
    "ns": Decimal("1e-9"),
    "usecond": Decimal("1e-6"),
    "us": Decimal("1e-6"),
    "\u00b5s": Decimal("1e-6"),
    "\u03bcs": Decimal("1e-6"),
    "msecond": Decimal("1e-3"),
    "ms": Decimal("1e-3"),
    "second": Decimal(1),
    "sec": Decimal(1),
    "s": Decimal(1),
}
_COUNT_BASES = (
    "byte",
    "inst",
    "cycle",
    "warp",
    "thread",
    "block",
    "sector",
    "request",
    "wavefront",
    "transaction",
    "instruction",
    "flop",
    "ops",
    "op",
)
_PREFIXED = re.compile(
    r"^(?P<prefix>Ki|Mi|Gi|Ti|[kKMGTPE]?)(?P<base>" + "|".join(_COUNT_BASES) + r"|B)$"
)
_HERTZ = re.compile(r"^(?P<prefix>[kKMGT]?)hz$", re.IGNORECASE)


def unit_scale(unit: str) -> tuple[Decimal, str]:
    """Factor to base units and the base dimension of an ncu unit string.

    ``"Kbyte"`` -> (1000, "byte"), ``"usecond"`` -> (1e-6, "second"),
    ``"Gbyte/second"`` -> (1e9, "byte/second"), ``"Ghz"`` -> (1e9, "1/second"),
    ``"cycle/nsecond"`` -> (1e9, "cycle/second"), ``"%"`` -> (1, "%").
    An unknown unit is left as it is (factor 1, its own name as the dimension).
    Prefixes are decimal (SI); only explicit binary prefixes (``KiB``) use 1024.
    """
    u = unit.strip()
    if u in ("", "%"):
        return Decimal(1), u
    if "/" in u:
        num, _, den = u.partition("/")
        fn, dn = unit_scale(num) if num.strip() not in ("", "1") else (Decimal(1), "1")
        fd, dd = unit_scale(den)
        return fn / fd, f"{dn}/{dd}"
    if u in _TIME_UNITS:
        return _TIME_UNITS[u], "second"
    m = _HERTZ.match(u)
    if m:
        return _DECIMAL_PREFIX[m.group("prefix")], "1/second"
    m = _PREFIXED.match(u)
    if m:
        prefix, base = m.group("prefix"), m.group("base")
        factor = _BINARY_PREFIX[prefix] if prefix in _BINARY_PREFIX else _DECIMAL_PREFIX[prefix]
        return factor, "byte" if base == "B" else base
    return Decimal(1), u


# --------------------------------------------------------------------------- tensor counters


@dataclass(frozen=True)
class TensorCounter:
    name: str
    op: str | None  # None: aggregate over every instruction (hmma, hgmma, ...)
    src: frozenset[str]
    dst: str | None  # None: any destination type
    sparsity: str | None  # "on", "off" or None (both)

    @property
    def is_float(self) -> bool:
        return bool(self.src) and self.src <= FLOAT_TENSOR_TYPES

    def covers(self, other: TensorCounter) -> bool:
        """Every op counted by ``other`` is also counted by ``self`` (sparsity aside)."""
        return (
            (self.op is None or self.op == other.op)
            and self.src >= other.src
            and (self.dst is None or self.dst == other.dst)
        )


def parse_tensor_counter(name: str) -> TensorCounter | None:
    m = TENSOR_OPS_RE.match(name)
    if not m:
        return None
    return TensorCounter(
        name=name,
        op=m.group("op"),
        src=frozenset(m.group("src").split("_")),
        dst=m.group("dst"),
        sparsity=m.group("sp"),
    )


def select_tensor_counters(names: list[str] | set[str]) -> tuple[list[str], list[str]]:
    """Choose the tensor-path counters whose sum is the tensor FLOP count, with no overlap.

    Returns ``(selected, notes)``. Rules, in order:

    1. Integer sources are not FLOPs; ``_sparsity_on`` counters are left out (the
       design counts dense ``_sparsity_off`` work).
    2. For one (instruction, source, destination), ``_sparsity_off`` is preferred
       to the plain counter (which also holds sparse ops).
    3. Where aggregate counters (``sm__ops_path_tensor_src_*``, every instruction)
       exist for a source type, the per-instruction breakdown
       (``sm__ops_path_tensor_op_hmma_*``, ``..._op_hgmma_*``) of that type is
       dropped: it is already inside the aggregate.
    4. A counter covered by a broader one (``src_fp16`` covers
       ``src_fp16_dst_fp32``; ``src_fp16_bf16_tf32_dst_fp32`` covers
       ``src_bf16_dst_fp32``) is dropped.
    Any overlap left after that is reported in ``notes``.
    """
    notes: list[str] = []
    counters = [c for c in (parse_tensor_counter(n) for n in sorted(set(names))) if c]
    floats = []
    for c in counters:
        if c.is_float:
            floats.append(c)
        elif not (c.src <= INT_TENSOR_TYPES):
            notes.append(f"unrecognised tensor counter {c.name}: not counted as FLOPs")
    dense = [c for c in floats if c.sparsity != "on"]
    by_key: dict[tuple, TensorCounter] = {}
    for c in dense:
        key = (c.op, c.src, c.dst)
        if key not in by_key or c.sparsity == "off":
            by_key[key] = c
    chosen = list(by_key.values())
    aggregate_types = set().union(*(c.src for c in chosen if c.op is None)) if chosen else set()
    chosen = [c for c in chosen if c.op is None or not (c.src & aggregate_types)]
    kept = [
        c
        for c in chosen
        if not any(
            d is not c and d.covers(c) and not (c.covers(d) and d.name > c.name) for d in chosen
        )
    ]
    for i, a in enumerate(kept):
        for b in kept[i + 1 :]:
            same_op = a.op is None or b.op is None or a.op == b.op
            same_dst = a.dst is None or b.dst is None or a.dst == b.dst
            if same_op and same_dst and a.src & b.src:
                notes.append(
                    f"tensor counters {a.name} and {b.name} overlap: "
                    "tensor FLOPs may be overcounted"
                )
    return sorted(c.name for c in kept), notes
