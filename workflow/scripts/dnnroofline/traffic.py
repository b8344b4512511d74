"""A per-layer DRAM traffic model: the upper traffic estimate behind the AI range.

On a CPU (or a GPU without ncu counters) the arithmetic intensity is analytic.
The complexity stage's ``min_dram_bytes_per_step`` is a true lower bound on a
step's traffic, so FLOPs / min bytes is an *upper* bound on the AI (``ai_high``).
This module gives the other end: an upper traffic estimate from a per-layer model,
hence a lower AI (``ai_low``).

Model (one "layer" is one aten operator that moves data; views are free):

* forward: each op reads its inputs and weights and writes its outputs;
* backward: each op that takes part in autograd reads its saved input and its
  output gradient, writes its input gradient (not for the image batch), and for each
  weight reads the weight and writes the weight gradient;
* a tensor that fits in the last-level cache (LLC) is counted once per phase
  (forward, backward), however many ops touch it; a larger one at each access;
* plus the optimizer (SGD with momentum: read p, g, m, write p, m: 20 bytes per
  fp32 parameter), and under amp/bf16 the 2-byte weight copy (read 4P, write 2P)
  and, for amp, GradScaler's unscale (8P): the same terms as the lower bound.

Under amp/bf16, floating-point activations and their gradients are 2 bytes, weights
are read as their 2-byte copy, weight gradients stay fp32. Without a known LLC size
every access is counted (the largest estimate), and the method says so.

The table is built by :mod:`dnnroofline.complexity` (it needs torch); this module is
pure: rows of ``[bytes, kind, forward_accesses, backward_accesses, count]`` at the
step's batch size in fp32, ``kind`` one of :data:`KINDS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from dnnroofline.errors import InputError

#: param: a weight (its gradient rows are ``param_grad``); act: a float activation;
#: act_grad: an activation's gradient; input: the fp32 image batch; other: integer or
#: bool tensors (max-pool indices, masks), buffers (batch-norm running stats) and
#: frozen weights (read, but no gradient written).
KINDS = ("param", "param_grad", "act", "act_grad", "input", "other")
HALF_PRECISIONS = ("amp", "bf16")
PRECISIONS = ("fp32", "tf32", "amp", "bf16")
PHASES = ("forward", "backward")

METHOD = (
    "per-layer traffic model (upper estimate): forward, each op reads its inputs and "
    "weights and writes its outputs; backward, each op reads its saved input and output "
    "gradient, writes its input gradient, and per weight reads the weight and writes its "
    "gradient; a tensor that fits in the last-level cache is counted once per phase, a "
    "larger one at every access; plus optimizer traffic (20 bytes per parameter) and, "
    "under amp/bf16, the 2-byte weight copy (6 bytes per parameter; amp +8 for the "
    "GradScaler); amp/bf16 activations and their gradients at 2 bytes"
)


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
    table: Sequence[Sequence],
    *,
    llc_bytes: int | None,
    precision: str = "fp32",
    phases: Iterable[str] = PHASES,
) -> int:
    """Bytes the forward and/or backward layers move under the per-layer model."""
    if precision not in PRECISIONS:
        raise InputError(f"precision {precision!r}: choose from {', '.join(PRECISIONS)}")
    phases = tuple(phases)
    bad = [p for p in phases if p not in PHASES]
    if bad:
        raise InputError(f"phases {bad}: choose from {PHASES}")
    total = 0
    for nbytes, kind, fwd, bwd, count in table:
        num, den = _scale(kind, precision)
        b = nbytes * num // den
        for phase, accesses in (("forward", fwd), ("backward", bwd)):
            if phase not in phases or accesses == 0:
                continue
            cached = llc_bytes is not None and b <= llc_bytes
            total += count * b * (1 if cached else accesses)
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
    traffic: Mapping,
    params: int,
    *,
    llc_bytes: int | None,
    precision: str = "fp32",
    trainable: int | None = None,
) -> int:
    """Upper traffic estimate of one training step from a complexity ``traffic`` block."""
    table = check_table(traffic.get("table"), "complexity traffic.table")
    return layer_bytes(table, llc_bytes=llc_bytes, precision=precision) + step_extra_bytes(
        params, precision, trainable
    )


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


def llc_note(llc_bytes: int | None, source: str) -> str:
    """What the model assumed about the cache, for the method text."""
    if llc_bytes:
        return f"last-level cache {llc_bytes / 2**20:g} MiB ({source})"
    return "last-level cache size unknown: every access counted (the largest estimate)"


def position(ai: float, ai_low: float, ai_high: float) -> str:
    """Where a measured AI falls against an analytic range: below, inside or above."""
    if ai < ai_low:
        return "below"
    if ai > ai_high:
        return "above"
    return "inside"


def forward_ai_range(complexity: Mapping, *, llc_bytes: int | None) -> tuple[float, float]:
    """``(ai_low, ai_high)`` of the *forward pass alone* (fp32), for forward-only captures.

    Minimum forward traffic: weights read once (4P), the image batch read once (I) and
    the activations saved for backward written once (A); upper estimate: the per-layer
    model's forward phase with a last-level cache of ``llc_bytes``.
    """
    flop = float(complexity["flops"]["forward"])
    b = complexity["bytes"]
    low_bytes = float(b["params"] + b["input"] + b["activations"])
    table = check_table((complexity.get("traffic") or {}).get("table"), "complexity traffic.table")
    high_bytes = float(layer_bytes(table, llc_bytes=llc_bytes, phases=("forward",)))
    lo, hi, _ = ai_range(flop, low_bytes, high_bytes)
    return lo, hi
