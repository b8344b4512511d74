"""What the study itself cost: Snakemake's `benchmark:` files and the timed runs' wall time;
and from them, what a measuring job will cost: its Slurm time limit.

The rules that users ask about (ceilings, the ncu self-test and captures, complexity,
the report sections) carry a ``benchmark:`` directive; Snakemake writes one TSV per job
with its wall time (``s``), peak memory (``max_rss``, MB) and CPU time (``cpu_time``).
The stage of a benchmark file is the first path part under its ``benchmarks/`` folder,
e.g. ``results/gpu/benchmarks/ncu/…`` is ``ncu`` and
``results/benchmarks/complexity/…`` is ``complexity``.
"""

from __future__ import annotations

import csv
import math
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


# ---- Slurm time limits (docs/cluster.md, "Time limits"): a measuring job asks for
# MARGIN x the wall time the study expects of it, plus EXTRA_MIN for the job's own start
# (Snakemake and torch imported on the node), in whole minutes as sbatch -t takes them.
MARGIN = 2.0
EXTRA_MIN = 1
#: Expected wall seconds of a measuring job that the study has not measured yet (the
#: limits the profile gave before: 1 h, ncu 4 h and its self-test 2 h, less the margin).
PRIOR_S = {"ncu": 7200.0, "ncu_selftest": 3600.0}
DEFAULT_PRIOR_S = 1800.0


def time_limit_min(expected_s: float, attempt: int = 1) -> int:
    """The Slurm time limit (minutes) of a job expected to take ``expected_s`` seconds:
    MARGIN x expected, rounded up to whole minutes, plus EXTRA_MIN; each of Snakemake's
    retries (``attempt`` 2, 3, ...) asks for that many times as much."""
    if expected_s < 0 or attempt < 1:
        raise InputError(
            f"time limit: expected seconds must be >= 0 and the attempt >= 1, not "
            f"{expected_s!r} and {attempt!r}"
        )
    return attempt * (math.ceil(MARGIN * expected_s / 60) + EXTRA_MIN)


def expected_job_s(
    rule: str, walls: Mapping[str, float], point: str | None, outlived_s: float = 0.0
) -> tuple[float, str]:
    """The wall seconds a measuring job of ``rule`` is expected to take, and from what.

    ``walls`` maps the stems of the study's benchmark files of this rule on the job's env
    to their wall seconds; those of the job's own point (stems starting with ``point``)
    come first, then the rule's other points on the env, then PRIOR_S. ``outlived_s``: the
    longest an earlier attempt ran before its time limit killed it (the job needs more).
    """
    same = [s for stem, s in walls.items() if point and f"{stem}_".startswith(f"{point}_")]
    if same:
        expected, source = max(same), "measured"
    elif walls:
        expected, source = max(walls.values()), "measured on other points"
    else:
        expected, source = PRIOR_S.get(rule, DEFAULT_PRIOR_S), "prior"
    if outlived_s > expected:
        return outlived_s, "timed out"
    return expected, source
