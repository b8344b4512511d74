"""The page "Compared with <label>": this study against a baseline (config ``compare:``).

From the comparison's tables (results/compare*.csv, dnnroofline.aggregate.compare): what
differs besides the code first (the fingerprints and study settings that changed), since a
slower point reads beside it; then the verdict of every point, slower first, with the
regression gate's outcome at ``regression.tolerance_pct``; the arrows plot; the ops and
kernels whose time changed most; the roofs that moved; the points in one study only.

Written by its own rule (``compare_section``), not :data:`dnnroofline.report.SECTIONS`: a
study without a ``compare:`` block has no such page.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

import pandas as pd

from dnnroofline.aggregate.compare import CI_METHOD, regressions
from dnnroofline.aggregate.compare_where import ALL_KERNELS, NO_DIFFERENCE
from dnnroofline.formatting import isnum, missing
from dnnroofline.report.render import section

#: rows shown of the op and kernel diffs (the CSVs hold them all)
TOP_CHANGES = 15
#: the order of the verdicts in the table: what needs reading first
VERDICT_ORDER = {"slower": 0, "faster": 1, "same": 2}


def records(frame: pd.DataFrame | None) -> list[dict]:
    """A table's rows as dicts, missing cells as None."""
    if frame is None or frame.empty:
        return []
    return [
        {k: (None if missing(v) else v) for k, v in r.items()} for r in frame.to_dict("records")
    ]


def verdict_rows(compare: pd.DataFrame | None) -> list[dict]:
    """compare.csv's rows, slower first (largest slowdown first), then faster, then same."""

    def key(r: Mapping) -> tuple:
        change = float(r["change_pct"]) if isnum(r.get("change_pct")) else 0.0
        rank = VERDICT_ORDER.get(str(r.get("verdict")), 3)
        return (rank, change if rank == 0 else -abs(change), r["env"], r["model"])

    return sorted(records(compare), key=key)


def tolerance_of(config: Mapping) -> float | None:
    """The gate's tolerance: ``regression.tolerance_pct`` of the resolved config (the
    schema fills it in); None in a config without it."""
    value = (config.get("regression") or {}).get("tolerance_pct")
    return float(value) if isnum(value) else None


def moved(row: Mapping) -> bool:
    """An op or kernel row whose time changed, or that one study's table lacks."""
    change = row.get("change_ms")
    return bool(row.get("only_in")) or not isnum(change) or float(change) != 0.0


def top_changes(frame: pd.DataFrame | None, limit: int = TOP_CHANGES) -> dict:
    """The op or kernel diff's ``limit`` rows of largest |change_ms| over every point (a
    kernel diff's "(all kernels)" rows, each point's total, apart), and how many rows the
    CSV holds. A row whose time did not change is left out."""
    rows = records(frame)
    totals = [r for r in rows if r.get("name") == ALL_KERNELS]
    rest = [r for r in rows if r.get("name") != ALL_KERNELS and moved(r)]
    rest.sort(key=lambda r: -abs(float(r["change_ms"])) if isnum(r.get("change_ms")) else 0.0)
    return {"totals": totals, "rows": rest[:limit], "total": len(rows), "more": len(rest[limit:])}


def fingerprint_groups(fingerprints: pd.DataFrame | None) -> list[dict]:
    """What differs besides the code, per (env, baseline env): the rows that differ (key,
    baseline, current); none for a pair whose only row says ``no difference``."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records(fingerprints):
        env = str(r.get("env") or "")
        rows = groups.setdefault((env, str(r.get("baseline_env") or env)), [])
        if r.get("key") != NO_DIFFERENCE:
            rows.append(r)
    return [{"env": e, "baseline_env": b, "rows": rows} for (e, b), rows in groups.items()]


def svg_uri(svg: str | None) -> str | None:
    """A figure as a data: URI, so that the page holds it."""
    if not svg:
        return None
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode("ascii")


def facts(
    config: Mapping,
    compare: pd.DataFrame | None,
    unmatched: pd.DataFrame | None = None,
    fingerprints: pd.DataFrame | None = None,
    ops: pd.DataFrame | None = None,
    kernels: pd.DataFrame | None = None,
    roofs: pd.DataFrame | None = None,
    plot_svg: str | None = None,
    label: str | None = None,
) -> dict:
    """The page's facts from the comparison's tables (DataFrames of results/compare*.csv),
    the resolved config (its ``compare`` and ``regression`` blocks), the arrows plot's SVG
    text and the baseline's label."""
    spec = config.get("compare") or {}
    rows = verdict_rows(compare)
    tolerance = tolerance_of(config)
    counts = {v: sum(r.get("verdict") == v for r in rows) for v in VERDICT_ORDER}
    groups = fingerprint_groups(fingerprints)
    return {
        "label": label or spec.get("label") or str(spec.get("baseline") or "the baseline"),
        "baseline": spec.get("baseline"),
        "env_map": dict(spec.get("envs") or {}),
        "rows": rows,
        "counts": counts,
        "tolerance": tolerance,
        "regressed": None if tolerance is None else regressions(rows, tolerance),
        "fingerprints": groups,
        "n_fingerprints": sum(len(g["rows"]) for g in groups),
        "plot": svg_uri(plot_svg),
        "ops": top_changes(ops),
        "kernels": top_changes(kernels),
        "roofs": records(roofs),
        "unmatched": records(unmatched),
        "ci_method": CI_METHOD,
        "top": TOP_CHANGES,
    }


before_after_section = section("before_after.html", facts)
