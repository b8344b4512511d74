"""What one ncu capture says beyond its DRAM point: the hierarchical roofline, the
per-kernel roofline.

Pure logic: parsed ncu JSONs, complexity JSONs, ceilings and the roofline points
table in; numbers and HTML out (plots are drawn by :mod:`dnnroofline.plots.kernels`).

* **Hierarchical roofline** of one (env, model, precision, batch): the step's ncu
  FLOPs over its L1, L2 and DRAM bytes give three arithmetic intensities of the same
  point; which counters give each level, and when L1 is not measurable at all (a
  step made mostly of Hopper wgmma GEMMs): :mod:`dnnroofline.ncu.hierarchy`.
  Attained FLOP/s = ncu FLOPs per step / the *uninstrumented* median step time
  (``roofline_points.csv``): counts come from ncu, durations from the timed runs,
  since ncu serializes kernels and replays each one several times.
* **Per-kernel roofline**: each kernel's ``flop.total / bytes.dram`` against
  ``flop.total / time_s``. ``time_s`` is ncu's own duration of that kernel (the
  only per-kernel duration there is): measured alone, with caches flushed before
  each replay (``--cache-control all``), at the clocks the GPU runs
  (``--clock-control none``, as the timed runs). Kernels with no FLOPs, no DRAM
  bytes or no duration are counted and listed, never plotted at AI 0.
* **Analytic vs ncu**: ``flops.train_step`` of the complexity JSON against ncu's
  FLOP total, and the analytic minimum DRAM bytes against ncu's DRAM bytes, each
  as the ratio ``analytic / ncu``, with an explanation generated from the numbers.

Bandwidth roofs: DRAM roofs are the ``kind: memory`` entries of ``ceilings.json``
(measured and datasheet). L1/L2 roofs exist only where the ceilings file has an
optional ``cache_roofs`` list (``[{level: "l1" | "l2", source: "measured" |
"datasheet", value: bytes/s, method | citation}]``); no stage writes one yet, and
no cache bandwidth is ever guessed. ``cache_roofs`` is a separate key so that the
rest of the pipeline, which reads every ``roofs`` memory entry as DRAM, never
mistakes a cache roof for a DRAM one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.formatting import finite_number, positive_number
from dnnroofline.io import dig
from dnnroofline.ncu.hierarchy import step_levels
from dnnroofline.ncu.parse import NCU_THEORETICAL
from dnnroofline.study.precisions import TENSOR_PRECISIONS

#: Memory levels, innermost first (their counters: dnnroofline.ncu.hierarchy).
LEVELS = ("l1", "l2", "dram")
LEVEL_NAMES = {"l1": "L1", "l2": "L2", "dram": "DRAM"}
CACHE_LEVELS = ("l1", "l2")
#: Kernel FLOP classes (the path that did most of a kernel's FLOPs), in legend order.
KERNEL_PATHS = ("tensor", "fp32", "fp16", "fp64")
PATH_LABELS = {
    "tensor": "tensor cores",
    "fp32": "CUDA cores, fp32",
    "fp16": "CUDA cores, fp16",
    "fp64": "CUDA cores, fp64",
}
#: Marker area (pt^2) per unit share of kernel time, and the smallest area drawn.
AREA_PER_SHARE = 1500.0
MIN_AREA = 6.0


def ncu_status(ncu: Mapping) -> tuple[str, str | None]:
    """(status, message) of a parsed ncu JSON; a bare parser output counts as ok."""
    if not isinstance(ncu, Mapping):
        raise InputError("parsed ncu JSON must be an object")
    return str(ncu.get("status") or "ok"), ncu.get("message")


# --------------------------------------------------------------------------- ceilings


@dataclass(frozen=True)
class Roofs:
    """The roofs a kernel/hierarchical plot can draw for one env."""

    compute: dict[tuple[str, str], float]  # (precision, source) -> FLOP/s
    memory: dict[str, dict[str, float]]  # level -> {source: bytes/s}
    notes: dict[str, str] = field(default_factory=dict)  # (level, source) notes


def level_roofs(ceilings: Mapping, where: str = "ceilings") -> Roofs:
    """Compute roofs and DRAM/L2/L1 bandwidth roofs of one ceilings file.

    Compute and DRAM: :func:`dnnroofline.estimate.roofline.env_roofs`, the highest roof of
    each precision and source. L1/L2: the optional ``cache_roofs`` list. Raises
    InputError when there is no compute roof or no DRAM roof (the plots never draw
    against a guess) or when a cache roof is malformed.
    """
    drawn = roofline.env_roofs(ceilings, where)
    compute = {key: r.value for key, r in drawn.compute.items()}
    memory: dict[str, dict[str, float]] = {level: {} for level in LEVELS}
    memory["dram"] = {source: r.value for source, r in drawn.memory.items()}
    cache = ceilings.get("cache_roofs") or []
    if not isinstance(cache, list):
        raise InputError(f"{where}: cache_roofs must be a list")
    for i, entry in enumerate(cache):
        at = f"{where}: cache_roofs[{i}]"
        if not isinstance(entry, Mapping):
            raise InputError(f"{at} must be an object")
        level = str(entry.get("level", "")).lower()
        if level not in CACHE_LEVELS:
            raise InputError(
                f"{at}.level must be one of {CACHE_LEVELS}, got {entry.get('level')!r}"
            )
        source = entry.get("source")
        if source not in roofline.ROOF_SOURCES:
            raise InputError(f"{at}.source must be one of {roofline.ROOF_SOURCES}")
        value = roofline.check_positive(f"{at}.value (bytes/s)", entry.get("value"))
        memory[level][source] = max(memory[level].get(source, 0.0), value)
    return Roofs(compute, memory)


def with_ncu_memory_roofs(roofs: Roofs, ncu: Mapping) -> Roofs:
    """``roofs`` plus the capture's own L1/L2/DRAM roofs (``memory_roofs`` of the parsed
    ncu JSON) as source ``ncu-theoretical``; each one's note names its counters and
    clock. They are theoretical peaks, not measurements: ncu's DRAM peak is the
    datasheet figure (bus width x memory clock)."""
    memory = {lv: dict(v) for lv, v in roofs.memory.items()}
    notes = dict(roofs.notes)
    for level, r in (ncu.get("memory_roofs") or {}).items():
        if level not in memory or not isinstance(r, Mapping):
            continue
        value = positive_number(r.get("bytes_per_s"))
        if value is None:
            continue
        memory[level][NCU_THEORETICAL] = value
        clock = positive_number(r.get("clock_hz"))
        what = "bus width x memory clock, the datasheet figure: " if level == "dram" else ""
        # captures made before the chart's counters were collected say nothing (None)
        not_chart = level != "dram" and not r.get("ncu_chart")
        notes[f"{level}:{NCU_THEORETICAL}"] = (
            f"{level.upper()} roof: {what}{' x '.join(r.get('metrics') or [])}"
            + (f" at {clock / 1e9:.3g} GHz (measured)" if clock else "")
            + (" (not ncu's hierarchical-chart counter)" if not_chart else "")
        )
    return Roofs(dict(roofs.compute), memory, notes)


def best(values: Mapping[str, float]) -> tuple[str, float] | None:
    """The preferred (source, value): measured, then datasheet, then ncu-theoretical."""
    for source in (*roofline.ROOF_SOURCES, NCU_THEORETICAL):
        if source in values:
            return source, values[source]
    return None


def compute_roofs_for(roofs: Roofs, precision: str) -> dict[str, float]:
    """{source: FLOP/s} of the compute roofs that apply to a pipeline precision."""
    names = roofline.precision_aliases(precision)
    out: dict[str, float] = {}
    for (prec, source), v in roofs.compute.items():
        if prec in names:
            out[source] = max(out.get(source, 0.0), v)
    return out


# --------------------------------------------------------------------------- hierarchical


@dataclass
class HierarchicalPoint:
    """One (env, model, precision, batch) against its three memory levels."""

    env: str
    model: str
    precision: str
    batch: int
    status: str
    message: str | None
    flop: float | None
    bytes: dict[str, float | None]
    ai: dict[str, float | None]
    step_s: float | None
    attained_flops: float | None
    notes: list[str]
    #: which counters each level's bytes come from (dnnroofline.ncu.hierarchy)
    counters: dict[str, str] = field(default_factory=dict)
    #: levels no counter can measure, with the reason (drawn as such, never as a point)
    unmeasurable: dict[str, str] = field(default_factory=dict)

    @property
    def plottable(self) -> bool:
        return self.attained_flops is not None and any(v is not None for v in self.ai.values())


def step_time(points: pd.DataFrame | None, env: str, model: str, precision: str, batch: int):
    """The uninstrumented median step time of a config, or None without an ok run."""
    if points is None or points.empty:
        return None
    m = points[
        (points["env"].astype(str) == env)
        & (points["model"].astype(str) == model)
        & (points["precision"].astype(str) == precision)
        & (points["batch_size"].astype(int) == int(batch))
    ]
    if m.empty:
        return None
    row = m.iloc[0]
    if int(row.get("runs_ok", 0) or 0) <= 0:
        return None
    return positive_number(row.get("step_median_s"))


def hierarchical_point(
    ncu: Mapping,
    step_median_s: float | None,
    env: str,
    model: str,
    precision: str,
    batch: int,
) -> HierarchicalPoint:
    """AI at L1, L2 and DRAM (ncu FLOPs / that level's bytes) and attained FLOP/s.

    Each level's bytes come from the counters :func:`dnnroofline.ncu.hierarchy.step_levels`
    picks. A level no counter can measure (L1 of a step made mostly of wgmma kernels)
    has AI None and its reason in ``unmeasurable``; one whose counter is missing (null)
    or zero has AI None and is noted.
    """
    status, message = ncu_status(ncu)
    notes: list[str] = []
    flop = positive_number(dig(ncu, "totals", "flop", "total")) if status == "ok" else None
    levels = step_levels(ncu)
    nbytes = {lv: levels[lv].bytes for lv in LEVELS}
    unmeasurable = {
        lv: levels[lv].unmeasurable for lv in LEVELS if status == "ok" and levels[lv].unmeasurable
    }
    ai: dict[str, float | None] = {}
    for lv in LEVELS:
        b = nbytes[lv]
        if lv in unmeasurable:
            ai[lv] = None
            notes.append(f"{LEVEL_NAMES[lv]}: not measurable by counters: {unmeasurable[lv]}")
        elif flop is None or b is None or b <= 0:
            ai[lv] = None
            if status == "ok" and (b is None or b <= 0):
                notes.append(
                    f"{LEVEL_NAMES[lv]}: no bytes in the capture ({levels[lv].counters} "
                    f"{'missing' if b is None else 'zero'})"
                )
        else:
            ai[lv] = flop / b
    if status == "ok" and flop is None:
        notes.append("the capture has no FLOP total (no FLOP counters, or all n/a)")
    step = positive_number(step_median_s)
    if step is None:
        notes.append("no successful timed run: attained FLOP/s unknown")
    attained = flop / step if flop is not None and step is not None else None
    return HierarchicalPoint(
        env,
        model,
        precision,
        int(batch),
        status,
        message,
        flop,
        nbytes,
        ai,
        step,
        attained,
        notes,
        {lv: levels[lv].counters for lv in LEVELS},
        unmeasurable,
    )


def hierarchical_roof_at(roofs: Roofs, precision: str, level: str, ai: float) -> float | None:
    """The attainable FLOP/s at ``ai``: the precision's preferred compute roof, capped by
    ``level``'s preferred bandwidth roof where one exists (the compute roof alone
    otherwise); None without a compute roof for the precision."""
    compute_roof = best(compute_roofs_for(roofs, precision))
    if compute_roof is None:
        return None
    bw = best(roofs.memory.get(level, {}))
    if bw is None:
        return compute_roof[1]
    return roofline.roof(ai, compute_roof[1], bw[1])


# --------------------------------------------------------------------------- per kernel


def kernel_path(flop: Mapping) -> str | None:
    """The path that did most of a kernel's FLOPs: tensor, fp32, fp16 or fp64.

    ``fp16`` is half-precision arithmetic only: the parser takes HFMA2.MMA moves and
    HADD2.F32 widenings out of ``flop.fp16`` (:mod:`dnnroofline.ncu.fp16`), so a
    batch-norm, pooling or elementwise kernel that merely moves or widens halves is
    classed by its fp32 math, or has no FLOPs. A JSON parsed before that rule (no
    ``flop_corrections`` key) still holds them: parse its CSV again.
    """
    parts = {p: finite_number(flop.get(p)) or 0.0 for p in KERNEL_PATHS}
    top = max(KERNEL_PATHS, key=lambda p: parts[p])
    return top if parts[top] > 0 else None


def short_name(name: str, limit: int = 48) -> str:
    """A kernel name without return type, template arguments and parameters."""
    s = re.sub(r"^void\s+", "", str(name).strip())
    depth, out = 0, []
    for ch in s:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip() or str(name)
    s = re.sub(r":{3,}", "::", s.replace("$", ""))
    return s if len(s) <= limit else s[: limit - 1] + "…"


@dataclass
class KernelPoint:
    index: int  # position in ncu["kernels"]
    id: Any
    name: str
    time_s: float
    flop: float
    dram: float
    ai: float
    flops_rate: float
    share: float  # of the capture's total kernel time
    area: float  # marker area, pt^2
    path: str


@dataclass
class KernelSet:
    points: list[KernelPoint]
    skipped: list[dict]  # {index, id, name, reason, time_s, share}
    total_time_s: float | None
    reasons: dict[str, int]


SKIP_REASONS = ("no FLOPs", "no DRAM bytes", "no duration")


def marker_area(share: float) -> float:
    """Marker area in pt^2: proportional to the share of kernel time, at least MIN_AREA."""
    return max(MIN_AREA, AREA_PER_SHARE * share)


def kernel_points(ncu: Mapping) -> KernelSet:
    """Each kernel with FLOPs, DRAM bytes and a duration as a point; the rest skipped.

    ``share`` is the kernel's time over the sum of every kernel's time in the
    capture (kernels without a time add nothing).
    """
    kernels = ncu.get("kernels") or []
    if not isinstance(kernels, list):
        raise InputError("parsed ncu JSON: 'kernels' must be a list")
    times = [positive_number(k.get("time_s")) if isinstance(k, Mapping) else None for k in kernels]
    total = sum(t for t in times if t is not None) or None
    points, skipped = [], []
    reasons = dict.fromkeys(SKIP_REASONS, 0)
    for i, (k, t) in enumerate(zip(kernels, times, strict=True)):
        if not isinstance(k, Mapping):
            raise InputError(f"parsed ncu JSON: kernels[{i}] must be an object")
        flop = positive_number(dig(k, "flop", "total"))
        dram = positive_number(dig(k, "bytes", "dram"))
        share = t / total if t is not None and total else 0.0
        reason = (
            "no FLOPs"
            if flop is None
            else "no DRAM bytes"
            if dram is None
            else "no duration"
            if t is None
            else None
        )
        if reason:
            reasons[reason] += 1
            skipped.append(
                {
                    "index": i,
                    "id": k.get("id"),
                    "name": str(k.get("name", "")),
                    "reason": reason,
                    "time_s": t,
                    "share": share,
                }
            )
            continue
        points.append(
            KernelPoint(
                index=i,
                id=k.get("id"),
                name=str(k.get("name", "")),
                time_s=t,
                flop=flop,
                dram=dram,
                ai=flop / dram,
                flops_rate=flop / t,
                share=share,
                area=marker_area(share),
                path=kernel_path(k.get("flop") or {}) or "fp32",
            )
        )
    return KernelSet(points, skipped, total, reasons)


def class_precision(path: str | None, precision: str) -> str | None:
    """The ceilings precision whose measured roof a kernel of FLOP class ``path`` in a
    ``precision`` run is held to; None for a class no microbenchmark measures."""
    if path == "tensor":
        return precision if precision in TENSOR_PRECISIONS else "tf32"
    if path == "fp32":
        return "fp32"
    return None


def kernel_roof_at(roofs: Roofs, ai: float, path: str | None, precision: str) -> float:
    """The roof a kernel is held to at ``ai``: the best compute peak of its FLOP path
    (CUDA-core fp32: the fp32 roofs; tensor cores: the run's tensor precision, tf32 for
    an fp32 run; any other path, or a path without a roof: the best peak of any
    precision), capped by ``ai`` x the best DRAM bandwidth.

    A kernel above it beats its own roof: a wrong peak or a bad counter.
    """
    want = class_precision(path, precision)
    own = compute_roofs_for(roofs, want).values() if want is not None else ()
    compute_roof = max(own) if own else max(roofs.compute.values())
    return min(compute_roof, ai * max(roofs.memory["dram"].values()))


# --------------------------------------------------------------------------- analytic vs ncu
