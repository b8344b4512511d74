"""CPU counters through Linux ``perf stat``: event choice, ``-x,`` CSV parsing, FLOPs and bytes.

Pure logic (the probe and profile scripts run perf and pass its text in).

FLOP events (the core's own retired-FLOP counters; FMA = 2 FLOPs):

* Intel (Skylake and later): ``fp_arith_inst_retired.{scalar,128b_packed,256b_packed,
  512b_packed}_{single,double}``. Each count is one instruction over that many lanes,
  and an FMA instruction counts twice (Intel SDM / perfmon event descriptions), so
  FLOPs = sum(count x lanes): 1, 2/4, 4/8, 8/16 (double/single).
* AMD (Zen 2 through Zen 5): ``fp_ret_sse_avx_ops.all``, retired SSE/AVX FLOPs, MACs
  counted as 2 (AMD PPR, event PMCx003 FpRetSseAvxOps; perf's ``amdzen{2,3,4,5}``
  tables): FLOPs = count.

Neither set counts bf16 dot products (VDPBF16PS, AMX tiles) as FLOPs at their
arithmetic, so a measured perf AI is given for fp32 points only.

DRAM events (uncore / data fabric; system-wide, so perf needs ``-a`` and the rights
for it; other processes' traffic is included):

* Intel server (IMC): ``uncore_imc/cas_count_read/`` and ``uncore_imc/cas_count_write/``
  (perf scales them to MiB: one CAS is a 64-byte line); Intel client:
  ``uncore_imc_free_running/data_read/`` and ``.../data_write/`` (MiB).
* AMD Zen 2/3 data fabric: ``dram_channel_data_controller_0`` .. ``_7`` (64-byte beats,
  perf scales them to MiB).

Where the kernel exposes none of these (a VM without a virtual PMU, a container,
``perf_event_paranoid`` too high), the probe records ``unavailable`` with perf's own
output as the reason, and the study goes on with the analytic AI range.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from dnnroofline.errors import InputError

#: Intel: event -> FLOPs per count (lanes; the event already counts an FMA twice).
INTEL_FLOP_EVENTS: dict[str, int] = {
    "fp_arith_inst_retired.scalar_single": 1,
    "fp_arith_inst_retired.scalar_double": 1,
    "fp_arith_inst_retired.128b_packed_single": 4,
    "fp_arith_inst_retired.128b_packed_double": 2,
    "fp_arith_inst_retired.256b_packed_single": 8,
    "fp_arith_inst_retired.256b_packed_double": 4,
    "fp_arith_inst_retired.512b_packed_single": 16,
    "fp_arith_inst_retired.512b_packed_double": 8,
}
#: AMD Zen 2-5: retired SSE/AVX FLOPs (MACs count 2).
AMD_FLOP_EVENTS: dict[str, int] = {"fp_ret_sse_avx_ops.all": 1}
INTEL_DRAM_EVENTS = (
    ("uncore_imc/cas_count_read/", "uncore_imc/cas_count_write/"),
    ("uncore_imc_free_running/data_read/", "uncore_imc_free_running/data_write/"),
)
AMD_DRAM_EVENTS = (tuple(f"dram_channel_data_controller_{i}" for i in range(8)),)
#: Bytes per raw count of a DRAM event printed without a unit (a 64-byte line or beat).
LINE_BYTES = 64
UNIT_BYTES = {"": None, "b": 1, "bytes": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30}
#: Precisions whose FLOPs the events count at their arithmetic.
PERF_PRECISIONS = ("fp32",)
NOT_SUPPORTED = "<not supported>"
NOT_COUNTED = "<not counted>"

_NUM = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def _is_number(s: str) -> bool:
    return bool(_NUM.match(s.strip()))


def _is_value(s: str) -> bool:
    return _is_number(s) or s.strip() in (NOT_SUPPORTED, NOT_COUNTED)


def parse_stat_csv(text: str, sep: str = ",") -> list[dict]:
    """Rows of ``perf stat -x<sep>`` output: ``{event, value, status, unit, runtime, percent}``.

    Handles the plain layout (``value,unit,event,runtime,percent,metric,unit``), interval
    mode (``-I``: a leading timestamp), aggregation columns (``--per-node`` /
    ``--per-socket``: leading ``N0,1,``) and a cgroup column after the event (``-G``).
    ``value`` is a float, or None with ``status`` ``not supported`` / ``not counted``.
    Comment lines (``#``) and blank lines are skipped. perf's own error text (an event
    it cannot parse, a permission error) raises InputError quoting it.
    """
    rows: list[dict] = []
    errors: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(sep)]
        event_at = None
        for i in range(1, len(fields)):
            name = fields[i]
            if not name or _is_number(name) or name in (NOT_SUPPORTED, NOT_COUNTED):
                continue
            if _is_value(fields[i - 2] if i >= 2 else "") and not _is_number(fields[i - 1]):
                event_at = i
                break
            # value,event (no unit column), unless the next field is the event of a
            # value,unit,event row (DRAM events print MiB: 12.5,MiB,uncore_imc/...)
            unit_then_event = len(fields) > 2 and fields[2] and not _is_number(fields[2])
            if i == 1 and _is_value(fields[0]) and not unit_then_event:
                event_at = i
                break
        if event_at is None:
            errors.append(f"line {lineno}: {line}")
            continue
        value_at = event_at - 2 if event_at >= 2 else 0
        if event_at >= 2 and not _is_value(fields[value_at]):
            value_at = event_at - 1
        value_s = fields[value_at]
        unit = fields[event_at - 1] if value_at == event_at - 2 else ""
        after = [f for f in fields[event_at + 1 :] if _is_number(f)]
        status = "counted"
        value: float | None
        if value_s == NOT_SUPPORTED:
            status, value = "not supported", None
        elif value_s == NOT_COUNTED:
            status, value = "not counted", None
        else:
            value = float(value_s)
        rows.append(
            {
                "event": fields[event_at],
                "value": value,
                "status": status,
                "unit": unit,
                "runtime": float(after[0]) if after else None,
                "percent": float(after[1]) if len(after) > 1 else None,
            }
        )
    if errors and not rows:
        raise InputError(
            "perf stat output has no counter rows; perf said: " + " | ".join(errors[:6])
        )
    return rows


def totals(rows: Iterable[Mapping]) -> dict[str, dict]:
    """Per event: the summed value (over intervals, nodes, sockets) and its status."""
    out: dict[str, dict] = {}
    for r in rows:
        t = out.setdefault(r["event"], {"value": None, "status": r["status"], "unit": r["unit"]})
        if r["value"] is not None:
            t["value"] = (t["value"] or 0.0) + float(r["value"])
            t["status"] = "counted"
    return out


def listed_events(perf_list_text: str) -> set[str]:
    """Event names in ``perf list`` output (``name``, ``a OR b`` and ``pmu/event/`` forms)."""
    names: set[str] = set()
    for line in perf_list_text.splitlines():
        head = line.split("[")[0].strip()
        if not head or head.endswith(":"):
            continue
        for part in head.split(" OR "):
            tok = part.strip().split()
            if tok:
                names.add(tok[0].lower())
    return names


def choose_events(available: Iterable[str]) -> dict:
    """The FLOP and DRAM events to count, from what ``perf list`` offers.

    Returns ``{"vendor_set": "intel" | "amd" | None, "flop": {event: FLOPs/count},
    "dram": [events]}``; empty where none of the known events is listed.
    """
    have = {a.lower() for a in available}
    flop: dict[str, int] = {}
    vendor = None
    if all(e in have for e in INTEL_FLOP_EVENTS):
        flop, vendor = dict(INTEL_FLOP_EVENTS), "intel"
    elif all(e in have for e in AMD_FLOP_EVENTS):
        flop, vendor = dict(AMD_FLOP_EVENTS), "amd"
    dram: list[str] = []
    for group in INTEL_DRAM_EVENTS + AMD_DRAM_EVENTS:
        present = [e for e in group if e in have]
        if len(present) == len(group) or (group in AMD_DRAM_EVENTS and present):
            dram = present
            break
    return {"vendor_set": vendor, "flop": flop, "dram": dram}


def flops_of(counts: Mapping[str, Mapping], weights: Mapping[str, int]) -> float | None:
    """FLOPs from counted FLOP events (None if any of them was not counted)."""
    total = 0.0
    for event, w in weights.items():
        c = counts.get(event)
        if c is None or c["value"] is None:
            return None
        total += float(c["value"]) * w
    return total


def bytes_of(counts: Mapping[str, Mapping], events: Sequence[str]) -> float | None:
    """DRAM bytes from counted DRAM events, in the unit perf printed (None if missing)."""
    if not events:
        return None
    total = 0.0
    for event in events:
        c = counts.get(event)
        if c is None or c["value"] is None:
            return None
        unit = str(c.get("unit") or "").lower()
        if unit not in UNIT_BYTES:
            raise InputError(f"perf event {event}: unknown unit {c.get('unit')!r}")
        scale = UNIT_BYTES[unit] or LINE_BYTES
        total += float(c["value"]) * scale
    return total


def unavailable_reason(
    stat_text: str, *, returncode: int, listed: Iterable[str], kernel_log: str | None = None
) -> str | None:
    """Why perf cannot count FLOPs here (None when it can), in perf's own words.

    ``stat_text`` is the output of the probe ``perf stat -x, -e <events> -- true``;
    ``kernel_log`` a kernel line about the PMU, if one could be read.
    """
    chosen = choose_events(listed)
    said = " | ".join(line.strip() for line in stat_text.strip().splitlines()[:6]) or "(nothing)"
    why = None
    if returncode != 0:
        why = f"perf stat exited {returncode}: {said}"
    elif not chosen["flop"]:
        why = (
            "perf list offers none of the FLOP events (Intel fp_arith_inst_retired.*, AMD "
            f"fp_ret_sse_avx_ops.all); perf stat -x, on hardware events printed: {said}"
        )
    else:
        try:
            rows = totals(parse_stat_csv(stat_text))
        except InputError as exc:
            return str(exc)
        bad = [e for e in chosen["flop"] if rows.get(e, {}).get("status") != "counted"]
        if bad:
            why = f"FLOP events listed but not counted ({', '.join(bad)}): {said}"
    if why and kernel_log:
        why += f"; kernel: {kernel_log.strip()}"
    return why
