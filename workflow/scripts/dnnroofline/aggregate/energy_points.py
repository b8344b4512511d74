"""The study's energy as the energy roofline and the report's energy page read it: each
env's fitted costs (its ceilings' ``energy.costs``) or why it has none, and each roofline
point's FLOP per joule (``flop_per_step`` over the median ``joules_per_step`` of its ok
runs in metrics.csv).

The roofs follow Choi et al. 2013, "A roofline model of energy": with eps_flop joules per
FLOP and eps_mem joules per DRAM byte, a kernel of arithmetic intensity AI does at most
1/eps_flop FLOP/J (the compute-energy roof), AI/eps_mem FLOP/J (the memory-energy roof),
and together 1/(eps_flop + eps_mem/AI). Pure logic, no file I/O (docs/contracts.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from dnnroofline.aggregate.metrics import GROUP_KEYS
from dnnroofline.aggregate.points import plottable_points
from dnnroofline.perfmodel.energy import EnergyCosts, costs_from_ceilings

ENERGY_POINT_COLUMNS = [
    *GROUP_KEYS,
    "ai",
    "flop_per_step",
    "joules_per_step",
    "flop_per_joule",
    "runs_with_energy",
]


def energy_costs(env: str, ceil: Mapping | None) -> EnergyCosts | None:
    """The env's fitted costs (:func:`dnnroofline.perfmodel.energy.costs_from_ceilings`),
    None where there are none or the fit set every cost to zero (no roof to draw)."""
    if ceil is None:
        return None
    costs = costs_from_ceilings(ceil, f"ceilings of env {env}")[0]
    if costs is None or not (any(costs.joules_per_flop.values()) or costs.joules_per_byte):
        return None
    return costs


def ceilings_reason(ceil: Mapping | None) -> str | None:
    """Why an env's ceilings give no energy roofs (None: they do)."""
    if ceil is None:
        return "no ceilings.json"
    energy = ceil.get("energy")
    if not isinstance(energy, Mapping):
        return "its ceilings.json has no energy record (measured before energy was)"
    if not energy.get("available"):
        return f"energy unavailable: {energy.get('reason') or 'no reason given'}"
    if energy_costs("", ceil) is None:
        return f"no costs fitted: {energy.get('costs_reason') or 'no reason given'}"
    return None


def _ok(metrics: pd.DataFrame) -> pd.DataFrame:
    return metrics[metrics["status"].astype(str).str.strip().str.lower() == "ok"]


def runs_reason(env: str, metrics: pd.DataFrame | None) -> str | None:
    """Why an env's runs give no joules (None: at least one ok run has them)."""
    if metrics is None or "env" not in metrics or "status" not in metrics:
        return "no metrics.csv"
    ok = _ok(metrics[metrics["env"] == env])
    if not len(ok):
        return "no successful runs"
    if "joules_per_step" not in ok:
        return "metrics.csv has no energy columns (made before energy was recorded)"
    if (pd.to_numeric(ok["joules_per_step"], errors="coerce") > 0).any():
        return None
    sources = ok["energy_source"] if "energy_source" in ok else pd.Series([], dtype=object)
    if (sources.astype(str) == "unavailable").any():
        return "its runs recorded energy as unavailable"
    return "its runs were recorded before energy was"


def point_energy(points: pd.DataFrame | None, metrics: pd.DataFrame | None) -> pd.DataFrame:
    """Each roofline point with joules: :data:`ENERGY_POINT_COLUMNS`, one row per (env,
    model, precision, batch_size); ``joules_per_step`` is the median over the point's ok
    runs that recorded joules, ``flop_per_joule`` = flop_per_step / joules_per_step."""
    empty = pd.DataFrame(columns=ENERGY_POINT_COLUMNS)
    if points is None or metrics is None or not len(points) or "joules_per_step" not in metrics:
        return empty
    pts = plottable_points(points)
    ok = _ok(metrics).assign(
        joules_per_step=lambda d: pd.to_numeric(d["joules_per_step"], errors="coerce")
    )
    ok = ok[ok["joules_per_step"] > 0]
    if not len(pts) or not len(ok):
        return empty
    joules = (
        ok.astype({"batch_size": int})
        .groupby(GROUP_KEYS)["joules_per_step"]
        .agg(["median", "count"])
        .rename(columns={"median": "joules_per_step", "count": "runs_with_energy"})
        .reset_index()
    )
    out = pts.astype({"batch_size": int}).merge(joules, on=GROUP_KEYS, how="inner")
    out = out[pd.to_numeric(out["flop_per_step"], errors="coerce") > 0]
    out = out.assign(flop_per_joule=out["flop_per_step"].astype(float) / out["joules_per_step"])
    return out[ENERGY_POINT_COLUMNS].sort_values(GROUP_KEYS).reset_index(drop=True)


@dataclass(frozen=True)
class EnvEnergy:
    """One env on the energy roofline: its costs (None: no roofs, ``reason`` says why)
    and why it has no points (``runs_reason``, None where it has some)."""

    env: str
    costs: EnergyCosts | None
    reason: str | None
    runs_reason: str | None

    def why_none(self) -> str:
        """Why the env has neither roofs nor points: each reason there is."""
        return "; ".join(r for r in (self.reason, self.runs_reason) if r)


def env_energy(ceilings: Mapping[str, Mapping], metrics: pd.DataFrame | None) -> list[EnvEnergy]:
    """Each env of ``ceilings`` (and of ``metrics``), sorted: its costs and reasons."""
    envs = set(ceilings)
    if metrics is not None and "env" in metrics:
        envs |= {str(e) for e in metrics["env"].dropna()}
    return [
        EnvEnergy(
            env,
            energy_costs(env, ceilings.get(env)),
            ceilings_reason(ceilings.get(env)),
            runs_reason(env, metrics),
        )
        for env in sorted(envs)
    ]
