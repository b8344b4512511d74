"""Before and after, the points (issue 37): each (env, model, precision, batch) of this
study against the same point of a baseline study, with a verdict and a gate.

Pure: run timings in (:class:`RunTiming`, from run JSONs or metrics.csv rows), rows out.
:mod:`dnnroofline.aggregate.compare_where` says what else changed (fingerprints, ops,
kernels, roofs); :mod:`dnnroofline.aggregate.compare_files` reads the two studies.

A point's images/s is the study's own ledger's (roofline_points.csv): nproc x batch / the
median of its ok runs' median steps. ``change_pct`` = 100 x (images/s / the baseline's
images/s - 1): positive is faster. Its 95% interval is :data:`CI_METHOD`. The verdict is
``same`` when the interval holds 0, or when |change_pct| is within the noise the two
studies show themselves (:func:`run_spread_pct`: the larger of the two points'
run-to-run spreads); else ``faster`` or ``slower`` by its sign.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dnnroofline.errors import InputError

COMPARE_COLUMNS = [
    "env",
    "model",
    "precision",
    "batch",
    "baseline_images_per_s",
    "images_per_s",
    "change_pct",
    "ci_low_pct",
    "ci_high_pct",
    "verdict",
    "baseline_runs",
    "runs",
    "note",
]
UNMATCHED_COLUMNS = ["env", "model", "precision", "batch", "in", "why"]
VERDICTS = ("faster", "same", "slower")

RESAMPLES = 2000
SEED = 37
LEVEL = 0.95
#: How the interval of ``change_pct`` is drawn (the note of compare.csv names it short).
CI_METHOD = (
    f"two-level percentile bootstrap, {RESAMPLES:,} resamples per study, seeded "
    f"(numpy Generator PCG64, seed {SEED} and the point): each resample draws the point's "
    "ok runs with replacement, then each drawn run's per-step times with replacement; the "
    "statistic is nproc x batch / the median of the drawn runs' median steps (the ledger's "
    "images/s); change = the current resample's over the baseline's, independent draws; "
    f"the interval is the {LEVEL:.1%} central percentile range of the change"
)
CI_SHORT = "two-level bootstrap (runs, then their steps)"


@dataclass(frozen=True)
class RunTiming:
    """One timed run as the comparison reads it.

    ``steps``: its per-step times (``step_time_s.all``), or ``(step_median_s,)`` where only
    metrics.csv had the run (``has_steps`` False: its steps are not resampled).
    ``images_per_s``: its own (NaN for a failed run). ``nproc`` x ``batch``: the images of
    one step.
    """

    env: str
    model: str
    precision: str
    batch: int
    run: int
    status: str
    steps: tuple[float, ...] = ()
    images_per_s: float = math.nan
    nproc: int = 1
    has_steps: bool = True
    message: str | None = None

    @property
    def point(self) -> tuple[str, str, str, int]:
        return (self.env, self.model, self.precision, self.batch)


Point = tuple[str, str, str, int]


# --------------------------------------------------------------------------- bootstrap


def point_seed(point: Point, side: str) -> list[int]:
    """The seed of one point's resamples on one side: the same whatever else is compared."""
    key = "|".join(map(str, point)) + "|" + side
    return [SEED, zlib.crc32(key.encode())]


def resample_median_steps(
    steps: Sequence[Sequence[float]], rng: np.random.Generator, n: int = RESAMPLES
) -> np.ndarray:
    """``n`` two-level bootstrap draws of the median of the runs' median steps.

    Each draw takes len(steps) runs with replacement, then for each drawn run as many
    steps as it has, with replacement (a run drawn twice gets two independent draws of
    its steps), and returns the median over the drawn runs of their medians.

    Vectorised per run length. A run's steps are sorted once, so a draw of its steps is a
    draw of positions in that order, and the draw's median is the value at the median of
    the drawn positions (a monotone map keeps order statistics): the positions, small
    integers, are partitioned in place instead of gathered floats.
    """
    n_runs = len(steps)
    lengths = np.array([len(s) for s in steps])
    if n_runs == 0 or lengths.min() < 1:
        raise ValueError("every run needs at least one step")
    table = np.zeros((n_runs, int(lengths.max())))
    for i, s in enumerate(steps):
        table[i, : len(s)] = np.sort(np.asarray(s, dtype=float))
    chosen = rng.integers(0, n_runs, size=(n, n_runs))
    run_medians = np.empty((n, n_runs))
    chosen_len = lengths[chosen]
    for length in np.unique(lengths):
        length = int(length)
        mask = chosen_len == length
        runs = chosen[mask]
        picks = rng.integers(0, length, size=(runs.size, length), dtype=np.int16)
        lo, hi = (length - 1) // 2, length // 2
        picks.partition(sorted({lo, hi}), axis=1)
        run_medians[mask] = 0.5 * (table[runs, picks[:, lo]] + table[runs, picks[:, hi]])
    return np.median(run_medians, axis=1)


def change_interval(
    base: Sequence[RunTiming], cur: Sequence[RunTiming], point: Point, n: int = RESAMPLES
) -> tuple[float, float]:
    """The :data:`LEVEL` interval of the change in images/s, in percent (:data:`CI_METHOD`)."""
    b_rate = _images_per_step(base) / resample_median_steps(
        [r.steps for r in base], np.random.default_rng(point_seed(point, "baseline")), n
    )
    c_rate = _images_per_step(cur) / resample_median_steps(
        [r.steps for r in cur], np.random.default_rng(point_seed(point, "current")), n
    )
    change = 100.0 * (c_rate / b_rate - 1.0)
    tail = 100.0 * (1.0 - LEVEL) / 2.0
    low, high = np.percentile(change, [tail, 100.0 - tail])
    return float(low), float(high)


# --------------------------------------------------------------------------- points


def _images_per_step(runs: Sequence[RunTiming]) -> int:
    return max(r.nproc for r in runs) * runs[0].batch


def point_images_per_s(runs: Sequence[RunTiming]) -> float:
    """nproc x batch / the median of the ok runs' median steps (roofline_points.csv's)."""
    return _images_per_step(runs) / float(np.median([np.median(r.steps) for r in runs]))


def run_spread_pct(runs: Sequence[RunTiming]) -> float:
    """Run-to-run spread of a point: 100 x (max - min) / median of its runs' images/s;
    0 for a single run (no spread to see)."""
    rates = np.array([_run_rate(r) for r in runs])
    if len(rates) < 2:
        return 0.0
    return float(100.0 * (rates.max() - rates.min()) / np.median(rates))


def _run_rate(run: RunTiming) -> float:
    if math.isfinite(run.images_per_s) and run.images_per_s > 0:
        return run.images_per_s
    return run.nproc * run.batch / float(np.median(run.steps))


def verdict_of(change_pct: float, ci_low: float, ci_high: float, noise_pct: float) -> str:
    """``same`` when the interval holds 0 or |change| is within the noise; else the sign's."""
    if ci_low <= 0.0 <= ci_high or abs(change_pct) <= noise_pct:
        return "same"
    return "faster" if change_pct > 0 else "slower"


def _failed_kinds(runs: Sequence[RunTiming]) -> tuple[int, str]:
    """(how many failed, "oom x2, error")."""
    failed = Counter(r.status for r in runs if r.status != "ok")
    kinds = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(failed.items()))
    return sum(failed.values()), kinds


def _failed_note(runs: Sequence[RunTiming], side: str) -> str:
    n, kinds = _failed_kinds(runs)
    if not n:
        return ""
    return f"{n} failed run{'s' if n > 1 else ''} in the {side} not counted ({kinds})"


def _side_notes(ok: Sequence[RunTiming], runs: Sequence[RunTiming], side: str) -> list[str]:
    notes = [_failed_note(runs, side)]
    if len(ok) == 1:
        notes.append(f"one ok run in the {side}: no run-to-run spread")
    bare = sum(not r.has_steps for r in ok)
    if bare:
        notes.append(
            f"{bare} {side} run(s) from metrics.csv without per-step times: the interval "
            "resamples them as runs only"
        )
    return [n for n in notes if n]


def compare_point(
    base_runs: Sequence[RunTiming],
    cur_runs: Sequence[RunTiming],
    point: Point,
    baseline_env: str | None = None,
    n: int = RESAMPLES,
) -> dict:
    """One compare.csv row for a point both studies ran ok at least once."""
    base = [r for r in base_runs if r.status == "ok"]
    cur = [r for r in cur_runs if r.status == "ok"]
    b_ips, c_ips = point_images_per_s(base), point_images_per_s(cur)
    change = 100.0 * (c_ips / b_ips - 1.0)
    low, high = change_interval(base, cur, point, n)
    noise = max(run_spread_pct(base), run_spread_pct(cur))
    verdict = verdict_of(change, low, high, noise)
    notes = []
    if baseline_env and baseline_env != point[0]:
        notes.append(f"baseline env {baseline_env}")
    notes += _side_notes(base, base_runs, "baseline") + _side_notes(cur, cur_runs, "current")
    if verdict == "same" and not (low <= 0.0 <= high):
        notes.append(f"|change| within the studies' run-to-run spread ({noise:.1f}%)")
    if len(base) == 1 and len(cur) == 1:
        notes.append(f"interval: {CI_SHORT}, of one run each: the steps alone")
    env, model, precision, batch = point
    return {
        "env": env,
        "model": model,
        "precision": precision,
        "batch": int(batch),
        "baseline_images_per_s": b_ips,
        "images_per_s": c_ips,
        "change_pct": change,
        "ci_low_pct": low,
        "ci_high_pct": high,
        "verdict": verdict,
        "baseline_runs": len(base),
        "runs": len(cur),
        "note": "; ".join(notes),
    }


def group_runs(runs: Iterable[RunTiming]) -> dict[Point, list[RunTiming]]:
    """Runs by point, in (env, model, precision, batch) order."""
    out: dict[Point, list[RunTiming]] = {}
    for r in runs:
        out.setdefault(r.point, []).append(r)
    return dict(sorted(out.items()))


def _why_missing(point: Point, other: Mapping[Point, list], side: str, mapped: str) -> str:
    """Why ``point`` (its env already mapped to the other study's name) is not there."""
    env, model, precision, batch = point
    have = [p for p in other if p[0] == env]
    if not have:
        hint = "" if side == "current study" else " (map it with compare.envs)"
        return f"env {mapped} not in the {side}{hint}"
    if not any(p[1] == model for p in have):
        return f"model {model} not measured in the {side}"
    if not any(p[1] == model and p[2] == precision for p in have):
        return f"precision {precision} not measured in the {side}"
    return f"batch {batch} not measured in the {side}"


def _unmatched(point: Point, side: str, why: str) -> dict:
    env, model, precision, batch = point
    return {"env": env, "model": model, "precision": precision, "batch": int(batch)} | {
        "in": side,
        "why": why,
    }


def _no_ok(runs: Sequence[RunTiming]) -> bool:
    return not any(r.status == "ok" for r in runs)


def compare_points(
    baseline_runs: Iterable[RunTiming],
    current_runs: Iterable[RunTiming],
    env_map: Mapping[str, str] | None = None,
    *,
    resamples: int = RESAMPLES,
) -> tuple[list[dict], list[dict]]:
    """(rows of :data:`COMPARE_COLUMNS`, rows of :data:`UNMATCHED_COLUMNS`).

    A point matches by its env (this study's name mapped through ``env_map``, {new: old};
    an unmapped env by its own name), model, precision and batch. A point with no ok run
    on one side is unmatched, with why. No point in common and no ``env_map``: InputError
    naming both studies' envs.
    """
    env_map = dict(env_map or {})
    back = {old: new for new, old in env_map.items()}
    base = group_runs(baseline_runs)
    cur = group_runs(current_runs)
    # The baseline's points under this study's env names.
    base_as = {(back.get(p[0], p[0]), *p[1:]): runs for p, runs in base.items()}
    common = [p for p in cur if p in base_as]
    if not common and not env_map:
        b_envs = sorted({p[0] for p in base}) or ["none"]
        c_envs = sorted({p[0] for p in cur}) or ["none"]
        raise InputError(
            f"compare: no (env, model, precision, batch) point in common between the "
            f"baseline (envs: {', '.join(b_envs)}) and this study (envs: {', '.join(c_envs)}). "
            "If the envs are the same machines under other names, map them with "
            f"compare.envs (this study's env: the baseline's), e.g. {{{c_envs[0]}: {b_envs[0]}}}"
        )
    rows, unmatched = [], []
    for point, runs in cur.items():
        old_env = env_map.get(point[0], point[0])
        if point not in base_as:
            why = _why_missing((old_env, *point[1:]), base, "baseline", old_env)
            unmatched.append(_unmatched(point, "current", why))
        elif _no_ok(runs) or _no_ok(base_as[point]):
            side, why = _no_ok_why(base_as[point], runs)
            unmatched.append(_unmatched(point, side, why))
        else:
            rows.append(compare_point(base_as[point], runs, point, old_env, resamples))
    for point in base_as:
        if point not in cur:
            original = (env_map.get(point[0], point[0]), *point[1:])
            why = _why_missing(point, cur, "current study", point[0])
            unmatched.append(_unmatched(original, "baseline", why))
    return rows, unmatched


def _no_ok_why(base: Sequence[RunTiming], cur: Sequence[RunTiming]) -> tuple[str, str]:
    """(in, why) of a point both studies have where one or both ran no ok run."""
    if _no_ok(base) and _no_ok(cur):
        return "current", "no ok run in either study"
    if _no_ok(base):
        return "current", f"no ok run in the baseline ({_failed_kinds(base)[1]})"
    return "baseline", f"no ok run in the current study ({_failed_kinds(cur)[1]})"


# --------------------------------------------------------------------------- the gate


def regressions(rows: Iterable[Mapping], tolerance_pct: float) -> list[Mapping]:
    """The points slower by more than ``tolerance_pct`` whose interval excludes 0
    (``ci_high_pct`` < 0). Nothing else fails the gate."""
    if not math.isfinite(tolerance_pct) or tolerance_pct < 0:
        raise InputError(f"tolerance_pct must be a number >= 0, got {tolerance_pct!r}")
    out = []
    for row in rows:
        change, high = float(row["change_pct"]), float(row["ci_high_pct"])
        if change < -tolerance_pct and high < 0:
            out.append(row)
    return out


def summary(rows: Sequence[Mapping], unmatched: Sequence[Mapping]) -> str:
    """A few lines: counts per verdict, the slowest change, the unmatched count."""
    counts = Counter(r["verdict"] for r in rows)
    parts = [f"{counts.get(v, 0)} {v}" for v in VERDICTS]
    lines = [f"{len(rows)} point(s) compared: {', '.join(parts)}"]
    if rows:
        worst = min(rows, key=lambda r: r["change_pct"])
        lines.append(f"slowest change: {describe(worst)}")
    if unmatched:
        lines.append(f"{len(unmatched)} point(s) in one study only (compare_unmatched.csv)")
    return "\n".join(lines)


def describe(row: Mapping) -> str:
    """``local resnet18 fp32 bs8: -20.1% [-22.0%, -18.3%] slower``."""
    return (
        f"{row['env']} {row['model']} {row['precision']} bs{int(row['batch'])}: "
        f"{float(row['change_pct']):+.1f}% [{float(row['ci_low_pct']):+.1f}%, "
        f"{float(row['ci_high_pct']):+.1f}%] {row['verdict']}"
    )
