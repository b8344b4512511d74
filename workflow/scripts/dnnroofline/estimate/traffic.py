"""The per-op DRAM traffic model: the upper traffic estimate behind the AI range.

Without counters the arithmetic intensity is analytic. The complexity stage's
``min_dram_bytes_per_step`` is a true lower bound on a step's traffic, so FLOPs / min
bytes is an *upper* bound on the AI (``ai_high``). This module gives the other end: the
traffic of the step's ops, each moving its own operands, hence a lower AI (``ai_low``).
It is the one range of a point: ``roofline_points.csv`` and the report's ncu page both
take it from :func:`point_ai_range`.

Model (one op is one aten operator that moves data; views are free):

* forward: each op reads its inputs and weights and writes its outputs;
* backward: each op that takes part in autograd reads its saved input and its output
  gradient, writes its input gradient (not for the image batch), and for each weight
  reads the weight and writes the weight gradient;
* a convolution or matrix product computes each gradient (input, weight, bias) in its
  own kernel, and each of those reads the output gradient: read once per gradient;
* max-pool backward first writes a zero-filled input gradient, then scatters into it;
* no cache credit: every access is counted. On the H100 the step (ncu's step pass,
  ``--cache-control none``) moved 2-5% *more* DRAM bytes than a replay that flushed L2
  before every kernel, and this model came within 20% of the step's bytes for amp and
  bf16 (``tests/test_traffic_h100.py``). No CPU measurement shows reuse either, so the
  credit is dropped there too (``perf`` counters, where they exist, give the point a
  measured AI instead);
* plus the optimizer (SGD with momentum: read p, g, m, write p, m: 20 bytes per
  fp32 parameter), and under amp/bf16 the 2-byte weight copy (read 4P, write 2P)
  and, for amp, GradScaler's unscale (8P): the same terms as the lower bound.

Under amp/bf16, floating-point activations and their gradients are 2 bytes, weights
are read as their 2-byte copy, weight gradients stay fp32.

Not modelled, as the backend chooses it at run time: layout transforms (cuDNN runs
some fp32 convolutions of a channels-last model with NCHW kernels behind
NHWC<->NCHW copies) and the buffers of FFT and Winograd convolutions. The report's ncu
page shows how many bytes those kernels moved in each capture.

The table is built by :func:`traffic_table` from the forward op records of the op
recorder's fp32 step (:mod:`dnnroofline.estimate.op_recorder`, ``traffic=True``; torch is
needed there, not here): rows of ``[bytes, kind, forward_accesses, backward_accesses,
count]`` at the step's batch size in fp32, ``kind`` one of :data:`KINDS`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from dnnroofline.errors import InputError
from dnnroofline.study.precisions import HALF_PRECISIONS, require_known

#: param: a weight (its gradient rows are ``param_grad``); act: a float activation;
#: act_grad: an activation's gradient; input: the fp32 image batch; other: integer or
#: bool tensors (max-pool indices, masks), buffers (batch-norm running stats) and
#: frozen weights (read, but no gradient written).
KINDS = ("param", "param_grad", "act", "act_grad", "input", "other")
PHASES = ("forward", "backward")
#: Ops whose backward runs one GEMM-like kernel per gradient (dgrad, wgrad, bias).
GRADIENT_PER_KERNEL_OPS = re.compile(
    r"aten\.(convolution|_convolution|conv\w*|mm|addmm|bmm|baddbmm|linear|matmul)\."
)
#: Ops whose backward zero-fills the input gradient before scattering into it.
ZERO_FILLED_GRAD_OPS = re.compile(r"aten\.(adaptive_)?max_pool\w*\.")

METHOD = (
    "per-op traffic model (upper estimate): forward, each op reads its inputs and "
    "weights and writes its outputs; backward, each op reads its saved input and output "
    "gradient, writes its input gradient, and per weight reads the weight and writes its "
    "gradient; convolutions and matrix products read the output gradient once per "
    "gradient they compute (input, weight, bias: one kernel each); max-pool backward "
    "writes a zero-filled input gradient before scattering into it; every access counted "
    "(no cache credit: on the H100 the step moved 2-5% more DRAM bytes than an "
    "L2-flushed replay); plus optimizer traffic (20 bytes per parameter) and, under "
    "amp/bf16, the 2-byte weight copy (6 bytes per parameter; amp +8 for the GradScaler); "
    "amp/bf16 activations and their gradients at 2 bytes. Not modelled: layout transforms "
    "and FFT/Winograd buffers, which the backend chooses at run time"
)


def _scale_bytes(count: int, batch_size: int, probe: int) -> int:
    return (count * batch_size + probe // 2) // probe


def traffic_table(records: Sequence[Mapping], batch_size: int, probe: int) -> list[list]:
    """The model's table from the op recorder's forward records
    (``RecordedStep.traffic``: each op's input and output storages, their bytes, kind
    and whether they are fixed).

    Accesses per tensor: forward, one per op that reads or writes it; backward, per op
    with a weight or activation input: saved activation inputs read, activation-input
    gradients written, output gradients read (by a convolution or matrix product once
    per gradient it computes), weights read and weight gradients written; a max-pool's
    input gradient written once more (the zero fill). Bytes are scaled from ``probe``
    images to ``batch_size`` (weights, buffers and 0/1-dim tensors excepted; those are
    recorded at their own size).
    """
    size: dict[tuple[str, int], tuple[int, str, bool]] = {}
    fwd: Counter[tuple[str, int]] = Counter()
    bwd: Counter[tuple[str, int]] = Counter()
    for rec in records:
        for ptr, nbytes, kind, fixed in list(rec["inputs"]) + list(rec["outputs"]):
            size.setdefault(("t", ptr), (nbytes, kind, fixed))
            fwd[("t", ptr)] += 1
        ins = rec["inputs"]
        if not any(kind in ("param", "act") for _, _, kind, _ in ins):
            continue  # buffer updates, integer bookkeeping, ops on the image alone
        gradients = sum(kind in ("param", "act") for _, _, kind, _ in ins)
        grad_out_reads = gradients if GRADIENT_PER_KERNEL_OPS.match(rec["op"]) else 1
        fill = 1 if ZERO_FILLED_GRAD_OPS.match(rec["op"]) else 0
        for ptr, nbytes, kind, fixed in ins:
            if kind in ("act", "input", "other"):
                bwd[("t", ptr)] += 1  # the saved input
            if kind == "act":
                size.setdefault(("g", ptr), (nbytes, "act_grad", fixed))
                bwd[("g", ptr)] += 1 + fill  # input gradient written (zero-filled first)
            if kind == "param":
                bwd[("t", ptr)] += 1  # weight read (input gradient needs it)
                size.setdefault(("w", ptr), (nbytes, "param_grad", True))
                bwd[("w", ptr)] += 1  # weight gradient written
        for ptr, nbytes, kind, fixed in rec["outputs"]:
            if kind == "act":
                size.setdefault(("g", ptr), (nbytes, "act_grad", fixed))
                bwd[("g", ptr)] += grad_out_reads  # output gradient read
    rows: Counter[tuple[int, str, int, int]] = Counter()
    for key, (nbytes, kind, fixed) in size.items():
        b = nbytes if fixed else _scale_bytes(nbytes, batch_size, probe)
        rows[(b, kind, fwd[key], bwd[key])] += 1
    return [[b, kind, f, g, n] for (b, kind, f, g), n in sorted(rows.items())]


def _scale(kind: str, precision: str) -> tuple[int, int]:
    """(numerator, denominator) of the byte factor of ``kind`` at ``precision``."""
    if precision in HALF_PRECISIONS and kind in ("param", "act", "act_grad"):
        return 1, 2  # 2-byte autocast copy of weights; 2-byte activations and grads
    return 1, 1


def check_table(table: object, where: str = "traffic table") -> list[list]:
    """Validate a traffic table (list of ``[bytes, kind, fwd, bwd, count]`` rows)."""
    if not isinstance(table, list):
        raise InputError(f"{where}: expected a list of rows, got {type(table).__name__}")
    for i, row in enumerate(table):
        ok = (
            isinstance(row, (list, tuple))
            and len(row) == 5
            and all(isinstance(v, int) and not isinstance(v, bool) for v in (row[0], *row[2:]))
            and row[1] in KINDS
            and min(row[0], row[2], row[3]) >= 0
            and row[4] >= 1
        )
        if not ok:
            raise InputError(
                f"{where}: row {i} {row!r} is not [bytes, kind, forward_accesses, "
                f"backward_accesses, count] with kind in {KINDS} and counts >= 0"
            )
    return table  # type: ignore[return-value]


def layer_bytes(
    table: Sequence[Sequence], *, precision: str = "fp32", phases: Iterable[str] = PHASES
) -> int:
    """Bytes the forward and/or backward ops move under the model (every access)."""
    require_known(precision)
    phases = tuple(phases)
    bad = [p for p in phases if p not in PHASES]
    if bad:
        raise InputError(f"phases {bad}: choose from {PHASES}")
    total = 0
    for nbytes, kind, fwd, bwd, count in table:
        num, den = _scale(kind, precision)
        accesses = fwd * ("forward" in phases) + bwd * ("backward" in phases)
        total += count * (nbytes * num // den) * accesses
    return int(total)


def step_extra_bytes(params: int, precision: str = "fp32", trainable: int | None = None) -> int:
    """Optimizer (20T), 2-byte weight copy (6P, amp/bf16) and GradScaler unscale (8T,
    amp): ``P`` every parameter, ``T`` those that train (default P)."""
    t = params if trainable is None else trainable
    extra = 20 * t
    if precision in HALF_PRECISIONS:
        extra += 6 * params
    if precision == "amp":
        extra += 8 * t
    return extra


def step_traffic_bytes(
    traffic: Mapping, params: int, *, precision: str = "fp32", trainable: int | None = None
) -> int:
    """The model's bytes of one training step from a complexity ``traffic`` block."""
    table = check_table(traffic.get("table"), "complexity traffic.table")
    return layer_bytes(table, precision=precision) + step_extra_bytes(params, precision, trainable)


def complexity_traffic_bytes(
    complexity: Mapping, precision: str, where: str = "complexity JSON"
) -> int | None:
    """The model's bytes of one step at ``precision`` from a complexity JSON; None for
    one without a traffic table (written before the model) or without counts."""
    block = complexity.get("traffic")
    if complexity.get("status", "ok") != "ok" or not isinstance(block, Mapping):
        return None
    params, trainable = complexity.get("params"), complexity.get("trainable_params")
    if isinstance(params, bool) or not isinstance(params, int) or params < 0:
        raise InputError(f"{where}: params {params!r} is not a count")
    try:
        return step_traffic_bytes(
            block,
            params,
            precision=precision,
            trainable=None if trainable is None else int(trainable),  # absent in old JSONs
        )
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def point_ai_range(
    complexity: Mapping | None,
    precision: str,
    *,
    flop: float,
    min_bytes: float,
    where: str = "complexity JSON",
) -> tuple[float, float]:
    """``(ai_low, ai_high)`` of a point: ``flop`` over the model's bytes and over
    ``min_bytes``; (NaN, NaN) where the complexity JSON has no traffic table."""
    if not isinstance(complexity, Mapping):
        return math.nan, math.nan
    model = complexity_traffic_bytes(complexity, precision, where)
    if model is None:
        return math.nan, math.nan
    lo, hi, _ = ai_range(flop, min_bytes, model)
    return lo, hi


def ai_range(flop: float, min_bytes: float, high_bytes: float) -> tuple[float, float, bool]:
    """``(ai_low, ai_high, clamped)``: flop / upper traffic, flop / minimum traffic.

    The model's estimate is never below the true lower bound; if it is (a model gap),
    it is raised to the bound and ``clamped`` is True.
    """
    clamped = high_bytes < min_bytes
    high = max(high_bytes, min_bytes)
    return flop / high, flop / min_bytes, clamped


def bound_of_range(ai_low: float, ai_high: float, ridge: float) -> str:
    """``memory`` when the whole range is left of the ridge, ``compute`` when it is at
    or right of it, ``inconclusive`` when it straddles the ridge."""
    if ai_high < ridge:
        return "memory"
    if ai_low >= ridge:
        return "compute"
    return "inconclusive"


def position(ai: float, ai_low: float, ai_high: float) -> str:
    """Where a measured AI falls against an analytic range: below, inside or above."""
    if ai < ai_low:
        return "below"
    if ai > ai_high:
        return "above"
    return "inside"
