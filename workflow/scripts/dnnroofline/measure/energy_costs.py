"""Energy costs of a machine from metered kernels: pJ per FLOP per precision, pJ per
DRAM byte and the static power (the ``costs`` of ``ceilings.json``'s ``energy``).

Choi et al. 2013 ("A roofline model of energy") model a kernel's energy as

    joules = sum_p eps_flop[p] * flop_p + eps_mem * bytes + static_power_w * seconds

and the costs come from a non-negative least-squares fit (``scipy.optimize.nnls``) of
that over the kernels: an idle window (seconds only: the static power), a GEMM per
precision (its FLOPs and its minimum DRAM bytes, :func:`gemm_min_bytes`) and a large
copy (bytes read + written). Each row is divided by its measured joules, so the fit
minimises relative errors (an idle window weighs as much as a GEMM ten times its
joules), and each column is scaled to unit norm before the solve (FLOPs ~1e15 beside
seconds ~1 would otherwise leave the solver at the mercy of rounding). Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

#: The kinds of kernels the fit reads.
KINDS = ("idle", "gemm", "copy")
PJ = 1e12


def gemm_min_bytes(m: int, n: int, k: int, element_size: int) -> int:
    """Minimum DRAM traffic of an (m x k) @ (k x n) GEMM: each operand read once and the
    result written once, (M*K + K*N + M*N) x the element size in bytes."""
    return (int(m) * int(k) + int(k) * int(n) + int(m) * int(n)) * int(element_size)


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _refusal(kernels: Sequence[Mapping], precisions: Iterable[str] | None) -> str | None:
    """Why ``kernels`` cannot determine the costs, or None."""
    if not kernels:
        return "no metered kernels"
    for i, k in enumerate(kernels):
        label = f"kernel {i} ({k.get('kind')}{' ' + k['precision'] if k.get('precision') else ''})"
        if k.get("kind") not in KINDS:
            return f"{label}: kind {k.get('kind')!r} is none of {KINDS}"
        if not _positive(k.get("joules")):
            why = f": {k['reason']}" if k.get("reason") else ""
            return f"{label}: joules {k.get('joules')!r} are not positive{why}"
        if not _positive(k.get("seconds")):
            return f"{label}: seconds {k.get('seconds')!r} are not positive"
        if k.get("kind") == "gemm" and not (_positive(k.get("flop")) and k.get("precision")):
            return f"{label}: a GEMM needs a precision and positive flop"
    kinds = [k["kind"] for k in kernels]
    if "idle" not in kinds:
        return (
            "no idle window: the static power cannot be told from the per-FLOP and per-byte costs"
        )
    if "copy" not in kinds:
        return "no copy kernel: the cost per byte cannot be told from the cost per FLOP"
    have = {k["precision"] for k in kernels if k["kind"] == "gemm"}
    missing = [p for p in dict.fromkeys(precisions or ()) if p not in have]
    if missing:
        return f"no GEMM for precision(s) {', '.join(missing)}: their cost per FLOP is unknown"
    if not have:
        return "no GEMM: no cost per FLOP"
    return None


def _design(kernels: Sequence[Mapping], precisions: list[str]) -> np.ndarray:
    """Rows: kernels; columns: FLOPs of each precision, bytes, seconds."""
    rows = []
    for k in kernels:
        flop = [float(k.get("flop") or 0) if k.get("precision") == p else 0.0 for p in precisions]
        rows.append([*flop, float(k.get("bytes") or 0), float(k["seconds"])])
    return np.array(rows, dtype=float)


def fit_energy_costs(
    kernels: Sequence[Mapping], precisions: Iterable[str] | None = None
) -> tuple[dict | None, str | None]:
    """The costs of ``kernels`` (records with kind, precision, flop, bytes, seconds,
    joules), or None and why they cannot be fitted. ``precisions``: those whose cost is
    wanted (each needs a GEMM); default: those of the GEMMs present.

    Returns ``{pj_per_flop: {precision: pJ}, pj_per_byte, static_power_w, method,
    max_residual_pct}``: the largest |fitted - measured| / measured joules over the
    kernels, in %.
    """
    from scipy.optimize import nnls

    kernels = list(kernels)
    why = _refusal(kernels, precisions)
    if why:
        return None, why
    present = list(dict.fromkeys(k["precision"] for k in kernels if k["kind"] == "gemm"))
    a = _design(kernels, present)
    joules = np.array([float(k["joules"]) for k in kernels])
    unknowns = a.shape[1]
    weighted = a / joules[:, None]  # relative residuals: every kernel counts alike
    scale = np.linalg.norm(weighted, axis=0)
    scale[scale == 0] = 1.0  # an all-zero column stays zero: the rank below refuses it
    scaled = weighted / scale
    rank = int(np.linalg.matrix_rank(scaled))
    if len(kernels) < unknowns or rank < unknowns:
        return None, (
            f"{len(kernels)} kernels of rank {rank} cannot determine {unknowns} unknowns "
            f"(pJ/FLOP for {', '.join(present)}, pJ/byte, static power)"
        )
    x_scaled, _ = nnls(scaled, np.ones(len(kernels)))
    x = x_scaled / scale
    fitted = a @ x
    residual_pct = float(np.max(np.abs(fitted - joules) / joules) * 100.0)
    costs = {
        "pj_per_flop": {p: float(x[i] * PJ) for i, p in enumerate(present)},
        "pj_per_byte": float(x[-2] * PJ),
        "static_power_w": float(x[-1]),
        "method": (
            "joules = sum_p eps_flop[p]*flop_p + eps_mem*bytes + static_power_w*seconds "
            "(Choi et al. 2013, a roofline model of energy), non-negative least squares "
            f"(scipy.optimize.nnls) over {len(kernels)} kernels ({_kinds_text(kernels)}) for "
            f"{unknowns} unknowns, each kernel's row divided by its joules (relative "
            "residuals); GEMM bytes = (M*K + K*N + M*N) x element size (minimum DRAM "
            "traffic), copy bytes = read + written"
        ),
        "max_residual_pct": residual_pct,
    }
    return costs, None


def _kinds_text(kernels: Sequence[Mapping]) -> str:
    parts = []
    for kind in KINDS:
        of_kind = [k for k in kernels if k["kind"] == kind]
        if kind == "gemm":
            precisions = ", ".join(dict.fromkeys(k["precision"] for k in of_kind))
            parts.append(f"{len(of_kind)} gemm ({precisions})")
        else:
            parts.append(f"{len(of_kind)} {kind}")
    return ", ".join(parts)
