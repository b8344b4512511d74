"""Aggregation, second half: the run groups -> the roofline points table.

No file I/O here: callers load JSON/CSV and pass dicts and DataFrames in.

``roofline_points_frame`` builds ``results/roofline_points.csv``: one row per
(env, model, precision, batch) seen in the metrics. Groups with no ``ok`` run
stay in the table as rows with ``runs_ok == 0`` and NaN numbers (``ai_source``,
``roof_source`` and ``bound`` empty, ``above_roof`` False), so the report can
list every failed configuration from one file; plots draw only rows with
``runs_ok > 0`` (see :func:`plottable_points`). Such rows never need a
complexity, ncu or ceilings entry, so a complexity JSON with ``status: "error"``
(a model that cannot train at the image size) is fine there; for a group with an
ok run it is an error naming the file.

FLOPs and bytes per step:
  * ``ai_source = "ncu"`` when the group's parsed ncu JSON exists, has no
    ``status`` or ``status == "ok"``, and non-null ``totals.flop.total`` and
    ``totals.bytes.dram``. The ncu totals are taken to cover exactly one
    training step at the run's batch size (the profile stage captures one step).
  * else ``ai_source = "perf"`` when the group's perf JSON (``results/{env}/perf/``,
    CPU counters through ``perf stat``) has ``status == "ok"`` and the precision's
    FLOPs are counted by the events (fp32): FLOPs and DRAM bytes per step from perf.
  * otherwise ``ai_source = "analytic"``: ``flops.train_step`` of the complexity
    JSON, and ``by_precision[precision].min_dram_bytes_per_step`` (falling back
    to the top-level ``min_dram_bytes_per_step``).

AI range (``ai_low``, ``ai_high``), from the complexity JSON whatever the source:
``ai_high`` = FLOPs / minimum DRAM bytes (a true lower bound on traffic, so an upper
bound on AI), ``ai_low`` = FLOPs / the per-op traffic model's upper estimate
(:mod:`dnnroofline.estimate.traffic`; every access counted: no measurement shows cache reuse,
on a GPU or a CPU). For an ``analytic`` point ``ai`` is
``ai_high`` (the plotted value, as before) and ``bound`` is ``memory`` or ``compute``
only when the whole range is on one side of the ridge, else ``inconclusive``. A
measured point (``ncu``, ``perf``) keeps its own AI and bound, with the analytic range
beside it for comparison. NaN where the complexity JSON has no traffic table.

Data-parallel envs (``nproc`` > 1): a point is one rank's, the roofline way of
multi-GPU studies: FLOPs and bytes of one rank's step (the complexity at the per-process
batch, the perf counts of all ranks / nproc; ncu does not profile them) over the slowest
rank's median step, against the roof of one rank's share of the machine (the ceilings
job measures with the env's threads per process; one GPU on CUDA). ``images_per_s``
counts every rank.

Peaks: the env's ceilings ``roofs``; compute roof selected by the *pipeline*
precision name (fp32, tf32, amp, bf16; ``fp16`` accepted for amp), measured
preferred over datasheet (see :mod:`dnnroofline.estimate.roofline`). A missing peak
raises :class:`InputError` naming env, precision and ceilings file: the
pipeline never plots against a guessed peak.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from dnnroofline.aggregate.inputs import (
    ceilings_path,
    check_roof_threads,
    check_runs_match_complexity,
)
from dnnroofline.aggregate.metrics import GROUP_KEYS, group_summary, sorted_frame
from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline, traffic
from dnnroofline.io import dig
from dnnroofline.measure import busy_share
from dnnroofline.measure.perf import PERF_PRECISIONS
from dnnroofline.study.identity import complexity_path, config_key

POINTS_COLUMNS = [
    "env",
    "model",
    "precision",
    "batch_size",
    "runs_ok",
    "runs_failed",
    "flop_per_step",
    "bytes_per_step",
    "ai",
    "ai_low",
    "ai_high",
    "ai_source",
    "step_median_s",
    "step_spread_s",
    "images_per_s",
    "images_per_s_min",
    "images_per_s_max",
    "attained_flops",
    "roof_flops",
    "roof_source",
    "peak_flops",
    "peak_bandwidth",
    "ridge_ai",
    "efficiency",
    "bound",
    "above_roof",
    # issue 8: the two FLOP rates, and why a GPU point's AI is analytic
    "executed_flops",
    "useful_flops",
    "ai_note",
    # issue 11: data-parallel processes; a point with nproc > 1 is one rank's
    "nproc",
    # issue 26: where the step waits (dnnroofline.measure.busy_share)
    "kernel_busy_share",
    "kernel_time_source",
    "host_wait_cause",
]
_POINTS_FLOAT = [
    "flop_per_step",
    "bytes_per_step",
    "ai",
    "ai_low",
    "ai_high",
    "step_median_s",
    "step_spread_s",
    "images_per_s",
    "images_per_s_min",
    "images_per_s_max",
    "attained_flops",
    "roof_flops",
    "peak_flops",
    "peak_bandwidth",
    "ridge_ai",
    "efficiency",
    "executed_flops",
    "useful_flops",
    "kernel_busy_share",
]


#: ``dtype=`` for ``pd.read_csv`` of roofline_points.csv: names stay strings.
POINTS_DTYPES = {
    "env": "str",
    "model": "str",
    "precision": "str",
    "ai_source": "str",
    "roof_source": "str",
    "bound": "str",
    "ai_note": "str",
    "kernel_time_source": "str",
    "host_wait_cause": "str",
}


def ncu_counts(ncu: Mapping | None, where: str) -> tuple[float, float] | None:
    """(FLOP total, DRAM bytes) of a parsed ncu JSON, or None when it cannot give an AI.

    None: no file, ``status`` other than ``ok``, DRAM bytes not from the step pass (a
    bare parse_ncu.py table: isolated kernels, cold caches), or a null FLOP or DRAM
    total. A total that is present but not positive is a broken capture: InputError.
    """
    if ncu is None:
        return None
    if not isinstance(ncu, Mapping):
        raise InputError(f"{where}: parsed ncu JSON must be an object")
    if ncu.get("status", "ok") != "ok" or not bytes_from_the_step(ncu):
        return None
    flop = dig(ncu, "totals", "flop", "total")
    dram = dig(ncu, "totals", "bytes", "dram")
    if flop is None or dram is None:
        return None
    return (
        roofline.check_positive(f"{where}: totals.flop.total", flop),
        roofline.check_positive(f"{where}: totals.bytes.dram", dram),
    )


def bytes_from_the_step(ncu: Mapping) -> bool:
    """Whether a capture's DRAM bytes are the step's as it runs (the ncu stage's step
    pass), not kernels replayed one by one with flushed caches."""
    return dig(ncu, "provenance", "totals.bytes") == "step"


def ncu_note(ncu: Mapping | None) -> str | None:
    """Why a capture gave no AI, or what its AI leaves out; None for a whole, usable one."""
    if not isinstance(ncu, Mapping):
        return None
    if ncu.get("status", "ok") != "ok":
        message = ncu.get("message") or ncu.get("reason") or "no message"
        return f"ncu {ncu.get('status')}: {message}"
    if not bytes_from_the_step(ncu):
        return (
            "ncu capture without the step pass: its DRAM bytes are of kernels replayed "
            "alone with flushed caches, not the step's, so the AI is analytic"
        )
    nulls = [
        name
        for name, path in (("FLOP total", ("flop", "total")), ("DRAM bytes", ("bytes", "dram")))
        if dig(ncu, "totals", *path) is None
    ]
    if nulls:
        return f"ncu capture without {' or '.join(nulls)}: the AI is analytic"
    gaps = dig(ncu, "totals", "incomplete") or {}
    short = [f"{gaps[k]} kernel(s) without {name}" for k, name in INCOMPLETE_TOTALS if gaps.get(k)]
    if short:
        return f"ncu: {', '.join(short)} (n/a): the AI leaves them out"
    return None


#: How far under the analytic minimum ncu's DRAM bytes may read before the point says so.
BELOW_MINIMUM_RTOL = 0.05


def dram_below_minimum(
    dram_bytes: float, complexity: Mapping | None, precision: str, where: str
) -> str | None:
    """What a point whose ncu DRAM bytes are under the analytic minimum must say: its AI is
    above the analytic range's top. The minimum moves each weight, gradient, optimizer
    state and input once per step; a cache that holds some of them across kernels or
    steps (an H100's 50 MB L2) reads under it, and so does a capture that missed kernels."""
    if not isinstance(complexity, Mapping) or complexity.get("status", "ok") != "ok":
        return None
    _, minimum = analytic_counts(complexity, precision, where)
    if dram_bytes >= minimum * (1 - BELOW_MINIMUM_RTOL):
        return None
    return (
        f"ncu's DRAM bytes ({dram_bytes:.3g}) are {1 - dram_bytes / minimum:.0%} under the "
        f"analytic minimum ({minimum:.3g}), so its AI is above the analytic range: the cache "
        "kept data the minimum moves once per step, or the capture missed kernels"
    )


#: The totals a capture's AI sums over kernels, with their names (totals.incomplete keys).
INCOMPLETE_TOTALS = (("flop.total", "FLOP counters"), ("bytes.dram", "DRAM counters"))


def flop_rates(
    ncu_counts_: tuple[float, float] | None, complexity: Mapping | None, step_s: float
) -> tuple[float, float]:
    """(executed FLOP/s, useful FLOP/s) of a point; NaN where the count is missing.

    Executed: ncu's FLOPs (padding, recomputation and all) over the median step.
    Useful: the analytic model FLOPs over the median step (the MFU convention).
    """
    executed = ncu_counts_[0] / step_s if ncu_counts_ is not None else math.nan
    useful = math.nan
    if complexity is not None and complexity.get("status", "ok") == "ok":
        flop = dig(complexity, "flops", "train_step")
        if isinstance(flop, (int, float)) and flop > 0:
            useful = flop / step_s
    return executed, useful


def perf_counts(doc: Mapping | None, precision: str, where: str) -> tuple[float, float] | None:
    """(FLOPs, DRAM bytes) per step from a perf counter JSON, or None.

    None: no file, ``status`` other than ``ok`` (``unavailable`` where the kernel has no
    counters), or a precision whose FLOPs the events do not count (bf16 dot products).
    """
    if doc is None:
        return None
    if not isinstance(doc, Mapping):
        raise InputError(f"{where}: perf JSON must be an object")
    if doc.get("status") != "ok" or precision not in PERF_PRECISIONS:
        return None
    return (
        roofline.check_positive(f"{where}: flop_per_step", doc.get("flop_per_step")),
        roofline.check_positive(f"{where}: dram_bytes_per_step", doc.get("dram_bytes_per_step")),
    )


def analytic_counts(complexity: Mapping, precision: str, where: str) -> tuple[float, float]:
    """(train-step FLOPs, minimum DRAM bytes per step) from a complexity JSON.

    A complexity JSON with ``status`` other than ``ok`` (the model could not be traced
    at this image size) has no counts: InputError naming the file and its reason.
    """
    status = complexity.get("status", "ok")
    if status != "ok":
        raise InputError(
            f"{where}: complexity has status {status!r} ({complexity.get('message')}), so it "
            "has no FLOP or byte counts, yet this (model, batch) has ok runs; the model runs "
            "in the driver but not in the complexity trace. Check the message, fix or drop "
            "the model, and rerun"
        )
    flop = dig(complexity, "flops", "train_step")
    nbytes = dig(complexity, "by_precision", precision, "min_dram_bytes_per_step")
    key = f"by_precision.{precision}.min_dram_bytes_per_step"
    if nbytes is None:
        nbytes, key = complexity.get("min_dram_bytes_per_step"), "min_dram_bytes_per_step"
    return (
        roofline.check_positive(f"{where}: flops.train_step", flop),
        roofline.check_positive(f"{where}: {key}", nbytes),
    )


def analytic_ai_range(complexity: Mapping | None, precision: str) -> tuple[float, float]:
    """``(ai_low, ai_high)`` of a complexity JSON at ``precision`` (NaN, NaN without one):
    train-step FLOPs over the per-op traffic model's bytes and over the minimum bytes
    (:func:`dnnroofline.estimate.traffic.point_ai_range`, the range the ncu page shows too)."""
    if not isinstance(complexity, Mapping) or complexity.get("status", "ok") != "ok":
        return math.nan, math.nan
    if not isinstance(complexity.get("traffic"), Mapping):
        return math.nan, math.nan  # a complexity JSON from before the traffic model
    where = complexity_path(str(complexity.get("arch")), int(complexity.get("batch_size") or 0))
    flop, min_bytes = analytic_counts(complexity, precision, where)
    return traffic.point_ai_range(
        complexity, precision, flop=flop, min_bytes=min_bytes, where=where
    )


def _point_roofs(
    env: str, precision: str, ceilings: Mapping, sources: Mapping[str, str]
) -> tuple[roofline.Roof, roofline.Roof]:
    where = sources.get(env, ceilings_path(env))
    if env not in ceilings:
        raise InputError(
            f"no ceilings for env {env!r} (expected {where}); "
            "refusing to place its points against a guessed peak"
        )
    roofs = roofline.parse_roofs(ceilings[env], where)
    compute = roofline.select_roof(roofs, "compute", precision)
    if compute is None:
        have = sorted({r.precision for r in roofs if r.kind == "compute"})
        raise InputError(
            f"{where}: env {env!r} has no compute peak for precision {precision!r} "
            f"(accepted names {list(roofline.precision_aliases(precision))}, file has {have}); "
            "add a measured or datasheet roof - the pipeline never plots against a guess"
        )
    memory = roofline.select_roof(roofs, "memory")
    if memory is None:
        raise InputError(
            f"{where}: env {env!r} has no memory-bandwidth roof (needed for precision "
            f"{precision!r}); add a measured or datasheet roof"
        )
    return compute, memory


def _step_counts(
    g: Mapping,
    comp: Mapping | None,
    ncu: tuple[Mapping | None, str],
    perf: tuple[Mapping | None, str],
) -> tuple[tuple[float, float], str, str | None]:
    """(FLOPs, DRAM bytes) of one rank's step, their ``ai_source`` and the point's
    ``ai_note``: ncu's counts where the capture gives them, else perf's, else the
    complexity JSON's. ``ncu`` and ``perf`` are (parsed JSON or None, its file)."""
    model, precision, batch = g["model"], g["precision"], int(g["batch_size"])
    cwhere = complexity_path(model, batch)
    (ncu_doc, ncu_where), (perf_doc, perf_where) = ncu, perf
    note = ncu_note(ncu_doc)
    counts = ncu_counts(ncu_doc, ncu_where)
    perf_c = perf_counts(perf_doc, precision, perf_where)  # checked even where ncu wins
    if counts is not None:
        below = dram_below_minimum(counts[1], comp, precision, cwhere)
        return counts, "ncu", "; ".join(n for n in (note, below) if n) or None
    if perf_c is not None:
        # perf stat counts the whole process tree: every rank; a point is one rank's
        return (perf_c[0] / g["nproc"], perf_c[1] / g["nproc"]), "perf", note
    if comp is None:
        raise InputError(
            f"no complexity data for model {model!r} batch {batch} (expected {cwhere}) "
            f"and no usable ncu counters ({ncu_where}) for env {g['env']!r} {precision}"
        )
    return analytic_counts(comp, precision, cwhere), "analytic", note


def _roof_source(compute: roofline.Roof, memory: roofline.Roof) -> str:
    """One source where both roofs share it (measured, datasheet), else each named."""
    if compute.source == memory.source:
        return compute.source
    return f"compute={compute.source};memory={memory.source}"


def roofline_points_frame(
    metrics: pd.DataFrame,
    complexity: Mapping[tuple[str, int], Mapping],
    ceilings: Mapping[str, Mapping],
    ncu: Mapping[tuple[str, str, str, int], Mapping | None] | None = None,
    *,
    ceilings_sources: Mapping[str, str] | None = None,
    ncu_sources: Mapping[tuple[str, str, str, int], str] | None = None,
    rel_tol: float = roofline.ABOVE_ROOF_RTOL,
    perf: Mapping[tuple[str, str, str, int], Mapping | None] | None = None,
    perf_sources: Mapping[tuple[str, str, str, int], str] | None = None,
    traces: Mapping[tuple[str, str, str, int], Mapping | None] | None = None,
) -> pd.DataFrame:
    """One row per (env, model, precision, batch_size) with exactly :data:`POINTS_COLUMNS`.

    ``complexity`` is keyed by (model, batch_size), ``ceilings`` by env, ``ncu`` by
    (env, model, precision, batch_size) (value None or absent: no ncu data); ``traces``
    likewise, each the ``busy`` block of a trace table (:func:`busy_share.trace_summary`),
    which gives the kernel-busy share before ncu's kernel pass does (``host`` bound).
    ``*_sources`` name the files in error messages.
    """
    ncu, perf, traces = ncu or {}, perf or {}, traces or {}
    ceilings_sources = ceilings_sources or {}
    ncu_sources, perf_sources = ncu_sources or {}, perf_sources or {}
    check_roof_threads(metrics, ceilings, ceilings_sources)
    check_runs_match_complexity(metrics, complexity)
    rows = []
    for g in group_summary(metrics).to_dict("records"):
        env, model, precision, batch = g["env"], g["model"], g["precision"], int(g["batch_size"])
        row = {c: math.nan for c in POINTS_COLUMNS}
        row.update(g)
        row.update(batch_size=batch, ai_source=None, roof_source=None, bound=None, above_roof=False)
        if g["runs_ok"] == 0:
            rows.append(row)
            continue
        key = (env, model, precision, batch)
        stem = config_key(*key)
        comp = complexity.get((model, batch))
        counts, ai_source, ai_note = _step_counts(
            g,
            comp,
            (ncu.get(key), ncu_sources.get(key, f"results/{env}/ncu/{stem}.json")),
            (perf.get(key), perf_sources.get(key, f"results/{env}/perf/{stem}.json")),
        )
        step = g["step_median_s"]
        executed, useful = flop_rates(counts if ai_source == "ncu" else None, comp, step)
        compute, memory = _point_roofs(env, precision, ceilings, ceilings_sources)
        p = roofline.evaluate_point(
            counts[0], counts[1], step, compute.value, memory.value, rel_tol
        )
        ai_low, ai_high = analytic_ai_range(comp, precision)
        bound = p.bound
        if ai_source == "analytic" and math.isfinite(ai_low):
            bound = traffic.bound_of_range(ai_low, ai_high, p.ridge_ai)
        busy = busy_share.point_busy(traces.get(key), ncu.get(key), step, stem)
        row.update(
            flop_per_step=p.flop_per_step,
            bytes_per_step=p.bytes_per_step,
            ai=p.ai,
            ai_low=ai_low,
            ai_high=ai_high,
            ai_source=ai_source,
            attained_flops=p.attained_flops,
            roof_flops=p.roof_flops,
            roof_source=_roof_source(compute, memory),
            peak_flops=p.peak_flops,
            peak_bandwidth=p.peak_bandwidth,
            ridge_ai=p.ridge_ai,
            efficiency=p.efficiency,
            bound=roofline.bound_with_busy_share(bound, busy.share),
            above_roof=p.above_roof,
            executed_flops=executed,
            useful_flops=useful,
            ai_note=ai_note,
            kernel_busy_share=busy.share,
            kernel_time_source=busy.source,
            host_wait_cause=busy.cause,
        )
        rows.append(row)
    df = sorted_frame(rows, POINTS_COLUMNS, GROUP_KEYS)
    df[_POINTS_FLOAT] = df[_POINTS_FLOAT].astype("float64")
    df[["batch_size", "runs_ok", "runs_failed", "nproc"]] = df[
        ["batch_size", "runs_ok", "runs_failed", "nproc"]
    ].astype("int64")
    df["above_roof"] = df["above_roof"].astype(bool)
    return df


def plottable_points(points: pd.DataFrame) -> pd.DataFrame:
    """Rows that are points on a roofline: at least one ok run and finite AI and FLOP/s."""
    if points.empty:
        return points
    keep = (
        (points["runs_ok"] > 0)
        & np.isfinite(points["ai"].astype(float))
        & np.isfinite(points["attained_flops"].astype(float))
    )
    return points[keep].reset_index(drop=True)
