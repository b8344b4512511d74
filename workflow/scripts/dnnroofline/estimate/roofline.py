"""Roofline math: roofs, ridge points, bounds, attained performance, efficiency.

Pure functions, no I/O. Units: FLOP, bytes, seconds; FLOP/s and bytes/s.

Definitions (docs/method.md):

- arithmetic intensity  ``ai = flop_per_step / bytes_per_step``      (FLOP/byte)
- attained performance  ``attained = flop_per_step / median_step_s`` (FLOP/s)
- roof at an AI         ``roof = min(compute_roof, ai * memory_roof)``
- ridge point           ``ridge_ai = compute_roof / memory_roof``
- bound                 ``"memory"`` if ``ai < ridge_ai`` else ``"compute"``; ``"host"``
                        whatever the AI when the device is busy under
                        :data:`HOST_BOUND_BELOW` of the step (:func:`bound_with_busy_share`)
- efficiency            ``attained / roof`` (may exceed 1: see ``above_roof``)

A point above its roof is a bug or a wrong peak. It is *flagged*
(:func:`is_above_roof`), never clipped or dropped.

Ceilings contract assumption (``results/{env}/ceilings.json``): each entry of
``roofs`` has ``kind`` ("compute" | "memory"), ``precision`` (compute roofs:
the *pipeline* precision names ``fp32``, ``tf32``, ``amp``, ``bf16``; memory
roofs: null), ``source`` ("measured" | "datasheet") and ``value`` (FLOP/s or
bytes/s). A compute roof for precision ``amp`` may also be given as ``fp16``
(amp is fp16 autocast); no other alias is accepted, so a tf32 run is never
silently measured against an fp32 peak. When several roofs of one kind and
precision exist, ``measured`` is preferred over ``datasheet``; among several
of the same source the highest value is taken (the best demonstrated ceiling).

The roof policy: :func:`select_roof` is the one rule by which a point, an op or a
kernel gets its roof, and every stage goes through it (the points, the plots, the
model's tables and predictions, the prediction check's baselines, the above-roof
check of ncu's kernels, the gpu-check summary and the report):

- compute roof of a precision: an entry named by the precision or its compute dtype
  (:func:`dnnroofline.study.precisions.roof_names`: amp's may be called fp16), never
  another precision's;
- source: the first of ``sources`` that has one (default measured, then datasheet); a
  caller that asks one question of one source (the above-roof check: measured only; a
  baseline of the check: datasheet only) passes that source alone, and gets None, never
  the other source's roof;
- memory roof: every memory entry is DRAM; the highest of the source wins, whatever
  benchmark set it (STREAM triad, scale, copy or the device-to-device copy);
- none: None, and the caller refuses (names the file and the precision) or says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dnnroofline.errors import InputError
from dnnroofline.study.precisions import PRECISIONS, roof_names

#: Relative tolerance for :func:`is_above_roof`: floating-point round-off only.
ABOVE_ROOF_RTOL = 1e-9

ROOF_KINDS = ("compute", "memory")
ROOF_SOURCES = ("measured", "datasheet")  # order = preference


def check_positive(name: str, value: object) -> float:
    """Return ``value`` as float if it is a positive finite number, else raise InputError."""
    if isinstance(value, bool):
        raise InputError(f"{name} must be a positive finite number, got {value!r}")
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a positive finite number, got {value!r}") from None
    if not math.isfinite(x) or x <= 0:
        raise InputError(f"{name} must be a positive finite number, got {value!r}")
    return x


def arithmetic_intensity(flop: float, nbytes: float) -> float:
    """FLOP per byte of DRAM traffic."""
    return check_positive("flop", flop) / check_positive("bytes", nbytes)


def roof(ai: float, compute_roof: float, memory_roof: float) -> float:
    """Attainable FLOP/s at arithmetic intensity ``ai``: ``min(compute_roof, ai * memory_roof)``."""
    ai = check_positive("arithmetic intensity (FLOP/byte)", ai)
    compute_roof = check_positive("compute roof (FLOP/s)", compute_roof)
    memory_roof = check_positive("memory roof (bytes/s)", memory_roof)
    return min(compute_roof, ai * memory_roof)


def ideal_seconds(flops: float, nbytes: float, compute_roof: float, memory_roof: float) -> float:
    """An op's time at its roofs: the longer of its FLOPs and its bytes at full rate."""
    return max(flops / compute_roof, nbytes / memory_roof)


def ridge_ai(compute_roof: float, memory_roof: float) -> float:
    """AI where the memory roof meets the compute roof: ``compute_roof / memory_roof``."""
    return check_positive("compute roof (FLOP/s)", compute_roof) / check_positive(
        "memory roof (bytes/s)", memory_roof
    )


def bound(ai: float, compute_roof: float, memory_roof: float) -> str:
    """``"memory"`` left of the ridge point, ``"compute"`` at or right of it."""
    ai = check_positive("arithmetic intensity (FLOP/byte)", ai)
    return "memory" if ai < ridge_ai(compute_roof, memory_roof) else "compute"


#: Kernel-busy share (device-busy time / step time) under which a step is ``host``-bound.
#: The other H100 points read 0.92-1.06 from ncu's kernel pass (an upper bound:
#: resnet18 fp32 reads 1.06, so it runs at least 6% high), and even a device-bound eager
#: step leaves gaps between dependent kernels; resnet18 amp at batch 128 reads 0.65 (its
#: fastest run 0.69). Below 0.75 the device is idle over a quarter of the step, more than
#: either explains, and keeping it fed would speed the step by over 1/0.75 = 1.33x
#: whatever its kernels' AI: the host is the lever.
HOST_BOUND_BELOW = 0.75


def bound_with_busy_share(
    bound: str | None, busy_share: float, threshold: float = HOST_BOUND_BELOW
) -> str | None:
    """``"host"`` when the step's kernel-busy share is known and under ``threshold``, else
    ``bound`` (the roofline's verdict on the kernels) unchanged."""
    if isinstance(busy_share, (int, float)) and math.isfinite(busy_share):
        if busy_share < 0:
            raise InputError(f"kernel-busy share must be >= 0, got {busy_share!r}")
        if busy_share < threshold:
            return "host"
    return bound


def attained_flops(flop_per_step: float, median_step_s: float) -> float:
    """Attained FLOP/s: FLOPs of one step over the median step time."""
    return check_positive("flop per step", flop_per_step) / check_positive(
        "median step time (s)", median_step_s
    )


def efficiency(attained: float, roof_flops: float) -> float:
    """``attained / roof``; above 1 means the point is above its roof (not clipped)."""
    return check_positive("attained FLOP/s", attained) / check_positive("roof FLOP/s", roof_flops)


def is_above_roof(attained: float, roof_flops: float, rel_tol: float = ABOVE_ROOF_RTOL) -> bool:
    """True when ``attained > roof * (1 + rel_tol)``: a bug or a wrong peak, to be flagged."""
    attained = check_positive("attained FLOP/s", attained)
    roof_flops = check_positive("roof FLOP/s", roof_flops)
    if not (math.isfinite(rel_tol) and rel_tol >= 0):
        raise InputError(f"rel_tol must be a finite number >= 0, got {rel_tol!r}")
    return attained > roof_flops * (1.0 + rel_tol)


@dataclass(frozen=True)
class RooflinePoint:
    """One (FLOP, bytes, time) measurement placed on one roofline."""

    flop_per_step: float
    bytes_per_step: float
    ai: float
    step_s: float
    attained_flops: float
    peak_flops: float
    peak_bandwidth: float
    ridge_ai: float
    roof_flops: float
    efficiency: float
    bound: str
    above_roof: bool


def evaluate_point(
    flop_per_step: float,
    bytes_per_step: float,
    median_step_s: float,
    compute_roof: float,
    memory_roof: float,
    rel_tol: float = ABOVE_ROOF_RTOL,
) -> RooflinePoint:
    """Place one measurement on the roofline ``(compute_roof, memory_roof)``."""
    ai = arithmetic_intensity(flop_per_step, bytes_per_step)
    att = attained_flops(flop_per_step, median_step_s)
    r = roof(ai, compute_roof, memory_roof)
    return RooflinePoint(
        flop_per_step=float(flop_per_step),
        bytes_per_step=float(bytes_per_step),
        ai=ai,
        step_s=float(median_step_s),
        attained_flops=att,
        peak_flops=float(compute_roof),
        peak_bandwidth=float(memory_roof),
        ridge_ai=ridge_ai(compute_roof, memory_roof),
        roof_flops=r,
        efficiency=efficiency(att, r),
        bound=bound(ai, compute_roof, memory_roof),
        above_roof=is_above_roof(att, r, rel_tol),
    )


# --------------------------------------------------------------------------- ceilings


@dataclass(frozen=True)
class Roof:
    """One validated entry of a ceilings file's ``roofs`` list."""

    kind: str  # "compute" | "memory"
    precision: str | None  # None for memory roofs
    source: str  # "measured" | "datasheet"
    value: float  # FLOP/s (compute) or bytes/s (memory)
    note: str  # method (measured) or citation (datasheet), "" if absent
    set_by: str | None = None  # a measured roof's winning benchmark, where the file says


def parse_roofs(ceilings: dict, where: str = "ceilings") -> list[Roof]:
    """Validate ``ceilings["roofs"]`` and return it as :class:`Roof` objects.

    ``where`` names the file in error messages.
    """
    if not isinstance(ceilings, dict) or not isinstance(ceilings.get("roofs"), list):
        raise InputError(f"{where}: expected a JSON object with a 'roofs' list")
    out = []
    for i, entry in enumerate(ceilings["roofs"]):
        at = f"{where}: roofs[{i}]"
        if not isinstance(entry, dict):
            raise InputError(f"{at} must be an object, got {entry!r}")
        kind = entry.get("kind")
        if kind not in ROOF_KINDS:
            raise InputError(f"{at}.kind must be one of {ROOF_KINDS}, got {kind!r}")
        source = entry.get("source")
        if source not in ROOF_SOURCES:
            raise InputError(f"{at}.source must be one of {ROOF_SOURCES}, got {source!r}")
        precision = entry.get("precision")
        if kind == "compute":
            if not isinstance(precision, str) or not precision:
                raise InputError(f"{at}.precision must name a precision, got {precision!r}")
            precision = precision.lower()
        else:
            precision = None
        value = check_positive(f"{at}.value ({kind} roof)", entry.get("value"))
        note = entry.get("method") or entry.get("citation") or ""
        set_by = entry.get("set_by")
        out.append(Roof(kind, precision, source, value, str(note), set_by and str(set_by)))
    return out


def precision_aliases(precision: str) -> tuple[str, ...]:
    """The ceilings precision names accepted for a pipeline precision."""
    return roof_names(precision)


def select_roof(
    roofs: Iterable[Roof],
    kind: str,
    precision: str | None = None,
    sources: Sequence[str] = ROOF_SOURCES,
) -> Roof | None:
    """The roof of ``kind`` (and ``precision`` for compute) that the pipeline uses: from the
    first of ``sources`` (in order of preference) that has one, the highest.

    Returns None when there is none; callers must refuse rather than guess.
    """
    if kind not in ROOF_KINDS:
        raise InputError(f"roof kind must be one of {ROOF_KINDS}, got {kind!r}")
    if kind == "compute" and not precision:
        raise InputError("a compute roof is selected by precision; none was given")
    unknown = [s for s in sources if s not in ROOF_SOURCES]
    if unknown or not sources:
        raise InputError(f"roof sources must be among {ROOF_SOURCES}, got {tuple(sources)!r}")
    names = precision_aliases(precision) if kind == "compute" else None
    roofs = list(roofs)
    for source in sources:
        cands = [
            r
            for r in roofs
            if r.kind == kind and r.source == source and (names is None or r.precision in names)
        ]
        if cands:
            return max(cands, key=lambda r: r.value)
    return None


def roof_precisions(roofs: Iterable[Roof]) -> tuple[str, ...]:
    """The study's precisions that have a compute roof (of any source), in its order."""
    roofs = list(roofs)
    return tuple(p for p in PRECISIONS if select_roof(roofs, "compute", p) is not None)


def roofs_from_ceilings(
    ceilings: Mapping, precisions: Sequence[str] | None = None, where: str = "ceilings.json"
) -> tuple[dict, list[str]]:
    """The roofs efficiencies are shares of, as every stage picks them
    (:func:`select_roof`): per precision the measured compute
    roof (else the datasheet's, noted), and the measured memory roof (else datasheet, noted).

    ``precisions``: those wanted (None: every precision with a compute roof). A wanted
    precision without any compute roof, or a file without a memory roof, is refused.
    """
    roofs = parse_roofs(dict(ceilings), where)
    notes: list[str] = []
    if precisions is None:
        precisions = roof_precisions(roofs)
    compute = {}
    for p in precisions:
        roof = select_roof(roofs, "compute", p)
        if roof is None:
            raise InputError(f"{where}: no compute roof for precision {p!r}")
        if roof.source != "measured":
            notes.append(f"{p}: no measured compute roof in {where}: shares of the datasheet's")
        compute[p] = roof.value
    memory = select_roof(roofs, "memory")
    if memory is None:
        raise InputError(f"{where}: no memory roof")
    if memory.source != "measured":
        notes.append(f"no measured memory roof in {where}: shares of the datasheet's")
    return {"compute": compute, "memory": memory.value}, notes


def precision_roof(roofs: Mapping[str, float], precision: str) -> float | None:
    """A precision's roof in a ``{precision name: FLOP/s}`` map of roofs already selected
    (an efficiency document's ``roofs.compute``): the highest of its names, else None."""
    values = [roofs[n] for n in precision_aliases(precision) if n in roofs]
    return max(values) if values else None


#: A roof this much above the current one counts as higher (a few % is noise).
HIGHER_ROOF_MARGIN = 1.05


def higher_compute_roofs(roofs: Iterable[Roof], precision: str) -> list[tuple[str, Roof]]:
    """(precision, its roof) of the study's other precisions whose compute roof is above
    ``precision``'s (by :data:`HIGHER_ROOF_MARGIN`; all of them where it has none): where a
    compute-bound point could move."""
    roofs = list(roofs)
    current = select_roof(roofs, "compute", precision)
    out = []
    for p in PRECISIONS:
        r = select_roof(roofs, "compute", p) if p != precision else None
        if r and (current is None or r.value > current.value * HIGHER_ROOF_MARGIN):
            out.append((p, r))
    return out


# --------------------------------------------------------------------------- roofs to draw


@dataclass(frozen=True)
class EnvRoofs:
    """The highest compute roof of each (precision, source) of one env, and the highest
    memory (DRAM) roof of each source: what a plot of that env can draw."""

    compute: dict[tuple[str, str], Roof]
    memory: dict[str, Roof]


def env_roofs(ceilings: Mapping, where: str = "ceilings", env: str | None = None) -> EnvRoofs:
    """The roofs of one ceilings file, the highest of each kind, precision and source.

    Raises InputError naming ``where`` (and ``env``) when there is no compute roof or no
    memory roof: a roofline is never drawn against a guess.
    """
    compute: dict[tuple[str, str], Roof] = {}
    memory: dict[str, Roof] = {}
    for r in parse_roofs(dict(ceilings) if isinstance(ceilings, Mapping) else ceilings, where):
        table, key = (
            (compute, (r.precision, r.source)) if r.kind == "compute" else (memory, r.source)
        )
        if key not in table or r.value > table[key].value:  # on a tie the first note stays
            table[key] = r
    subject = f"{where}: env {env!r} has" if env else f"{where}:"
    if not compute:
        raise InputError(f"{subject} no compute roof to draw")
    if not memory:
        raise InputError(f"{subject} no memory-bandwidth (DRAM) roof to draw")
    return EnvRoofs(compute, memory)


def paired_source(
    have: Iterable[str], source: str, preference: Sequence[str] = ROOF_SOURCES
) -> str:
    """The memory roof a compute roof of ``source`` is drawn with: the one of the same
    source, else the first of ``preference`` there is (``have`` must hold one)."""
    have = set(have)
    if source in have:
        return source
    for s in preference:
        if s in have:
            return s
    raise InputError(f"no memory roof of a source in {tuple(preference)} to pair with {source!r}")


@dataclass(frozen=True)
class RoofPair:
    """A compute roof to draw, with the memory roof it meets at its ridge point."""

    env: str
    compute: Roof
    memory: Roof

    @property
    def ridge(self) -> float:
        return self.compute.value / self.memory.value


def roofs_to_draw(
    ceilings_by_env: Mapping[str, Mapping],
    precisions_by_env: Mapping[str, Iterable[str]],
    where_by_env: Mapping[str, str] | None = None,
) -> list[RoofPair]:
    """The compute roofs a roofline of these envs draws, each with its memory roof.

    ``precisions_by_env``: the precisions of each env's points. With one env all its
    compute roofs are drawn; with several, only those of precisions with points in that
    env (all of them for an env without points). A precision with points but no compute
    peak in its env is refused. Sorted by env, then (precision, source).
    """
    where_by_env = where_by_env or {}
    combined = len(ceilings_by_env) > 1
    pairs = []
    for env in sorted(ceilings_by_env):
        where = where_by_env.get(env, f"ceilings of env {env!r}")
        roofs = env_roofs(ceilings_by_env[env], where, env)
        precisions = list(dict.fromkeys(precisions_by_env.get(env, ())))
        for p in precisions:
            if not any(cp in precision_aliases(p) for cp, _ in roofs.compute):
                raise InputError(f"{where}: env {env!r} has no compute peak for precision {p!r}")
        wanted = {a for p in precisions for a in precision_aliases(p)}
        for (prec, source), compute_roof in sorted(roofs.compute.items()):
            if combined and precisions and prec not in wanted:
                continue
            memory = roofs.memory[paired_source(roofs.memory, source)]
            pairs.append(RoofPair(env, compute_roof, memory))
    return pairs
