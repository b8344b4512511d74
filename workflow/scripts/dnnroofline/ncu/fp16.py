"""Half-precision instructions that are not arithmetic, found and taken out of the FLOPs.

ncu's ``smsp__sass_thread_inst_executed_op_h{fma,add}_pred_on`` count every HFMA2 and
HADD2 SASS instruction, whatever it does. Two compiler idioms do no arithmetic:

* ``HFMA2.MMA Rd, -RZ, RZ, imm, imm`` is -0 x 0 + a constant: a register move that the
  compiler issues to the tensor pipe to spare the ALUs. ncu counts it as an HFMA and as
  a tensor-pipe instruction (``smsp__inst_executed_pipe_tensor``; on Hopper also
  ``sm__inst_executed_pipe_tensor_op_hmma``) that does no tensor op.
* ``HADD2.F32 Rd, -RZ, Rs.H0_H0`` is -0 + a half, written as fp32: how code for sm_80
  and newer widens a half to float before computing in fp32 (PyTorch's opmath, cuDNN's
  float compute type).

Two rules take them out of ``flop.fp16``, per kernel:

``hfma2_mma_moves`` (proven by the counters). A kernel whose tensor-op counters
(``sm__ops_path_tensor_*``) were collected and all read 0 did no matrix math, so every
tensor-pipe warp instruction it executed is an HFMA2.MMA; up to 32 HFMA thread
instructions per such warp instruction are moves. In the five committed H100 captures
every kernel without tensor ops has at most that many HFMAs, and the fp32 (TF32 off)
and bf16 captures have no other HFMA, HADD or HMUL: their fp16 FLOPs become 0.

``hadd2_f32_conversions`` (a rule: no collected counter tells HADD2.F32 from HADD2). A
kernel that does no other half-precision or tensor math (no HMUL, every HFMA a move by
the rule above, tensor-op counters all 0) multiplies nothing in half precision; its
HADDs are taken as widenings (the max-pool, ReLU, copy and batch-norm kernels of the
amp captures). A kernel that only adds halves with HADD2 would lose real FLOPs here:
the record of each correction gives its size. The counter that would prove it is the
per-opcode-with-modifier instruction count (``sass__inst_executed_per_opcode_with
_modifier_all``, instanced, needs ``--print-metric-instances details``).

Neither rule applies where a counter it needs is missing or n/a (e.g. a capture without
tensor-op counters): there the counts are left as ncu gave them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from dnnroofline.ncu.metrics import (
    CUDA_CORE_FLOP_METRICS,
    TENSOR_OPS_RE,
    tensor_pipe_instructions,
)

HADD_METRIC, HMUL_METRIC, HFMA_METRIC = (name for name, _ in CUDA_CORE_FLOP_METRICS["fp16"])
#: FLOPs that ``flop.fp16`` gives one thread instruction (packed two-wide: HADD2 2, HFMA2 4).
FLOPS_PER_INSTRUCTION = dict(CUDA_CORE_FLOP_METRICS["fp16"])
WARP_SIZE = 32

MOVES = "hfma2_mma_moves"
CONVERSIONS = "hadd2_f32_conversions"
RULES: dict[str, dict[str, str]] = {
    MOVES: {
        "counter": HFMA_METRIC,
        "evidence": "counters",
        "why": (
            "HFMA2.MMA register moves: in a kernel whose tensor-op counters read 0, each "
            "tensor-pipe warp instruction is an HFMA2.MMA, so up to 32 HFMA thread "
            "instructions per tensor-pipe instruction (4 FLOPs each) are moves"
        ),
    },
    CONVERSIONS: {
        "counter": HADD_METRIC,
        "evidence": "rule",
        "why": (
            "HADD2.F32 half-to-float conversions: a kernel with no HMUL, no HFMA but "
            "moves and no tensor ops does no half-precision math, so its HADDs (2 FLOPs "
            "each) are taken as widenings; no collected counter proves it"
        ),
    },
}


@dataclass(frozen=True)
class Removed:
    """Thread instructions one rule took out of one kernel's fp16 count."""

    rule: str
    instructions: Decimal

    @property
    def flop(self) -> Decimal:
        return self.instructions * FLOPS_PER_INSTRUCTION[RULES[self.rule]["counter"]]


def _no_tensor_math(values: Mapping[str, Decimal | None]) -> bool:
    """Tensor-op counters collected for this kernel, and every one of them 0."""
    ops = [x for name, x in values.items() if TENSOR_OPS_RE.match(name)]
    return bool(ops) and all(x is not None and x == 0 for x in ops)


def non_arithmetic_half(values: Mapping[str, Decimal | None]) -> list[Removed]:
    """The HFMA moves and HADD conversions of one kernel (its raw counter values)."""
    hfma, hadd, hmul = (values.get(m) for m in (HFMA_METRIC, HADD_METRIC, HMUL_METRIC))
    if not _no_tensor_math(values):
        return []
    removed = []
    moves = Decimal(0)
    pipe = tensor_pipe_instructions(values)
    if hfma and pipe:
        moves = min(hfma, WARP_SIZE * pipe)
        removed.append(Removed(MOVES, moves))
    if hadd and hmul == 0 and hfma is not None and hfma == moves:
        removed.append(Removed(CONVERSIONS, hadd))
    return removed


def without_non_arithmetic_half(
    values: Mapping[str, Decimal | None], fp16_flop: Decimal | None
) -> tuple[Decimal | None, list[Removed]]:
    """One kernel's fp16 FLOPs less its moves and conversions, and what was removed."""
    removed = non_arithmetic_half(values)
    if fp16_flop is None or not removed:
        return fp16_flop, removed
    return fp16_flop - sum((r.flop for r in removed), Decimal(0)), removed


def corrections_summary(per_kernel: list[list[Removed]], counted_flop: Decimal | None) -> list:
    """One record per rule that removed anything: counter, evidence, kernels,
    instructions, FLOPs removed and their share of the FLOPs counted before any
    correction (``counted_flop`` is the total after them)."""
    out = []
    total_removed = sum((r.flop for k in per_kernel for r in k), Decimal(0))
    before = (counted_flop or Decimal(0)) + total_removed
    for rule, meta in RULES.items():
        hits = [r for k in per_kernel for r in k if r.rule == rule and r.instructions > 0]
        if not hits:
            continue
        instructions = sum((r.instructions for r in hits), Decimal(0))
        flop = sum((r.flop for r in hits), Decimal(0))
        out.append(
            {
                "rule": rule,
                "counter": meta["counter"],
                "evidence": meta["evidence"],
                "kernels": len(hits),
                "instructions": int(instructions),
                "flop_removed": int(flop),
                "share_of_counted_flop": float(flop / before) if before else None,
                "why": meta["why"],
            }
        )
    return out
