"""An env's energy costs (its ceilings' fit) and the energy of a predicted training step.

Choi et al. (2013), "A roofline model of energy": a step's joules are its FLOPs times
the energy per FLOP of the precision each op computes in, plus the bytes it moves times
the energy per DRAM byte, plus the machine's constant power over the step's time. The
costs (``energy.costs`` of ``ceilings.json``: pJ/FLOP per precision, pJ/B, static W)
come from the env's own microbenchmarks (:mod:`dnnroofline.measure.energy_costs`); the
FLOPs and bytes per op from the step's op inventory; the time from the model's predicted
step. No measured run of the point is an input. The same costs are the energy roofline's
roofs (:meth:`EnergyCosts.compute_roof`, :meth:`EnergyCosts.memory_roof`,
:meth:`EnergyCosts.combined`).

Pure arithmetic, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from dnnroofline.errors import InputError
from dnnroofline.study.precisions import COMPUTE_DTYPE, PRECISIONS, dtype_precision

#: Op classes whose float32 arithmetic runs on TF32 tensor cores in a tf32 step.
TF32_CLASSES = frozenset({"gemm", "conv", "conv_depthwise"})


@dataclass(frozen=True)
class EnergyCosts:
    """An env's energy costs: joules per FLOP by precision, per DRAM byte, and the
    constant power (W) the machine draws whatever it computes."""

    joules_per_flop: Mapping[str, float]
    joules_per_byte: float
    static_power_w: float
    source: str = ""

    def compute_roof(self, precision: str) -> float | None:
        """The compute-energy roof 1/eps_flop (FLOP/J); None where the fit gave no cost
        (a roof at infinity)."""
        eps = self.joules_per_flop.get(precision)
        return 1.0 / eps if eps else None

    def memory_roof(self, ai: ArrayLike) -> np.ndarray | None:
        """The memory-energy roof AI/eps_mem (FLOP/J); None where the fit gave no cost."""
        return np.asarray(ai, dtype=float) / self.joules_per_byte if self.joules_per_byte else None

    def combined(self, precision: str, ai: ArrayLike) -> np.ndarray:
        """Choi's 1/(eps_flop + eps_mem/AI): the FLOP/J of a kernel at ``ai`` paying for
        both its FLOPs and its bytes."""
        eps = self.joules_per_flop.get(precision, 0.0) + self.joules_per_byte / np.asarray(
            ai, dtype=float
        )
        with np.errstate(divide="ignore"):
            return np.where(eps > 0, 1.0 / eps, np.inf)

    def balance(self, precision: str) -> float | None:
        """The AI where the two roofs meet, eps_mem/eps_flop (FLOP/B): the energy ridge."""
        eps = self.joules_per_flop.get(precision)
        return self.joules_per_byte / eps if eps and self.joules_per_byte else None

    def flop_cost(self, dtype: str, op_class: str, precision: str) -> tuple[float, str]:
        """(joules per FLOP, the precision it is of) for one op of the step: the
        precision of its dtype (float32 matmuls and convolutions of a tf32 step: tf32),
        else the step's own precision where the ceilings have no cost for it."""
        own = dtype_precision(dtype) or precision
        if own == "fp32" and precision == "tf32" and op_class in TF32_CLASSES:
            own = "tf32"
        for name in (own, COMPUTE_DTYPE.get(own, own), precision):
            if name in self.joules_per_flop:
                return self.joules_per_flop[name], name
        raise InputError(
            f"{self.source or 'energy costs'}: no energy per FLOP for a {dtype} op of a "
            f"{precision} step (costs for {', '.join(sorted(self.joules_per_flop)) or 'none'})"
        )


def _cost(value: object, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InputError(f"{where}: energy.costs.{what} must be a number >= 0, got {value!r}")
    return float(value)


def costs_from_ceilings(ceilings: Mapping, where: str) -> tuple[EnergyCosts | None, str]:
    """The env's costs from its ceilings.json, or None and why there are none."""
    energy = ceilings.get("energy")
    if not isinstance(energy, Mapping):
        return None, f"{where} records no energy (measured before energy was)"
    if not energy.get("available"):
        return None, f"{where}: energy unavailable: {energy.get('reason')}"
    costs = energy.get("costs")
    if not isinstance(costs, Mapping):
        return None, f"{where}: no energy costs: {energy.get('costs_reason')}"
    per_flop = costs.get("pj_per_flop")
    if not isinstance(per_flop, Mapping) or not per_flop:
        raise InputError(f"{where}: energy.costs.pj_per_flop must map precisions to pJ/FLOP")
    unknown = sorted(set(per_flop) - set(PRECISIONS) - set(COMPUTE_DTYPE.values()))
    if unknown:
        raise InputError(f"{where}: energy.costs.pj_per_flop has unknown precisions {unknown}")
    return (
        EnergyCosts(
            joules_per_flop={
                p: _cost(v, f"pj_per_flop.{p}", where) * 1e-12 for p, v in per_flop.items()
            },
            joules_per_byte=_cost(costs.get("pj_per_byte"), "pj_per_byte", where) * 1e-12,
            static_power_w=_cost(costs.get("static_power_w"), "static_power_w", where),
            source=where,
        ),
        "",
    )


@dataclass(frozen=True)
class StepEnergy:
    """A step's predicted joules and their three parts."""

    joules: float
    flop_joules: float
    byte_joules: float
    static_joules: float

    def shares_text(self) -> str:
        """``"energy: static 61%, bytes 22%, FLOPs 17%"``."""
        parts = {"FLOPs": self.flop_joules, "bytes": self.byte_joules, "static": self.static_joules}
        ranked = sorted(parts.items(), key=lambda kv: -kv[1])
        return "energy: " + ", ".join(f"{k} {v / self.joules:.0%}" for k, v in ranked)


def step_energy(
    ops: Sequence[Mapping], costs: EnergyCosts, precision: str, step_s: float
) -> StepEnergy:
    """The joules of one step of ``ops`` (an inventory's validated ops, each for its
    ``count`` calls) lasting ``step_s`` seconds."""
    if not (math.isfinite(step_s) and step_s > 0):
        raise InputError(f"step energy needs a positive step time, got {step_s!r}")
    flop_j = byte_j = 0.0
    for op in ops:
        per_flop, _ = costs.flop_cost(str(op.get("dtype")), str(op.get("class")), precision)
        flop_j += per_flop * op["flops"] * op["count"]
        byte_j += costs.joules_per_byte * (op["bytes_read"] + op["bytes_written"]) * op["count"]
    static_j = costs.static_power_w * step_s
    return StepEnergy(flop_j + byte_j + static_j, flop_j, byte_j, static_j)
