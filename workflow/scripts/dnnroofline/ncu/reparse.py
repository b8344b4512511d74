"""Parse a finished capture's CSVs again with the current parser.

The parser learns (fp16 register moves that are not arithmetic, wgmma kernels, the
counters of ncu's hierarchical chart); the counters a GPU run wrote do not change. A
capture's JSON is rebuilt from its own kernel-pass and step-pass CSVs, keeping what only
the capture knew (its verdict, the ncu command and settings, the driver's runs), and
says when and why it was parsed again.
"""

from __future__ import annotations

from collections.abc import Mapping

from dnnroofline.errors import InputError
from dnnroofline.ncu.command import combine_passes
from dnnroofline.ncu.parse import parse_ncu_text

#: What the capture alone knew: kept as it was.
CAPTURE_KEYS = (
    "status",
    "reason",
    "message",
    "missing",
    "step_source_file",
    "ncu",
    "driver_run",
    "step_driver_run",
)


def reparse_capture(
    capture: Mapping, kernel_csv: str, step_csv: str | None, *, date: str, why: str
) -> dict:
    """The capture's JSON with every parsed field recomputed from its CSV texts."""
    if capture.get("status") != "ok":
        raise InputError(
            f"{capture.get('source_file')}: status {capture.get('status')!r}: only a "
            "capture that finished ok is parsed again"
        )
    kernel = parse_ncu_text(kernel_csv, capture["source_file"])
    step = parse_ncu_text(step_csv, capture["step_source_file"]) if step_csv else None
    if step is None and capture["provenance"].get("totals.bytes") == "step":
        raise InputError(f"{capture['source_file']}: its step-pass CSV is missing")
    parsed = combine_passes(kernel, step)
    history = [*capture.get("reparsed", []), {"date": date, "why": why}]
    return {**parsed, **{k: capture.get(k) for k in CAPTURE_KEYS}, "reparsed": history}
