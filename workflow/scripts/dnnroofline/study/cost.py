"""What the study itself cost: Snakemake's `benchmark:` files and the timed runs' wall time.

The rules that users ask about (ceilings, the ncu self-test and captures, complexity,
the report sections) carry a ``benchmark:`` directive; Snakemake writes one TSV per job
with its wall time (``s``), peak memory (``max_rss``, MB) and CPU time (``cpu_time``).
The stage of a benchmark file is the first path part under its ``benchmarks/`` folder,
e.g. ``results/gpu/benchmarks/ncu/…`` is ``ncu`` and
``results/benchmarks/complexity/…`` is ``complexity``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

from dnnroofline.errors import InputError

# Snakemake's column for each figure kept here (TSV header names)
_COLUMNS = {"wall_s": "s", "max_rss_mb": "max_rss", "cpu_s": "cpu_time"}


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "", "NA", "-") else None
    except ValueError:
        return None


def read_benchmark(path: str) -> dict[str, Any]:
    """One benchmark TSV: its stage and figures (the mean over its repeats, as a rule
    with ``repeat()`` writes one row per repeat)."""
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except OSError as exc:
        raise InputError(f"--benchmarks: cannot read {path}: {exc}") from exc
    if not rows or "s" not in rows[0]:
        raise InputError(f"--benchmarks: {path} is not a Snakemake benchmark file (no 's' column)")
    out: dict[str, Any] = {"stage": benchmark_stage(path), "path": str(path)}
    for key, column in _COLUMNS.items():
        values = [v for v in (_number(r.get(column)) for r in rows) if v is not None]
        out[key] = sum(values) / len(values) if values else None
    return out


def benchmark_stage(path: str) -> str:
    parts = PurePath(path).parts
    if "benchmarks" not in parts:
        raise InputError(f"--benchmarks: {path} is not under a benchmarks/ folder")
    rest = parts[parts.index("benchmarks") + 1 :]
    return PurePath(rest[0]).stem if rest else "unknown"


def _add(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


def study_cost(benchmarks: Iterable[Mapping], runs: Iterable[Mapping] = ()) -> list[dict]:
    """Per stage: jobs, total wall and CPU seconds, the largest peak memory (MB).

    ``runs`` (run JSONs) add the timed runs as a stage of their own: their ``wall_s``
    is the driver's whole process, warm-up included.
    """
    stages: dict[str, dict] = {}
    for b in benchmarks:
        s = stages.setdefault(
            b["stage"],
            {"stage": b["stage"], "jobs": 0, "wall_s": None, "cpu_s": None, "max_rss_mb": None},
        )
        s["jobs"] += 1
        s["wall_s"] = _add(s["wall_s"], b.get("wall_s"))
        s["cpu_s"] = _add(s["cpu_s"], b.get("cpu_s"))
        rss = b.get("max_rss_mb")
        if rss is not None:
            s["max_rss_mb"] = max(rss, s["max_rss_mb"] or 0.0)
    rows = sorted(stages.values(), key=lambda r: -(r["wall_s"] or 0.0))
    timed = [r for r in runs if isinstance(r.get("wall_s"), int | float)]
    if timed:
        rss = [r["max_rss_bytes"] / 1e6 for r in timed if r.get("max_rss_bytes")]
        rows.append(
            {
                "stage": "timed runs",
                "jobs": len(timed),
                "wall_s": sum(r["wall_s"] for r in timed),
                "cpu_s": sum((r.get("user_s") or 0.0) + (r.get("sys_s") or 0.0) for r in timed),
                "max_rss_mb": max(rss) if rss else None,
            }
        )
    return rows
