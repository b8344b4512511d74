"""The model of a training step: predict it from microbenchmarks, then check it.

Pure arithmetic, no I/O. Inputs: an op inventory (:mod:`dnnroofline.estimate.op_inventory`,
every aten op of one step as the device runs it, with its class, shape, FLOPs, bytes,
count and the step's order), an env's :class:`Machine` (its measured roofs, the host's
costs and the efficiency fits, from ``results/{env}/efficiency.json``) and a precision.
No measured run of the point is an input: :func:`predict_step` takes none.

See :data:`METHOD` for the model; :func:`roofline_step_s` and
:func:`per_op_roofline_step_s` are the baselines it is checked beside;
:mod:`dnnroofline.perfmodel.scoring` scores every method against the measured points.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from dnnroofline.errors import InputError
from dnnroofline.estimate.op_classes import OP_CLASSES, table_key
from dnnroofline.estimate.roofline import bound_with_busy_share, check_positive, precision_roof
from dnnroofline.measure import fresh_pages
from dnnroofline.perfmodel.replay import Issue, replay
from dnnroofline.study.precisions import roof_names

#: Nominal level of the prediction interval: the 10th to the 90th percentile.
INTERVAL_LEVEL = 0.8
INTERVAL_QUANTILES = (0.1, 0.9)
#: Draws of the interval's resampling, and its seed (the interval is reproducible).
INTERVAL_DRAWS, INTERVAL_SEED = 300, 0
BOUNDS = ("compute", "memory", "host")
#: How many classes ``top_classes`` names.
TOP_CLASSES = 3

METHOD = (
    "Per op of the step's inventory (every aten op of forward, backward and optimizer as "
    "the device runs it): ideal_s = max(FLOPs / measured compute roof of the precision, "
    "bytes read and written / measured memory roof); its efficiency (the share of that "
    "it attains) from a fit per table (its class, convolutions by kind and direction) "
    "on the env's sweep of ops drawn over shape ranges, read at the op's own shape "
    "(batch, channels, spatial size, kernel, stride, groups; m, n, k; elements, in place, "
    "broadcast...), never faster than the roof; device time = ideal_s / efficiency, on a "
    "GPU at least the launch cost per call, on a CPU plus the measured cost per byte of "
    "each output it allocates at or above the size the machine maps fresh from the OS "
    "(fresh pages). Host time: each forward and backward op's "
    "measured cost with autograd, by class and phase, and the step's fixed costs "
    "(optimizer step with GradScaler under amp, zero_grad, the backward call) as "
    "measured for the model's number of parameter tensors. Step: on a CPU the sum of "
    "device and host times (one thread does both); on a GPU a replay of the host issuing "
    "the ops in the step's order ahead of the device, waiting where the step syncs "
    "(GradScaler's inf check), three steps in a row, the last one's time. Bound: on a CPU "
    "the largest share of the step among compute-bound device time, memory-bound device "
    "time and host time; on a GPU host where the device is busy under 75% of the step "
    "(the report's rule for a measured kernel-busy share), else compute or memory by the "
    "larger device time. Interval (nominal 80%): per draw, each table's ops scaled together "
    "by one residual drawn from the table's cross-validated log residuals (the fit's error "
    "on shapes it did not see; a model's ops of one table err together, as its shapes are "
    "neighbours), the tables apart, the step recomputed "
    f"{INTERVAL_DRAWS} times; its 10th and 90th percentiles over its median, times the "
    "predicted step. Images/s = batch / step time."
)


class EfficiencyTables(Protocol):
    """What the model needs of an env's tables
    (:class:`dnnroofline.perfmodel.op_class_tables.Tables`)."""

    def efficiencies(
        self, precision: str, key: str, items: Sequence[Mapping]
    ) -> tuple[list[float], str, int]: ...

    def residuals(self, precision: str, key: str) -> list[float]: ...


@dataclass(frozen=True)
class HostCosts:
    """The host's measured costs (an efficiency document's ``dispatch``): seconds per op
    with autograd by phase and class, the step's fixed seconds (``fixed_s`` per
    precision: ``(intercept, per parameter tensor)``), and on a GPU the launch cost."""

    per_op: Mapping[str, Mapping[str, float]]  # phase -> class -> seconds
    fixed_s: Mapping[str, tuple[float, float]]
    launch_s: float | None = None
    fresh_pages: Mapping | None = None  # a CPU's cost of outputs in pages new from the OS

    @classmethod
    def from_dispatch(cls, dispatch: Mapping | None) -> HostCosts | None:
        """From a ``dispatch`` block; None where it measured no per-op costs (a ceilings
        file, an efficiency document of the first schema)."""
        if not isinstance(dispatch, Mapping) or not isinstance(dispatch.get("host_s"), Mapping):
            return None
        fixed = {
            p: (float(f["intercept_s"]), float(f["per_param_tensor_s"]))
            for p, f in (dispatch.get("fixed") or {}).items()
        }
        launch = dispatch.get("launch_s_per_op")
        fresh = dispatch.get("fresh_pages")
        return cls(dict(dispatch["host_s"]), fixed, float(launch) if launch else None,
                   fresh if isinstance(fresh, Mapping) else None)  # fmt: skip

    def op_s(self, phase: str, op_class: str) -> float:
        """Host seconds of one call; the optimizer's ops are in its fixed cost."""
        if phase == "optimizer":
            return 0.0
        by_class = self.per_op.get(phase) or self.per_op.get("forward") or {}
        return float(by_class.get(op_class, by_class.get("elementwise", 0.0)))

    def fixed(self, precision: str, param_tensors: int) -> float | None:
        for name in roof_names(precision):
            if name in self.fixed_s:
                intercept, slope = self.fixed_s[name]
                return intercept + slope * param_tensors
        return None


@dataclass(frozen=True)
class Machine:
    """One env as the model sees it: measured roofs, the host's costs, efficiency fits."""

    device: str  # "cpu" | "cuda" | "mps"
    compute: Mapping[str, float]  # FLOP/s by precision
    memory: float  # bytes/s
    tables: EfficiencyTables
    host: HostCosts | None = None
    source: str = ""

    def compute_roof(self, precision: str) -> float:
        roof = precision_roof(self.compute, precision)
        if roof is None:
            raise InputError(
                f"{self.source or 'op-class tables'}: no measured compute roof for "
                f"precision {precision!r} (roofs for {', '.join(sorted(self.compute)) or 'none'})"
            )
        return check_positive(f"compute roof of {precision}", roof)


@dataclass(frozen=True)
class OpTime:
    """One inventory entry as predicted (seconds for all its ``count`` calls)."""

    name: str
    op_class: str
    phase: str
    key: str
    used_key: str
    count: int
    ideal_s: float
    efficiency: float
    seconds: float  # device seconds: max(roofline_s, floor_s)
    bound: str  # "compute" | "memory" | "host" (at the launch floor)
    roofline_s: float  # ideal_s / efficiency x count
    floor_s: float  # launch cost x count (GPU), else 0
    host_s: float  # the host's issue seconds x count
    fresh_s: float = 0.0  # CPU: its outputs' pages new from the OS x count (in seconds)


@dataclass(frozen=True)
class Prediction:
    step_s: float
    images_per_s: float
    bound: str
    device_s: float  # the ops' device times summed
    host_s: float | None  # the host's: per-op dispatch and the fixed costs
    fixed_s: float | None  # of host_s: the step's fixed costs
    busy_share: float  # device_s / step_s (GPU); the compute's share of the step (CPU)
    calls: int
    time_by_bound: dict[str, float]  # compute / memory / host, summing to step_s
    time_by_class: dict[str, float]  # device seconds per op class
    top_classes: list[tuple[str, float]]  # (class, share of device time), largest first
    interval: tuple[float, float] | None  # (low, high) step_s at INTERVAL_LEVEL
    notes: list[str]
    ops: list[OpTime]

    @property
    def class_shares(self) -> dict[str, float]:
        """Each class's share of the device time (sums to 1)."""
        total = sum(self.time_by_class.values())
        return {c: t / total for c, t in self.time_by_class.items()} if total > 0 else {}


def _count(op: Mapping, key: str, where: str) -> int:
    value = op.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{where}: {key} {value!r} is not a count >= 0")
    return value


def inventory_ops(inventory: Mapping, where: str = "op inventory") -> list[Mapping]:
    """The validated ``ops`` of an ok inventory; InputError naming ``where`` otherwise."""
    if not isinstance(inventory, Mapping):
        raise InputError(f"{where}: expected a JSON object")
    if inventory.get("status", "ok") != "ok":
        raise InputError(f"{where}: status {inventory.get('status')!r}: {inventory.get('message')}")
    ops = inventory.get("ops")
    if not isinstance(ops, list) or not ops:
        raise InputError(f"{where}: 'ops' must be a non-empty list")
    for i, op in enumerate(ops):
        at = f"{where}: ops[{i}]"
        if not isinstance(op, Mapping) or op.get("class") not in OP_CLASSES:
            raise InputError(f"{at}: class must be one of {', '.join(OP_CLASSES)}")
        for key in ("flops", "bytes_read", "bytes_written"):
            _count(op, key, at)
        if _count(op, "count", at) < 1:
            raise InputError(f"{at}: count must be >= 1")
        fresh_pages.fresh_bytes(op, at)
    return ops


def _batch(inventory: Mapping, where: str) -> int:
    batch = inventory.get("batch_size")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(f"{where}: batch_size {batch!r} is not a positive integer")
    return batch


def op_ideal_s(op: Mapping, roof_c: float, roof_m: float) -> tuple[float, str]:
    """(seconds of one call at the roofline, "compute" | "memory"): the longer term."""
    t_c = op["flops"] / roof_c
    t_m = (op["bytes_read"] + op["bytes_written"]) / roof_m
    return max(t_c, t_m), "compute" if t_c >= t_m else "memory"


def _efficiencies(
    ops: Sequence[Mapping], ideal: list[float], machine: Machine, precision: str, notes: list
):
    """(efficiency, table used) per op, one fit call per table."""
    out: list[tuple[float, str]] = [(1.0, table_key(op)) for op in ops]
    by_ideal = 0
    by_key: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        if ideal[i] > 0:
            by_key.setdefault(table_key(op), []).append(i)
    for key, idx in by_key.items():
        items = [
            {"shape": ops[i].get("shape") or {}, "phase": ops[i].get("phase", "forward"),
             "ideal_s": ideal[i], "flops": ops[i]["flops"],
             "bytes": ops[i]["bytes_read"] + ops[i]["bytes_written"]}
            for i in idx
        ]  # fmt: skip
        effs, used, n = machine.tables.efficiencies(precision, key, items)
        by_ideal += n if used == key else 0
        for i, eff in zip(idx, effs, strict=True):
            if not (math.isfinite(eff) and eff > 0):
                raise InputError(f"efficiency fit {used!r} ({precision}) gave {eff!r}")
            out[i] = (eff, used)
    if by_ideal:
        notes.append(f"{by_ideal} ops without their shape's features: read by ideal time alone")
    return out


def time_ops(
    ops: Sequence[Mapping], machine: Machine, precision: str, notes: list | None = None
) -> list[OpTime]:
    """Each op's predicted device time (ideal_s / its efficiency, times count; on a GPU
    at least its count x the launch cost) and host time."""
    roof_c, roof_m = machine.compute_roof(precision), machine.memory
    launch = machine.host.launch_s if machine.host and machine.device != "cpu" else None
    paging = machine.host.fresh_pages if machine.host and machine.device == "cpu" else None
    ideal_bound = [op_ideal_s(op, roof_c, roof_m) for op in ops]
    effs = _efficiencies(ops, [i for i, _ in ideal_bound], machine, precision, notes or [])
    out = []
    for op, (ideal, op_bound), (eff, used) in zip(ops, ideal_bound, effs, strict=True):
        phase = str(op.get("phase", "forward"))
        roofline_s = ideal / eff * op["count"]
        floor_s = (launch or 0.0) * op["count"]
        host_s = machine.host.op_s(phase, op["class"]) * op["count"] if machine.host else 0.0
        fresh_s = fresh_pages.seconds(op.get("fresh_bytes") or (), paging) * op["count"]
        out.append(
            OpTime(str(op.get("name")), op["class"], phase, table_key(op), used, op["count"],
                   ideal, eff, max(roofline_s + fresh_s, floor_s),
                   "host" if floor_s > roofline_s else op_bound, roofline_s, floor_s, host_s,
                   fresh_s)
        )  # fmt: skip
    return out


def _issues(inventory: Mapping, ops: Sequence[OpTime], fixed_s: float) -> list[Issue]:
    """The step's ops in the order the host issues them (the inventory's ``sequence``;
    an inventory without one: phase by phase), one Issue per call; the fixed costs as host
    work where the optimizer starts, after the sync that precedes it."""
    sequence = inventory.get("sequence")
    if not isinstance(sequence, list) or not sequence:
        sequence = [i for i, o in enumerate(ops) for _ in range(o.count)]
    issues: list[Issue] = []
    pending_sync, fixed_done = False, False
    for entry in sequence:
        if entry == "sync":
            pending_sync = True
            continue
        o = ops[int(entry)]
        if o.phase == "optimizer" and not fixed_done:
            issues.append(Issue(fixed_s, 0.0, pending_sync))
            pending_sync, fixed_done = False, True
        issues.append(Issue(o.host_s / o.count, o.seconds / o.count, pending_sync))
        pending_sync = False
    if not fixed_done:
        issues.append(Issue(fixed_s, 0.0, pending_sync))
    return issues


def _step_s(
    inventory: Mapping, ops: Sequence[OpTime], machine: Machine, fixed_s: float
) -> tuple[float, float]:
    """(step seconds, device busy seconds): the CPU's sum, or the GPU's replay."""
    device_s = sum(o.seconds for o in ops)
    if machine.device == "cpu":
        return device_s + sum(o.host_s for o in ops) + fixed_s, device_s
    replayed = replay(_issues(inventory, ops, fixed_s))
    return replayed.step_s, replayed.device_s


def _time_by_bound(ops: Sequence[OpTime], step_s: float, device_s: float, cpu: bool) -> dict:
    by = {b: sum(o.seconds for o in ops if o.bound == b) for b in BOUNDS}
    # the host's share: its own time on a CPU, the device's wait on a GPU
    by["host"] += (step_s - device_s) if step_s > device_s or cpu else 0.0
    return by


def predict_step(
    inventory: Mapping,
    machine: Machine,
    precision: str,
    where: str = "op inventory",
    *,
    with_interval: bool = True,
) -> Prediction:
    """The predicted training step of one inventory on one machine (:data:`METHOD`);
    ``with_interval=False`` leaves out the interval (its draws are nearly all the cost)."""
    notes: list[str] = []
    ops = time_ops(inventory_ops(inventory, where), machine, precision, notes)
    batch = _batch(inventory, where)
    fallbacks = sorted({f"{o.key}->{o.used_key}" for o in ops if o.used_key != o.key})
    if fallbacks:
        notes.append(f"tables borrowed (no own table): {', '.join(fallbacks)}")
    fixed = _fixed_s(inventory, machine, precision, notes)
    step, device_s = _step_s(inventory, ops, machine, fixed or 0.0)
    if not step > 0:
        raise InputError(f"{where}: predicted step time {step!r} is not positive")
    by_class: dict[str, float] = {}
    for o in ops:
        by_class[o.op_class] = by_class.get(o.op_class, 0.0) + o.seconds
    shares = sorted(((c, t / device_s) for c, t in by_class.items()), key=lambda x: -x[1])
    by_bound = _time_by_bound(ops, step, device_s, machine.device == "cpu")
    host = None if machine.host is None else sum(o.host_s for o in ops) + (fixed or 0.0)
    busy = min(device_s / step, 1.0)
    if machine.device == "cpu":  # one thread: host time is time the step spends
        bound = max(BOUNDS, key=lambda b: by_bound[b])
    else:  # the device waits: the report's rule on a measured kernel-busy share
        kernels = max(("compute", "memory"), key=lambda b: by_bound[b])
        bound = bound_with_busy_share(kernels, busy)
    return Prediction(
        step_s=step,
        images_per_s=batch / step,
        bound=bound,
        device_s=device_s,
        host_s=host,
        fixed_s=fixed,
        busy_share=busy,
        calls=sum(o.count for o in ops),
        time_by_bound=by_bound,
        time_by_class=by_class,
        top_classes=shares[:TOP_CLASSES],
        interval=(
            _interval(inventory, ops, machine, step, precision, fixed or 0.0, notes)
            if with_interval
            else None
        ),
        notes=notes,
        ops=ops,
    )


def _fixed_s(inventory: Mapping, machine: Machine, precision: str, notes: list[str]):
    """The step's fixed host seconds for the inventory's parameter tensors, or None."""
    if machine.host is None:
        notes.append("no host costs measured (no sweep): dispatch and fixed costs left out")
        return None
    tensors = inventory.get("param_tensors")
    if isinstance(tensors, bool) or not isinstance(tensors, int) or tensors < 0:
        notes.append("the inventory does not count its parameter tensors: fixed costs left out")
        return None
    fixed = machine.host.fixed(precision, tensors)
    if fixed is None:
        notes.append(f"no fixed step costs measured for {precision}")
    return fixed


def _interval(
    inventory: Mapping,
    ops: Sequence[OpTime],
    machine: Machine,
    step_s: float,
    precision: str,
    fixed_s: float,
    notes: list[str],
) -> tuple[float, float] | None:
    """(low, high) step seconds: per draw, each table's ops scaled together by one
    residual drawn from the table's (a fit off for one shape is off for its neighbours
    too, and a model's ops of one table are neighbours), the tables drawn apart; the step
    recomputed per draw; the quantiles of :data:`INTERVAL_QUANTILES` of the draws over
    their median, times ``step_s``."""
    keys = sorted({o.key for o in ops})
    residuals = {
        k: [r for r in machine.tables.residuals(precision, k) if math.isfinite(r)] for k in keys
    }
    pooled = [r for rs in residuals.values() for r in rs]
    if len(pooled) < 2:
        notes.append("no interval: the fits have under 2 cross-validated residuals")
        return None
    rng = random.Random(INTERVAL_SEED)
    steps = []
    for _ in range(INTERVAL_DRAWS):
        factor = {
            k: math.exp(rng.choice(rs if len(rs) >= 2 else pooled)) for k, rs in residuals.items()
        }
        scaled = [
            replace(o, seconds=max(o.roofline_s * factor[o.key] + o.fresh_s, o.floor_s))
            for o in ops
        ]
        steps.append(_step_s(inventory, scaled, machine, fixed_s)[0])
    median = quantile(steps, 0.5)
    lo_q, hi_q = INTERVAL_QUANTILES
    return step_s * quantile(steps, lo_q) / median, step_s * quantile(steps, hi_q) / median


def format_top_classes(top: Sequence[tuple[str, float]]) -> str:
    """``"conv 61%; normalization 18%; elementwise 12%"``."""
    return "; ".join(f"{c} {s:.0%}" for c, s in top)


# --------------------------------------------------------------------------- baselines


def roofline_step_s(flops: float, nbytes: float, compute_roof: float, memory_roof: float) -> float:
    """The whole step at the roofline: FLOPs / min(peak, AI x bandwidth), i.e. the longer
    of FLOPs / peak and bytes / bandwidth."""
    flops = check_positive("step FLOPs", flops)
    nbytes = check_positive("step bytes", nbytes)
    return max(
        flops / check_positive("compute roof (FLOP/s)", compute_roof),
        nbytes / check_positive("memory roof (bytes/s)", memory_roof),
    )


def per_op_roofline_step_s(
    inventory: Mapping, compute_roof: float, memory_roof: float, where: str = "op inventory"
) -> float:
    """Each op at the roofline (efficiency 1), summed; no dispatch cost."""
    roof_c = check_positive("compute roof (FLOP/s)", compute_roof)
    roof_m = check_positive("memory roof (bytes/s)", memory_roof)
    return sum(
        op_ideal_s(op, roof_c, roof_m)[0] * op["count"] for op in inventory_ops(inventory, where)
    )


def quantile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile of ``values``, linear between order statistics (numpy's default)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("quantile of no values")
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
