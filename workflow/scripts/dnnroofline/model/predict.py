"""The roofline model of a training step: predict it from microbenchmarks, then check it.

Pure arithmetic, no I/O. Inputs: an op inventory (:mod:`dnnroofline.model.op_inventory`,
every aten op of one step with its class, FLOPs, bytes and count), an env's
:class:`Machine` (its measured roofs, dispatch costs and efficiency tables, from
``results/{env}/efficiency.json``) and a precision. No measured run of the point is an
input: :func:`predict_step` takes none.

See :data:`METHOD` for the model; :func:`roofline_step_s` and
:func:`per_op_roofline_step_s` are the baselines it is checked beside;
:mod:`dnnroofline.model.scoring` scores every method against the measured points.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from dnnroofline.errors import InputError
from dnnroofline.model.op_classes import OP_CLASSES, table_key
from dnnroofline.model.roofline import check_positive
from dnnroofline.study.precisions import roof_names

#: Nominal level of the prediction interval: the 10th to the 90th percentile.
INTERVAL_LEVEL = 0.8
INTERVAL_QUANTILES = (0.1, 0.9)
BOUNDS = ("compute", "memory", "host")
#: How many classes ``top_classes`` names.
TOP_CLASSES = 3

METHOD = (
    "Per op of the step's inventory (every aten op of forward, backward and optimizer, "
    "from real dispatch): ideal_s = max(FLOPs / measured compute roof of the precision, "
    "bytes read and written / measured memory roof), the time at the roofline; the op's "
    "table (its class, convolutions by kind and direction) gives its attained share of "
    "that, the efficiency, interpolated at its ideal_s; op time = ideal_s / efficiency, "
    "times its count. The op is compute-bound where its FLOP term is the larger. On a "
    "GPU no call takes less than the measured launch cost per op (a floor, not an added "
    "term: the tables time back-to-back calls with CUDA events, so their times hold "
    "the gaps between kernels already; adding the launch cost again would count it "
    "twice); an op at that floor is launch-bound. Step: on a CPU the sum of op times "
    "plus calls x host time per op (one thread runs both); on a GPU, where the host runs "
    "ahead of the device, the longer of device time (sum of op times) and host time "
    "(calls x host time per op, where measured). Bound: the largest share of predicted "
    "time among compute-bound ops, memory-bound ops and host/dispatch (launch-bound ops; "
    "a host-bound GPU step is all host). Interval (nominal 80%): the leave-one-out log "
    "residuals of each table (log of the efficiency its neighbours interpolate for a "
    "row over the one the row measured, i.e. log of measured over predicted time) give "
    "its 10th and 90th percentiles q10, q90; each table's op times are scaled by exp(q10) "
    "and exp(q90), every op of a table together (their errors are one table's, so they "
    "add), floors and host time kept; a table with under 2 residuals borrows the pooled "
    "residuals of the point's tables. Images/s = batch / step time."
)


class EfficiencyTables(Protocol):
    """What the model needs of an env's tables
    (:class:`dnnroofline.model.efficiency_tables.Tables`)."""

    def efficiency(self, precision: str, key: str, ideal_s: float) -> tuple[float, str]: ...


@dataclass(frozen=True)
class Machine:
    """One env as the model sees it: measured roofs, dispatch costs, efficiency tables.

    ``residuals(precision, key)``: the table's leave-one-out log residuals,
    ``log(interpolated / measured efficiency)`` = ``log(measured / predicted time)``
    (:func:`dnnroofline.model.efficiency_tables.loo_log_residuals`), empty where none.
    """

    device: str  # "cpu" | "cuda" | "mps"
    compute: Mapping[str, float]  # FLOP/s by precision
    memory: float  # bytes/s
    host_s_per_op: float | None
    launch_s_per_op: float | None
    tables: EfficiencyTables
    residuals: Callable[[str, str], Sequence[float]] = field(default=lambda p, k: ())
    source: str = ""

    def compute_roof(self, precision: str) -> float:
        roof = next((self.compute[n] for n in roof_names(precision) if n in self.compute), None)
        if roof is None:
            raise InputError(
                f"{self.source or 'efficiency tables'}: no measured compute roof for "
                f"precision {precision!r} (roofs for {', '.join(sorted(self.compute)) or 'none'})"
            )
        return check_positive(f"compute roof of {precision}", roof)


@dataclass(frozen=True)
class OpTime:
    """One inventory entry as predicted (``seconds`` for all its ``count`` calls)."""

    name: str
    op_class: str
    key: str
    used_key: str
    count: int
    ideal_s: float
    efficiency: float
    seconds: float  # max(roofline_s, floor_s)
    bound: str  # "compute" | "memory" | "host" (launch-bound: at the floor)
    roofline_s: float  # ideal_s / efficiency x count
    floor_s: float  # launch cost x count (GPU), else 0


@dataclass(frozen=True)
class Prediction:
    step_s: float
    images_per_s: float
    bound: str
    device_s: float  # op times summed (no dispatch)
    host_s: float | None  # calls x host time per op
    launch_s: float | None  # time of the ops at the launch floor (GPU)
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


def time_ops(ops: Iterable[Mapping], machine: Machine, precision: str) -> list[OpTime]:
    """Each op's predicted device time: ideal_s / its table's efficiency, times count;
    on a GPU at least its count x the launch cost (where measured)."""
    roof_c, roof_m = machine.compute_roof(precision), machine.memory
    launch = machine.launch_s_per_op if machine.device != "cpu" else None
    out = []
    for op in ops:
        ideal, op_bound = op_ideal_s(op, roof_c, roof_m)
        key = table_key(op)
        eff, used = (1.0, key) if ideal == 0 else machine.tables.efficiency(precision, key, ideal)
        if not (math.isfinite(eff) and eff > 0):
            raise InputError(f"efficiency table {used!r} ({precision}) gave {eff!r} at {ideal:g} s")
        roofline_s = ideal / eff * op["count"]
        floor_s = (launch or 0.0) * op["count"]
        if floor_s > roofline_s:
            op_bound = "host"
        out.append(
            OpTime(
                str(op.get("name")),
                op["class"],
                key,
                used,
                op["count"],
                ideal,
                eff,
                max(roofline_s, floor_s),
                op_bound,
                roofline_s,
                floor_s,
            )
        )
    return out


def _step(ops: Sequence[OpTime], machine: Machine, calls: int, notes: list[str]):
    """(step_s, host_s, time_by_bound) from the ops' device times and the dispatch cost."""
    host = None if machine.host_s_per_op is None else calls * machine.host_s_per_op
    by_bound = {b: sum(o.seconds for o in ops if o.bound == b) for b in BOUNDS}
    device_s = sum(by_bound.values())
    if machine.device == "cpu":
        if host is None:
            notes.append("no host time per op measured: dispatch left out of the CPU step")
        by_bound["host"] += host or 0.0
        return device_s + (host or 0.0), host, by_bound
    if machine.launch_s_per_op is None:
        notes.append("no launch cost per op measured: no floor under a GPU op's time")
    if host is None:
        notes.append("no host time per op measured: the step cannot be host-bound here")
    elif host > device_s:  # the device waits on the host: the whole step is host time
        return host, host, {"compute": 0.0, "memory": 0.0, "host": host}
    return device_s, host, by_bound


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values``, linear between order statistics (numpy's default)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("quantile of no values")
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _interval(
    ops: Sequence[OpTime], machine: Machine, precision: str, notes: list[str]
) -> dict[str, tuple[float, float]] | None:
    """{used table: (time factor low, high)} from its residuals; None where no table has any."""
    pooled: list[float] = []
    own: dict[str, list[float]] = {}
    for key in dict.fromkeys(o.used_key for o in ops):
        own[key] = [float(r) for r in machine.residuals(precision, key) if math.isfinite(r)]
        pooled += own[key]
    if len(pooled) < 2:
        notes.append("no interval: the tables have under 2 leave-one-out residuals")
        return None
    lo_q, hi_q = INTERVAL_QUANTILES
    factors = {}
    borrowed = []
    for key, res in own.items():
        if len(res) < 2:
            res = pooled
            borrowed.append(key)
        # residual r = log(measured / predicted time): the time scales by exp(r)
        factors[key] = (math.exp(quantile(res, lo_q)), math.exp(quantile(res, hi_q)))
    if borrowed:
        notes.append(f"interval of {', '.join(borrowed)} from the pooled residuals")
    return factors


def predict_step(
    inventory: Mapping, machine: Machine, precision: str, where: str = "op inventory"
) -> Prediction:
    """The predicted training step of one inventory on one machine (:data:`METHOD`)."""
    ops = time_ops(inventory_ops(inventory, where), machine, precision)
    batch = _batch(inventory, where)
    notes: list[str] = []
    fallbacks = sorted({f"{o.key}->{o.used_key}" for o in ops if o.used_key != o.key})
    if fallbacks:
        notes.append(f"tables borrowed (no own table): {', '.join(fallbacks)}")
    calls = sum(o.count for o in ops)
    device_s = sum(o.seconds for o in ops)
    step, host, by_bound = _step(ops, machine, calls, notes)
    if not step > 0:
        raise InputError(f"{where}: predicted step time {step!r} is not positive")
    by_class: dict[str, float] = {}
    for o in ops:
        by_class[o.op_class] = by_class.get(o.op_class, 0.0) + o.seconds
    shares = sorted(((c, t / device_s) for c, t in by_class.items()), key=lambda x: -x[1])
    interval = None
    factors = _interval(ops, machine, precision, notes)
    if factors is not None:
        low, high = (
            [
                replace(o, seconds=max(o.roofline_s * factors[o.used_key][end], o.floor_s))
                for o in ops
            ]
            for end in (0, 1)
        )
        interval = (_step(low, machine, calls, [])[0], _step(high, machine, calls, [])[0])
    return Prediction(
        step_s=step,
        images_per_s=batch / step,
        bound=max(BOUNDS, key=lambda b: by_bound[b]),
        device_s=device_s,
        host_s=host,
        launch_s=sum(o.seconds for o in ops if o.bound == "host")
        if machine.device != "cpu"
        else None,
        calls=calls,
        time_by_bound=by_bound,
        time_by_class=by_class,
        top_classes=shares[:TOP_CLASSES],
        interval=interval,
        notes=notes,
        ops=ops,
    )


def format_top_classes(top: Sequence[tuple[str, float]]) -> str:
    """``"conv 61%; normalization 18%; elementwise 12%"``."""
    return "; ".join(f"{c} {s:.0%}" for c, s in top)


# --------------------------------------------------------------------------- baselines


def roofline_step_s(flops: float, nbytes: float, peak_flops: float, peak_bw: float) -> float:
    """The whole step at the roofline: FLOPs / min(peak, AI x bandwidth), i.e. the longer
    of FLOPs / peak and bytes / bandwidth."""
    flops = check_positive("step FLOPs", flops)
    nbytes = check_positive("step bytes", nbytes)
    return max(
        flops / check_positive("peak FLOP/s", peak_flops),
        nbytes / check_positive("peak bandwidth", peak_bw),
    )


def per_op_roofline_step_s(
    inventory: Mapping, peak_flops: float, peak_bw: float, where: str = "op inventory"
) -> float:
    """Each op at the roofline (efficiency 1), summed; no dispatch cost."""
    roof_c = check_positive("peak FLOP/s", peak_flops)
    roof_m = check_positive("peak bandwidth", peak_bw)
    return sum(
        op_ideal_s(op, roof_c, roof_m)[0] * op["count"] for op in inventory_ops(inventory, where)
    )
