"""The complexity section: the analytic counts per (model, batch), and how they were counted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dnnroofline.formatting import ratio_txt
from dnnroofline.report import data
from dnnroofline.report.render import section


def facts(complexity: Any, top_types: int = 4) -> dict:
    """Table per (model, batch) of the analytic counts, and how they were counted; the
    (model, batch) pairs that could not be counted, each with the complexity stage's reason."""
    cx = data.complexity_index(complexity)
    rows, by_precision, not_counted = [], [], []
    for (model, b), c in sorted(cx.items()):
        if c.get("status") == "error":
            message = c.get("message") or "(no message)"
            not_counted.append({"model": model, "batch": b, "message": message})
            continue
        fl = c.get("flops") or {}
        by = fl.get("by_layer_type") or {}
        tot = sum(data.layer_total(v) for v in by.values())
        tops = sorted(by.items(), key=lambda kv: -data.layer_total(kv[1]))[:top_types]
        reference = (fl.get("reference") or {}).get("fvcore_forward")
        rows.append(
            {
                "model": model,
                "batch": b,
                "params": c.get("params"),
                "flops": {k: fl.get(k) for k in ("forward", "backward", "optimizer", "train_step")},
                "bwd_fwd": ratio_txt(fl.get("backward"), fl.get("forward")),
                # fvcore's own trace of the forward: an independent check of ours
                "reference": reference,
                "vs_reference": ratio_txt(fl.get("forward"), reference),
                "top_types": [
                    {"type": k, "share": data.layer_total(v) / tot if tot > 0 else None}
                    for k, v in tops
                ],
                "activations": (c.get("bytes") or {}).get("activations"),
                "min_dram": c.get("min_dram_bytes_per_step"),
                "ai": data.analytic_ai(c, "fp32"),
                "peak": c.get("peak_memory_bytes"),
            }
        )
        for prec, d in sorted((c.get("by_precision") or {}).items()):
            if isinstance(d, Mapping):
                by_precision.append(
                    {
                        "model": model,
                        "batch": b,
                        "precision": prec,
                        "activations": d.get("activation_bytes"),
                        "min_dram": d.get("min_dram_bytes_per_step"),
                        "ai": data.analytic_ai(c, prec),
                        "peak": d.get("peak_memory_bytes"),
                    }
                )
    return {
        "rows": rows,
        "not_counted": not_counted,
        "by_precision": by_precision,
        "methods": sorted({str(c.get("method")) for c in cx.values() if c.get("method")}),
        "reference_methods": sorted(
            {
                str(m)
                for c in cx.values()
                if (m := ((c.get("flops") or {}).get("reference") or {}).get("method"))
            }
        ),
    }


complexity_section = section("complexity.html", facts)
