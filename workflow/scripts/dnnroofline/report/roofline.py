"""The roofline section: ceilings per env (measured against datasheet), ridge points, and
every point with its roof, efficiency and bound."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from dnnroofline.formatting import isnum
from dnnroofline.report import data
from dnnroofline.report.render import section


def facts(
    ceilings: Mapping | Sequence | None, points: pd.DataFrame | None, config: Mapping | None = None
) -> dict:
    """Ceilings per env (measured vs datasheet), ridge points, and the point table."""
    ceilings = data.keyed(ceilings)
    pts = data.prepare_points(points)
    envs = list(data.envs_cfg(config)) if config else []
    for e in list(ceilings) + [e for e in pts["env"] if e]:
        if e not in envs:
            envs.append(e)
    return {
        "above": [dict(r, label=data.label(r)) for r in data.records(pts[pts["above"]])]
        if len(pts)
        else [],
        "ceilings": [env_ceilings(env, ceilings.get(env)) for env in envs],
        "points": [
            (env, [dict(r, capture_note=capture_note(r, ceilings.get(env))) for r in rows])
            for env, rows in ((e, data.records(g)) for e, g in pts.groupby("env", sort=True))
        ],
    }


def capture_note(point: Mapping, ceil: Mapping | None) -> str | None:
    """Why a GPU point whose capture had no problem (no ``ai_note``) is analytic: it has none."""
    cuda = (ceil or {}).get("device") == "cuda"
    if not cuda or point.get("ai_source") != "analytic" or point.get("ai_note"):
        return None
    if isnum(point.get("nproc")) and point["nproc"] > 1:
        return "analytic AI: ncu does not profile data-parallel runs"
    return "analytic AI: no ncu capture of this configuration (ncu.batch_sizes)"


def env_ceilings(env: str, ceil: Mapping | None) -> dict:
    """An env's roofs, measured next to datasheet per (kind, precision), and its ridge points."""
    if not ceil:
        return {"env": env, "present": False}
    roofs = data.valid_roofs(ceil)
    keys = []
    for r in roofs:
        if (r.kind, r.precision) not in keys:
            keys.append((r.kind, r.precision))
    rows = []
    for kind, prec in keys:
        meas = data.pick_roof(roofs, kind, prec, sources=("measured",))
        ds = data.pick_roof(roofs, kind, prec, sources=("datasheet",))
        rows.append(
            {
                "kind": kind,
                "precision": prec,
                "measured": meas.value if meas else None,
                "method": (meas.note or "–") if meas else "–",
                "datasheet": ds.value if ds else None,
                "citation": (ds.note or "–") if ds else "–",
                "ratio": meas.value / ds.value if meas and ds else None,
            }
        )
    ridges = []
    for prec in sorted({p for k, p in keys if k == "compute" and p}):
        for src in ("measured", "datasheet"):
            c = data.pick_roof(roofs, "compute", prec, sources=(src,))
            mm = data.pick_roof(roofs, "memory", None, sources=(src,))
            if c and mm:
                ridges.append({"precision": prec, "source": src, "ridge": c.value / mm.value})
    skipped = [s for s in ceil.get("skipped") or [] if isinstance(s, Mapping)]
    return {
        "env": env,
        "present": True,
        "device": ceil.get("device_name") or ceil.get("device") or "",
        "threads": ceil.get("threads"),
        "rows": rows,
        "ridges": ridges,
        # what the ceilings job said about its own numbers (a busy machine, quick mode,
        # a measured roof above the datasheet, perf unavailable), and what it skipped
        "quick": bool(ceil.get("quick")),
        "notes": [str(n) for n in ceil.get("notes") or []],
        "skipped": [f"{s.get('precision')}: {s.get('reason')}" for s in skipped],
    }


roofline_section = section("roofline.html", facts)
