"""The memory levels of the hierarchical roofline: which counters give each level's
bytes, and where no counter can.

Counters. Nsight Compute's own hierarchical roofline chart
(``sections/SpeedOfLight_Hierarchical{Single,Half,Double,Tensor}RooflineChart.section``)
takes L1 from the LSU writeback's active cycles x 128 bytes and L2 from the
L2-to-crossbar active cycles x 32 bytes, each against its own ``.peak_sustained``.
The capture reads those names from the installed ncu's section files
(:func:`section_counters`); :func:`table_counters` is the fallback, copied from the
section files of Nsight Compute 2025.3.1, the version of the committed H100 captures (read
in a copy of that release's ``sections/`` kept in the public GitHub repository
xingxerx/Qallow, commit e3efc6f, whose ``ncu`` link points into "Nsight Compute
2025.3.1"; their L1 entries carry ``Filter { MinArch/MaxArch }`` and an ``Options``
alternative for CC_90 and newer, and ``MetricDefinitions`` multiply by 128 and 32):

==========  ===============================================  =========================
CC          L1 (x 128 B per active cycle)                    L2 (x 32 B per cycle)
==========  ===============================================  =========================
<= 7.2      ``l1tex__lsu_writeback_active.sum``              ``lts__lts2xbar_cycles_active.sum``
7.5 - 8.9   ``l1tex__lsu_writeback_active_mem_lg.sum``       ``lts__lts2xbar_cycles_active.sum``
>= 9.0      ``l1tex__lsu_writeback_active_mem_lgds.sum``     ``lts__lts2xbar_cycles_active.sum``
==========  ===============================================  =========================

Captures made before these were collected hold ``l1tex__t_bytes`` (L1 tag stage) and
``lts__t_bytes`` (every L2 request, from any unit); the plot then uses those, named as
such, against their own peaks.

Where no counter sees L1. On Hopper (sm_90) the warpgroup GEMM kernels
(``sm90_xmma_*``, ``nvjet_*``, CUTLASS 3 kernels) fill shared memory by TMA and
``wgmma`` reads its operands from there: neither is an LSU load or store, so neither
``l1tex__t_*``, the LSU writeback nor the SASS shared-memory bytes count it. In the
committed resnet50 amp capture the 151 kernels that ran wgmma do 92% of the FLOPs (91%
on their HGMMA path alone), move 80.7 GB through ``lts__t_bytes`` and 0.50 GB through
``l1tex__t_bytes`` (kernel pass; tests/test_ncu_hierarchy.py). A step whose
FLOPs come mostly from such kernels has no measurable L1 level: it is reported as
such, never drawn as a point. L2 (TMA loads pass through it) and DRAM stay measurable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from dnnroofline.ncu.metrics import (
    L1_METRIC,
    L1_WRITEBACK_BYTES_PER_CYCLE,
    L1_WRITEBACK_METRICS,
    L2_METRIC,
    L2_XBAR_BYTES_PER_CYCLE,
    L2_XBAR_METRIC,
    SHARED_BYTES_METRIC,
    TENSOR_PIPE_OP_INST_METRICS,
)

#: The ncu version whose section files :func:`table_counters` copies.
TABLE_NCU_VERSION = "Nsight Compute 2025.3.1"
#: A step whose FLOPs are more than this share in wgmma kernels has no L1 level.
WGMMA_MAJORITY = 0.5


@dataclass(frozen=True)
class HierarchyCounters:
    """The counters of ncu's hierarchical chart for one GPU, and where they came from."""

    l1: str  # LSU writeback active cycles, ".sum"
    l1_bytes_per_cycle: int
    l2: str  # L2-to-crossbar active cycles, ".sum"
    l2_bytes_per_cycle: int
    source: str  # the section file read, or the table

    def step_metrics(self) -> list[str]:
        """The step pass's metrics for these levels: counts and peaks."""
        return [self.l1, f"{self.l1}.peak_sustained", self.l2, f"{self.l2}.peak_sustained"]


def _cc(compute_capability: tuple[int, int]) -> int:
    return compute_capability[0] * 10 + compute_capability[1]


def table_counters(compute_capability: tuple[int, int]) -> HierarchyCounters:
    """The fallback: the 2025.3.1 section files' choice for this compute capability."""
    cc = _cc(compute_capability)
    l1 = L1_WRITEBACK_METRICS[0 if cc <= 72 else 1 if cc <= 89 else 2]
    return HierarchyCounters(
        l1,
        L1_WRITEBACK_BYTES_PER_CYCLE,
        L2_XBAR_METRIC,
        L2_XBAR_BYTES_PER_CYCLE,
        f"table ({TABLE_NCU_VERSION} section files)",
    )


# --------------------------------------------------------------------------- section files

_TOKEN = re.compile(r'\s*(?:#[^\n]*|("(?:[^"\\]|\\.)*")|([{}:])|([^\s{}:"#]+))')


def parse_section(text: str) -> dict[str, list[Any]]:
    """An ncu ``.section`` file (protobuf text format) as nested ``{key: [values]}``."""
    tokens: list[str] = []
    for m in _TOKEN.finditer(text):
        tok = m.group(1) or m.group(2) or m.group(3)
        if tok:
            tokens.append(tok)

    def block(i: int) -> tuple[dict[str, list[Any]], int]:
        out: dict[str, list[Any]] = {}
        while i < len(tokens) and tokens[i] != "}":
            key, i = tokens[i], i + 1
            if i < len(tokens) and tokens[i] == ":":
                i += 1
            if i < len(tokens) and tokens[i] == "{":
                value, i = block(i + 1)
                i += 1  # the closing brace
            elif i < len(tokens):
                value, i = tokens[i].strip('"'), i + 1
            else:
                raise ValueError(f"section text ends after key {key!r}")
            out.setdefault(key, []).append(value)
        return out, i

    parsed, _ = block(0)
    return parsed


def _arch_matches(filters: list[Any], cc: int) -> bool:
    """A section ``Filter`` (``MinArch``/``MaxArch``, or ``Items`` of them) matches cc."""
    for f in filters:
        if not isinstance(f, dict):
            continue
        items = f.get("Items") or [f]
        if not any(
            all(
                int(str(v).removeprefix("CC_")) <= cc
                if k == "MinArch"
                else cc <= int(str(v).removeprefix("CC_"))
                for k in ("MinArch", "MaxArch")
                for v in item.get(k, [])
            )
            for item in items
        ):
            return False
    return True


def _chosen(entry: Mapping, cc: int) -> str | None:
    """The name an entry (metric or definition) takes on this GPU: its own where its
    filter matches, else the first matching ``Options`` alternative."""
    for cand in [entry, *entry.get("Options", [])]:
        if cand.get("Name") and _arch_matches(cand.get("Filter", []), cc):
            return cand["Name"][0]
    return None


def section_counters(
    texts: Mapping[str, str], compute_capability: tuple[int, int]
) -> HierarchyCounters | None:
    """The L1 and L2 counters (and bytes per cycle) that an installed ncu's
    hierarchical section files use on this GPU; None where they name none."""
    cc = _cc(compute_capability)
    for path, text in sorted(texts.items()):
        try:
            doc = parse_section(text)
        except ValueError:
            continue
        names = [
            n
            for block in doc.get("Metrics", [])
            for entry in block.get("Metrics", [])
            if (n := _chosen(entry, cc))
        ]
        per_second = {n.removesuffix(".per_second") for n in names if n.endswith(".sum.per_second")}
        l1 = next((n for n in sorted(per_second) if n.startswith("l1tex__lsu_writeback")), None)
        l2 = next((n for n in sorted(per_second) if n.startswith("lts__lts2xbar")), None)
        if not (l1 and l2):
            continue
        factors = {}
        for block in doc.get("MetricDefinitions", []):
            for d in block.get("MetricDefinitions", []):
                m = re.fullmatch(
                    r"\s*(\S+)\.per_second\s*\*\s*(\d+)\s*", d.get("Expression", [""])[0]
                )
                if m and _arch_matches(d.get("Filter", []), cc):
                    factors[m.group(1)] = int(m.group(2))
        if l1 in factors and l2 in factors:
            return HierarchyCounters(l1, factors[l1], l2, factors[l2], path)
    return None


def counters_for(
    compute_capability: tuple[int, int], section_texts: Mapping[str, str] | None = None
) -> tuple[HierarchyCounters, list[str]]:
    """The section files' counters where they name some the parser knows, else the
    table; with notes on any disagreement (the parser's byte factors are fixed)."""
    table = table_counters(compute_capability)
    found = section_counters(section_texts or {}, compute_capability)
    if found is None:
        why = "no hierarchical section file found" if not section_texts else "none named them"
        return table, [f"hierarchical-roofline counters from the {table.source}: {why}"]
    known = (
        found.l1 in L1_WRITEBACK_METRICS
        and found.l2 == L2_XBAR_METRIC
        and (found.l1_bytes_per_cycle, found.l2_bytes_per_cycle)
        == (L1_WRITEBACK_BYTES_PER_CYCLE, L2_XBAR_BYTES_PER_CYCLE)
    )
    if not known:
        return table, [
            f"{found.source} names {found.l1} x {found.l1_bytes_per_cycle} and {found.l2} x "
            f"{found.l2_bytes_per_cycle}, which the parser does not read: the {table.source} "
            "is used"
        ]
    return found, []


def all_step_metrics() -> list[str]:
    """Every architecture's hierarchical counters (a GPU of unknown compute capability:
    the metric query keeps the ones it has)."""
    names = [*L1_WRITEBACK_METRICS, L2_XBAR_METRIC]
    return [m for n in names for m in (n, f"{n}.peak_sustained")]


# --------------------------------------------------------------------------- wgmma kernels

_GMMA_INST_METRIC = TENSOR_PIPE_OP_INST_METRICS[1]  # sm__inst_executed_pipe_tensor_op_gmma


def issues_wgmma(values: Mapping[str, Decimal | None]) -> bool | None:
    """Whether a kernel ran warpgroup MMAs (Hopper ``wgmma``, HGMMA): its GMMA
    instruction count, else its ``sm__ops_path_tensor_op_hgmma_*`` ops; None where
    the capture has neither counter (not a Hopper capture, or not asked)."""
    if values.get(_GMMA_INST_METRIC) is not None:
        return values[_GMMA_INST_METRIC] > 0
    hgmma = [x for n, x in values.items() if "_op_hgmma_" in n and x is not None]
    return any(x > 0 for x in hgmma) if hgmma else None


def wgmma_totals(kernels: Iterable[tuple[bool | None, Decimal | None]]) -> dict | None:
    """``{kernels, flop}`` of the kernels that ran warpgroup MMAs, from (wgmma flag,
    FLOPs) per kernel; None where no kernel has the counters that tell."""
    known = [(w, f) for w, f in kernels if w is not None]
    if not known:
        return None
    flop = sum((f for w, f in known if w and f is not None), Decimal(0))
    return {"kernels": sum(1 for w, _ in known if w), "flop": int(flop)}


# --------------------------------------------------------------------------- the levels


@dataclass(frozen=True)
class Level:
    """One memory level of a captured step."""

    bytes: float | None
    counters: str  # which counters the bytes are
    unmeasurable: str | None = None  # why no counter sees this level's traffic


def _number(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def l1_unmeasurable(ncu: Mapping) -> str | None:
    """Why the step's L1 traffic is beyond the counters, or None where it is not.

    From the per-kernel wgmma counts where the parsed capture has them (``totals.
    wgmma``). Without them (a capture parsed before they existed, or a GPU without
    the counter) a CC >= 9.0 step is judged by its tensor-core share of FLOPs: from
    sm_90 on, the tensor GEMMs of cuBLAS and cuDNN take their operands from shared
    memory that TMA fills (wgmma; tcgen05 on Blackwell).
    """
    totals = ncu.get("totals") or {}
    flop = _number((totals.get("flop") or {}).get("total"))
    if not flop or flop <= 0:
        return None
    why = "TMA fills shared memory and wgmma reads its operands there, past every L1 counter"
    wgmma = totals.get("wgmma")
    if isinstance(wgmma, Mapping):
        share = (_number(wgmma.get("flop")) or 0.0) / flop
        if share > WGMMA_MAJORITY:
            return f"{share:.0%} of the FLOPs are in {wgmma.get('kernels')} wgmma kernels: {why}"
        return None
    cc = str(ncu.get("compute_capability") or "")
    major = re.match(r"(\d+)\.", cc)
    tensor = (_number((totals.get("flop") or {}).get("tensor")) or 0.0) / flop
    if major and int(major.group(1)) >= 9 and tensor > WGMMA_MAJORITY:
        return (
            f"{tensor:.0%} of the FLOPs are on the tensor cores of a CC {cc} GPU, whose "
            f"GEMM kernels run wgmma: {why} (no per-kernel wgmma counts in this capture)"
        )
    return None


def step_levels(ncu: Mapping) -> dict[str, Level]:
    """L1, L2 and DRAM bytes of the captured step, each with the counters it comes from.

    L1: ncu's chart counter (LSU writeback x 128 B) plus the SASS shared-memory bytes
    where the capture has them (L1 and shared memory are one SRAM), else
    ``l1tex__t_bytes``; not measurable where wgmma kernels do most of the FLOPs.
    L2: the L2-to-crossbar bytes, else ``lts__t_bytes``. DRAM: ``dram__bytes``.
    """
    b = (ncu.get("totals") or {}).get("bytes") or {}
    writeback, shared = _number(b.get("l1_writeback")), _number(b.get("shared"))
    if writeback is not None:
        l1 = Level(
            writeback + (shared or 0.0),
            "LSU writeback x 128 B"
            + (f" + {SHARED_BYTES_METRIC.removesuffix('.sum')}" if shared is not None else ""),
        )
    else:
        l1 = Level(_number(b.get("l1")), f"{L1_METRIC.removesuffix('.sum')} (tag stage)")
    reason = l1_unmeasurable(ncu)
    if reason:
        l1 = Level(None, l1.counters, reason)
    xbar = _number(b.get("l2_xbar"))
    l2 = (
        Level(xbar, "L2-to-SM crossbar x 32 B")
        if xbar is not None
        else Level(_number(b.get("l2")), f"{L2_METRIC.removesuffix('.sum')} (all L2 requests)")
    )
    return {"l1": l1, "l2": l2, "dram": Level(_number(b.get("dram")), "dram__bytes")}


def section_paths(candidates: Iterable[str]) -> list[str]:
    """The hierarchical roofline section files among ``candidates`` (file names)."""
    return sorted(
        p
        for p in candidates
        if re.search(r"SpeedOfLight_Hierarchical\w*RooflineChart\.section$", p)
    )
