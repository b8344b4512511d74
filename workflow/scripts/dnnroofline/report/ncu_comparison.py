"""The analytic-vs-ncu comparison page: the complexity model checked against Nsight Compute.

For each ncu capture, ``flops.train_step`` of the complexity JSON against ncu's FLOP
total, and the analytic minimum DRAM bytes and the per-op traffic model's bytes against
ncu's DRAM bytes, each as the ratio ``analytic / ncu``, with an explanation generated
from the numbers (the capture's kernels grouped by class where the model misses some),
and the counter self-test verdicts of each env. The AI range is the point's own
(:func:`dnnroofline.estimate.traffic.point_ai_range`, as in ``roofline_points.csv``). Numbers
and HTML out (``write_ncu_comparison.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import product

from dnnroofline.aggregate.inputs import key_by_identity
from dnnroofline.estimate import traffic
from dnnroofline.formatting import (
    finite_number,
    fmt_ai,
    fmt_bytes,
    fmt_gflop,
    fmt_pct,
    fmt_time,
    positive_number,
    sig,
)
from dnnroofline.io import dig
from dnnroofline.measure import busy_share
from dnnroofline.ncu.above_roof import summary_line
from dnnroofline.ncu.kernel_classes import totals_by_kernel_class
from dnnroofline.ncu.kernels import kernel_points, ncu_status
from dnnroofline.report.render import section
from dnnroofline.study.identity import Identity, complexity_path, ncu_path
from dnnroofline.study.precisions import PRECISIONS, TENSOR_PRECISIONS

#: analytic / ncu outside this range is flagged loudly.
RATIO_RANGE = (0.5, 2.0)
#: |ratio - 1| up to this is "agrees".
AGREE_TOL = 0.10
PAGE_TITLE = "Nsight Compute vs the analytic model"
#: Classes whose traffic the per-op model does not have (the backend picks them at run time).
UNMODELLED_CLASSES = ("layout transform", "FFT/Winograd convolution")


def key_ncu_files(
    docs: Iterable[tuple[str, Mapping]],
    envs: Iterable[str],
    models: Iterable[str],
    batches: Iterable[int],
    precisions: Iterable[str] = PRECISIONS,
) -> tuple[dict[Identity, tuple[str, Mapping]], list[str]]:
    """Key (source, parsed ncu JSON) pairs by the identity each holds, among the known
    names: ({(env, model, precision, batch): (source, doc)}, sources matching none)."""
    groups = list(product(envs, models, precisions, {int(b) for b in batches}))
    return key_by_identity(docs, groups)


def analytic_bytes(complexity: Mapping, precision: str) -> float | None:
    """Minimum DRAM bytes per step for the precision (top-level fp32 value as fallback)."""
    v = positive_number(dig(complexity, "by_precision", precision, "min_dram_bytes_per_step"))
    return v if v is not None else positive_number(complexity.get("min_dram_bytes_per_step"))


def bytes_by_kernel_class(doc: Mapping) -> dict[str, tuple[int, float]]:
    """``{class: (kernels, DRAM bytes)}`` over a parsed capture's kernels (the kernel
    pass's bytes; kernels without DRAM bytes count as kernels only), classed by
    :func:`dnnroofline.ncu.kernel_classes.kernel_classes`."""
    return {
        cls: (int(t["kernels"]), t["dram_bytes"]) for cls, t in totals_by_kernel_class(doc).items()
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b is not None and b > 0 else None


def out_of_range(ratio: float | None) -> bool:
    return ratio is not None and not (RATIO_RANGE[0] <= ratio <= RATIO_RANGE[1])


def _pct_diff(ratio: float) -> str:
    """ncu relative to analytic, in words: ``ratio`` = analytic / ncu."""
    ncu_over = 1.0 / ratio
    if ncu_over >= 1:
        return f"{(ncu_over - 1) * 100:.0f}% more"
    return f"{(1 - ncu_over) * 100:.0f}% fewer"


def _share(x: float) -> str:
    if 0 < x < 0.001:
        return "under 0.1%"
    return f"{x:.1%}" if x < 0.1 else f"{x:.0%}"


def explain_flops(row: Mapping) -> list[str]:
    """Why analytic and ncu FLOPs differ for this row, from its numbers (plain text)."""
    r = row.get("flop_ratio")
    prec = row["precision"]
    if r is None:
        if row.get("ncu_flop") is None:
            return ["ncu gave no FLOP total: no FLOP counters in the capture, or all n/a."]
        return ["No analytic FLOP count (complexity file missing)."]
    tensor = row.get("ncu_tensor_flop")
    out: list[str] = []
    if abs(r - 1) <= AGREE_TOL:
        out.append(
            f"ncu counted {_pct_diff(r)} FLOPs than the analytic model: they agree "
            f"within {AGREE_TOL:.0%}."
        )
        return out
    if r > 1:
        out.append(f"ncu counted {_pct_diff(r)} FLOPs than the analytic model.")
        if tensor is None and prec in TENSOR_PRECISIONS:
            out.append(
                f"{prec} runs convolutions and GEMMs on tensor cores, but this capture has no "
                "tensor-core FLOP counters (sm__ops_path_tensor_*: totals.flop.tensor is null): "
                "those FLOPs are missing from the ncu total. This alone can explain a large gap."
            )
        fwd = row.get("analytic_forward")
        ncu = row.get("ncu_flop")
        if fwd and ncu and abs(ncu / fwd - 1) <= 0.25:
            out.append(
                f"The ncu total is within 25% of the analytic forward pass alone "
                f"({fmt_gflop(fwd)}): the capture probably misses the backward pass and the "
                "optimizer (an NVTX push/pop filter misses the backward thread)."
            )
        if prec == "fp32" or tensor:
            out.append(
                "cuDNN may have picked Winograd or FFT convolution algorithms, which do fewer "
                "multiplications than direct convolution (Winograd F(2x2,3x3): up to 2.25x "
                "fewer); ncu counts what ran, the model counts direct convolution."
            )
        if row.get("ncu_incomplete_flop"):
            out.append(
                f"{row['ncu_incomplete_flop']} kernel(s) lack FLOP counters (n/a): the ncu "
                "total is a partial sum."
            )
    else:
        out.append(f"ncu counted {_pct_diff(r)} FLOPs than the analytic model.")
        cc = row.get("ncu_cuda_core_share")
        if cc is not None and cc >= 0.05:
            out.append(
                f"{_share(cc)} of ncu's FLOPs ran on CUDA cores: elementwise kernels (batch-norm "
                "statistics, activations, loss, casts), which the model counts once or not at "
                "all, add FLOPs."
            )
        elif cc is not None:
            out.append(
                f"Only {_share(cc)} of ncu's FLOPs ran on CUDA cores, so the extra FLOPs are in "
                "the tensor-core GEMMs and convolutions themselves."
            )
        if tensor and prec in TENSOR_PRECISIONS:
            out.append(
                "Tensor-core counters count the padded tiles: GEMM dimensions rounded up to "
                "tile sizes add FLOPs the model does not have."
            )
        out.append(
            "Other sources: recomputation, the optimizer's implementation (the model counts 6 "
            "FLOPs per parameter for SGD with momentum and weight decay; foreach/fused kernels "
            + ("and amp's GradScaler unscale and inf checks " if prec == "amp" else "")
            + "add more), and floating-point instructions used for indexing or reductions."
        )
    if out_of_range(r):
        out.append(
            f"OUT OF RANGE: analytic / ncu = {sig(r)} is outside "
            f"[{RATIO_RANGE[0]:g}, {RATIO_RANGE[1]:g}]; check the capture and the FLOP model "
            "before trusting this point's AI."
        )
    return out


def explain_ai_range(row: Mapping) -> list[str]:
    """The ncu AI against the point's analytic AI range (per-op model .. minimum bytes),
    and, where ncu moved more than the model, the kernels the model does not have."""
    ai, lo, hi = row.get("ncu_ai"), row.get("analytic_ai_low"), row.get("analytic_ai_high")
    if not (ai and lo and hi):
        return []
    where = traffic.position(ai, min(lo, hi), hi)
    text = (
        f"ncu AI {ai:.3g} FLOP/B against the point's analytic range {lo:.3g} – {hi:.3g} "
        "FLOP/B (train-step FLOPs over the per-op traffic model, every access counted, and "
        f"over the minimum bytes): {where}."
    )
    model, dram = row.get("analytic_traffic_bytes"), row.get("ncu_dram")
    if model and dram:
        text += f" The model's {fmt_bytes(model)} are {sig(model / dram)}x ncu's DRAM bytes."
    if where == "below":
        unmodelled = {c: v for c, v in (row.get("unmodelled_kernels") or {}).items() if v[1]}
        moved = sum(b for _, b in unmodelled.values())
        if moved and model and dram:
            kinds = ", ".join(
                f"{c} {fmt_bytes(b)} in {n} kernels" for c, (n, b) in unmodelled.items()
            )
            text += (
                f" Kernels the model does not have moved {fmt_bytes(moved)} ({kinds}): the "
                "backend chose NCHW or FFT/Winograd convolution algorithms at run time; with "
                f"those bytes the model is {sig((model + moved) / dram)}x ncu's."
            )
        else:
            text += (
                " ncu saw more traffic than the per-op model allows: kernels that re-read their "
                "operands (implicit-GEMM convolutions tiling over a large input) and workspaces"
                + (
                    " (the step ran as it runs: no cache flushed)."
                    if row.get("bytes_pass") == "step"
                    else ", and caches flushed before each replayed kernel."
                )
            )
    elif where == "above":
        text += " ncu saw less traffic than the minimum: a partial capture (backward missing?)."
    return [text]


def explain_bytes(row: Mapping) -> list[str]:
    """Why the analytic minimum and ncu DRAM bytes differ, from the numbers."""
    r = row.get("bytes_ratio")
    if r is None:
        if row.get("ncu_dram") is None:
            return ["ncu gave no DRAM bytes (dram__bytes counters missing or n/a)."]
        return ["No analytic byte count (complexity file missing)."]
    out = []
    if r <= 1:
        out.append(
            f"ncu moved {1 / r:.2f}x the analytic minimum, which is a lower bound (each "
            "parameter, gradient, momentum and activation moved once). Activations re-read by "
            "several kernels (forward, input and weight gradients), cuDNN workspaces and layout "
            "transforms add traffic"
            + (
                ". These bytes are the step's as it runs (ncu's step pass, caches not flushed): "
                "the real step's DRAM traffic."
                if row.get("bytes_pass") == "step"
                else "; and ncu flushes the caches before each replayed kernel (--cache-control "
                "all), so no kernel finds its input in L2 as it may in the real run."
            )
        )
    else:
        out.append(
            f"ncu counted {1 / r:.2f}x the analytic minimum, less than the lower bound. Writes "
            "still in L2 when a kernel ends are written back outside its measurement; kernels "
            "missing from the capture (the backward pass?) and kernels without DRAM counters "
            "also lower the total."
        )
        if row.get("ncu_incomplete_dram"):
            out.append(
                f"{row['ncu_incomplete_dram']} kernel(s) lack DRAM counters (n/a): the ncu total "
                "is a partial sum."
            )
    if out_of_range(r):
        if r < RATIO_RANGE[0]:
            out.append(
                f"Outside [{RATIO_RANGE[0]:g}, {RATIO_RANGE[1]:g}]: for bytes this is common (the "
                "analytic value is a lower bound), but it means the analytic AI overstates the "
                "real one by that factor."
            )
        else:
            out.append(
                "OUT OF RANGE: ncu counted less than half the analytic lower bound; check the "
                "capture (missing kernels or counters)."
            )
    return out


def comparison_rows(
    ncu_docs: Mapping[tuple[str, str, str, int], Mapping],
    complexity: Mapping[tuple[str, int], Mapping],
    ncu_sources: Mapping[tuple[str, str, str, int], str] | None = None,
) -> list[dict]:
    """One row per ncu capture: analytic vs ncu FLOPs and DRAM bytes, ratios analytic/ncu."""
    ncu_sources = ncu_sources or {}
    rows = []
    for key in sorted(ncu_docs, key=lambda k: (k[0], k[1], k[2], int(k[3]))):
        env, model, precision, batch = key
        doc = ncu_docs[key]
        status, message = ncu_status(doc)
        comp = complexity.get((model, int(batch)))
        ok = status == "ok"
        totals = doc.get("totals") or {}
        flop = positive_number(dig(totals, "flop", "total")) if ok else None
        dram = positive_number(dig(totals, "bytes", "dram")) if ok else None
        tensor = finite_number(dig(totals, "flop", "tensor")) if ok else None
        cuda_core = [finite_number(dig(totals, "flop", p)) for p in ("fp64", "fp32", "fp16")]
        cc_sum = sum(v for v in cuda_core if v is not None)
        a_flop = positive_number(dig(comp, "flops", "train_step")) if comp else None
        a_bytes = analytic_bytes(comp, precision) if comp else None
        incomplete = totals.get("incomplete") or {}
        kset = kernel_points(doc) if ok else None
        row = {
            "env": env,
            "model": model,
            "precision": precision,
            "batch_size": int(batch),
            "source": ncu_sources.get(key, ncu_path(env, model, precision, batch)),
            "status": status,
            "message": message,
            "complexity": comp is not None,
            "analytic_flop": a_flop,
            "analytic_forward": positive_number(dig(comp, "flops", "forward")) if comp else None,
            "ncu_flop": flop,
            "ncu_tensor_flop": tensor,
            "ncu_cuda_core_share": (cc_sum / flop) if flop and ok else None,
            "flop_ratio": _ratio(a_flop, flop),
            "analytic_bytes": a_bytes,
            "ncu_dram": dram,
            # which ncu pass the DRAM bytes come from: "step" (as it runs) or "kernel"
            "bytes_pass": dig(doc, "provenance", "totals.bytes") if ok else None,
            "bytes_ratio": _ratio(a_bytes, dram),
            "ncu_kernels": int(totals.get("kernels") or 0) if ok else 0,
            # kernel time is the kernel pass's per-kernel sum; the step pass has only its
            # range's duration (host gaps and ncu's own cost in it), which is no kernel time
            "ncu_kernel_time_s": busy_share.ncu_kernel_time_s(doc) if ok else None,
            "ncu_range_time_s": positive_number(totals.get("time_s"))
            if ok and dig(doc, "provenance", "totals.time_s") == "step"
            else None,
            "kernels_plotted": len(kset.points) if kset else 0,
            "kernels_skipped": len(kset.skipped) if kset else 0,
            "ncu_incomplete_flop": incomplete.get("flop.total"),
            "ncu_incomplete_dram": incomplete.get("bytes.dram"),
            "warnings": [str(w) for w in (doc.get("warnings") or [])] if ok else [],
        }
        cwhere = complexity_path(model, batch)
        a_traffic = traffic.complexity_traffic_bytes(comp, precision, cwhere) if comp else None
        row["analytic_traffic_bytes"] = a_traffic
        row["traffic_ratio"] = _ratio(a_traffic, dram)
        row["analytic_ai_low"] = row["analytic_ai_high"] = None
        if a_flop and a_bytes:  # the point's own range (roofline_points.csv's)
            lo, hi = traffic.point_ai_range(
                comp, precision, flop=a_flop, min_bytes=a_bytes, where=cwhere
            )
            row["analytic_ai_low"] = lo if a_traffic else None
            row["analytic_ai_high"] = hi
        by_class = bytes_by_kernel_class(doc) if ok else {}
        row["unmodelled_kernels"] = {c: by_class.get(c, (0, 0.0)) for c in UNMODELLED_CLASSES}
        row["ncu_ai"] = flop / dram if flop and dram else None
        if ok:
            row["flop_explanation"] = explain_flops(row)
            row["bytes_explanation"] = explain_bytes(row) + explain_ai_range(row)
        else:
            row["flop_explanation"] = [
                f"ncu capture {status}: {message or 'no message'}; no counts to compare."
            ]
            row["bytes_explanation"] = []
        if comp is None:
            row["flop_explanation"].append(
                f"No complexity file for {model} at batch {batch} "
                f"({complexity_path(model, batch)})."
            )
        row["flop_flag"] = out_of_range(row["flop_ratio"])
        row["bytes_flag"] = out_of_range(row["bytes_ratio"])
        rows.append(row)
    return rows


def _ratio_cell(r: float | None) -> str | dict:
    """A ratio for the counts table: 3 significant digits (a ratio of 0.0037 is not
    "0.00"), flagged outside :data:`RATIO_RANGE`."""
    if r is None:
        return "–"
    return {"text": sig(r), "flagged": out_of_range(r)}


def _label(r: Mapping) -> str:
    return f"{r['env']} {r['model']} {r['precision']} bs{r['batch_size']}"


def _above_roof(above: list[dict], precision: str) -> dict:
    """A capture's kernels above their measured roof
    (:func:`dnnroofline.ncu.above_roof.kernels_above_measured_roof`): the summary and up
    to five of them with their rates."""
    return {
        "summary": summary_line(above, precision),
        "kernels": above[:5],
        "more": max(len(above) - 5, 0),
    }


def selftest_facts(selftests: Mapping[str, Mapping]) -> list[dict]:
    """The counter self-test of each env: every known kernel and the verdict per precision."""
    out = []
    for env in sorted(selftests):
        doc = selftests[env]
        cases = []
        for c in doc.get("cases") or []:
            rel = c.get("rel_error")
            cases.append(
                {
                    "case": c.get("case"),
                    "counter": f"{c.get('quantity')} ({c.get('pass')} pass)",
                    "expected": f"{c['expected']:.6g}" if c.get("expected") is not None else "–",
                    "measured": f"{c['measured']:.6g}" if c.get("measured") is not None else "–",
                    "error": f"{rel:+.2%}" if rel is not None else "–",
                    "tolerance": f"±{c.get('tolerance', 0):.0%}",
                    "ok": bool(c.get("ok")),
                    "reason": c.get("reason"),
                }
            )
        verdicts = [
            {"precision": p, "trusted": bool(v.get("trusted")), "reason": v.get("reason")}
            for p, v in sorted((doc.get("verdicts") or {}).items())
        ]
        out.append({"env": env, "cases": cases, "verdicts": verdicts})
    return out


def count_cells(r: Mapping) -> list:
    """One capture's row of the counts table."""
    return [
        r["env"],
        r["model"],
        r["precision"],
        r["batch_size"],
        r["status"],
        fmt_gflop(r["analytic_flop"]),
        fmt_gflop(r["ncu_flop"]),
        _ratio_cell(r["flop_ratio"]),
        fmt_bytes(r["analytic_bytes"]),
        fmt_bytes(r["ncu_dram"]),
        _ratio_cell(r["bytes_ratio"]),
        fmt_bytes(r["analytic_traffic_bytes"]),
        _ratio_cell(r["traffic_ratio"]),
        f"{r['kernels_plotted']} / {r['kernels_skipped']}" if r["status"] == "ok" else "–",
    ]


def capture_extras(r: Mapping) -> str:
    """The sentence on an ok capture's kernel time, range time, AIs and tensor share."""
    extra = []
    if r["ncu_kernel_time_s"] is not None:
        extra.append(
            f"{r['ncu_kernels']} kernels ran for {fmt_time(r['ncu_kernel_time_s'])} "
            "in the kernel pass (each alone, caches flushed: an upper bound on the "
            "step's kernel time; the point's kernel-busy share divides it by the "
            "timed step)"
        )
    if r["ncu_range_time_s"] is not None:
        extra.append(
            f"the step pass's range lasted {fmt_time(r['ncu_range_time_s'])} "
            "(the instrumented step, host gaps and ncu's own cost included: not "
            "kernel time)"
        )
    if r["ncu_flop"] and r["ncu_dram"]:
        extra.append(f"ncu DRAM AI {fmt_ai(r['ncu_flop'] / r['ncu_dram'])}")
    if r["analytic_flop"] and r["analytic_bytes"]:
        extra.append(f"analytic AI {fmt_ai(r['analytic_flop'] / r['analytic_bytes'])}")
    if r["ncu_tensor_flop"] and r["ncu_flop"]:
        extra.append(f"tensor-core share {fmt_pct(r['ncu_tensor_flop'] / r['ncu_flop'])}")
    return "; ".join(extra)


def explanation(r: Mapping) -> dict:
    """Why one capture's counts differ from the analytic ones, as the page words it."""
    ok = r["status"] == "ok"
    above = r.get("kernels_above_measured") if ok else None  # None: no ceilings given
    return {
        "label": _label(r),
        "flagged": bool(r["flop_flag"] or r["bytes_flag"]),
        "flop": " ".join(r["flop_explanation"]),
        "bytes": " ".join(r["bytes_explanation"]),
        "extra": capture_extras(r) if ok else "",
        "warnings": " | ".join(r["warnings"][:5]) if ok and r["warnings"] else "",
        "above": _above_roof(above, r["precision"]) if above is not None else None,
        "source": r["source"],
    }


def comparison_facts(
    rows: Sequence[Mapping],
    unmatched: Sequence[str] = (),
    selftests: Mapping[str, Mapping] | None = None,
) -> dict:
    """What the page says: the counter self-test, then a table and a generated
    explanation per capture."""
    ok = [r for r in rows if r["status"] == "ok"]
    flagged = lambda key: [  # noqa: E731
        {"label": _label(r), "ratio": sig(r[f"{key}_ratio"])} for r in ok if r[f"{key}_flag"]
    ]
    return {
        "title": PAGE_TITLE,
        "ratio_range": RATIO_RANGE,
        "unmatched": list(unmatched),
        "selftests": selftest_facts(selftests or {}),
        "n_rows": len(rows),
        "n_ok": len(ok),
        "flop_flags": flagged("flop"),
        "byte_flags": flagged("bytes"),
        "bad_status": [
            {"label": _label(r), "status": r["status"], "message": r["message"]}
            for r in rows
            if r["status"] != "ok"
        ],
        "counts": [
            {"cells": count_cells(r), "flagged": bool(r["flop_flag"] or r["status"] != "ok")}
            for r in rows
        ],
        "explained": [explanation(r) for r in rows],
    }


#: The report page (``ncu_vs_analytic.html``), from :func:`comparison_facts`.
comparison_page = section("ncu_comparison.html", comparison_facts)
