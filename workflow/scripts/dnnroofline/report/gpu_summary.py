"""The summary table of `make gpu-check`: what one NVIDIA machine gave, in one place.

Pure logic: the entry script (scripts/gpu_check.py) loads the study's files and
passes them in. Rows: each measured roof against its datasheet peak, the counter
self-test verdicts and the cases that decide them, per roofline point the
images/s, the analytic ÷ ncu FLOPs (useful ÷ executed FLOP/s over the same
median step, so the ratio of the two counts) and what its ncu capture gave and cost;
then the GEMM sweep behind the measured roofs (each candidate's shape, library, rate,
SM clock and power) and the captured kernels that beat their class's measured roof.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.formatting import fmt_bytes, fmt_gflop
from dnnroofline.ncu.above_roof import kernels_above_measured_roof
from dnnroofline.study.identity import config_key
from dnnroofline.study.precisions import precision_of_roof


def _fmt_rate(value: float | None, unit: str) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    if unit == "FLOP/s":
        return f"{value / 1e12:.1f} TFLOP/s"
    return f"{value / 1e12:.2f} TB/s"


def _roofs(ceilings: Mapping, where: str) -> list[Mapping]:
    roofs = ceilings.get("roofs")
    if not isinstance(roofs, list):
        raise InputError(f"{where}: no 'roofs' list")
    return roofs


def roof_rows(ceilings: Mapping, where: str = "ceilings.json") -> list[list[str]]:
    """[roof, measured, datasheet, measured / datasheet] per compute precision and memory,
    in the file's order: of each source the roof the study uses
    (:func:`dnnroofline.estimate.roofline.select_roof`)."""
    roofs = roofline.parse_roofs({"roofs": _roofs(ceilings, where)}, where)
    keys = list(
        dict.fromkeys(
            (r.kind, precision_of_roof(r.precision) if r.precision else None) for r in roofs
        )
    )
    rows = []
    for kind, precision in keys:
        unit = "FLOP/s" if kind == "compute" else "B/s"

        def value(source, kind=kind, precision=precision):
            roof = roofline.select_roof(roofs, kind, precision, sources=(source,))
            return roof.value if roof else None

        measured, datasheet = value("measured"), value("datasheet")
        share = f"{measured / datasheet:.0%}" if measured and datasheet else "n/a"
        name = f"{precision} compute" if kind == "compute" else "memory bandwidth"
        rows.append([name, _fmt_rate(measured, unit), _fmt_rate(datasheet, unit), share])
    return rows


def selftest_rows(selftest: Mapping | None) -> list[list[str]]:
    """[precision, verdict, reason] per study precision; one row saying so without a test."""
    if selftest is None:
        return [["all", "not run", "no results/{env}/ncu/selftest.json"]]
    verdicts = selftest.get("verdicts") or {}
    cases = {c.get("case"): c for c in selftest.get("cases") or [] if isinstance(c, Mapping)}
    rows = []
    for precision, v in verdicts.items():
        gemm = cases.get(v.get("gemm_case"), {})
        copy = cases.get("copy", {})
        detail = ", ".join(
            f"{c['case']} ratio {c['ratio']:.3f}"
            for c in (gemm, copy)
            if isinstance(c.get("ratio"), int | float)
        )
        verdict = "trusted" if v.get("trusted") else "NOT trusted (analytic AI)"
        rows.append([precision, verdict, v.get("reason") or detail or ""])
    return rows


def capture_cell(capture: Mapping | None) -> str:
    """A point's ncu capture: its status, and the wall time of its passes (ncu replays
    each kernel, so this is what profiling the step cost, not the step's time)."""
    if capture is None:
        return "not profiled"
    status = capture.get("status")
    if status != "ok":
        return f"{status}: {capture.get('reason')}"
    passes = (capture.get("ncu") or {}).get("passes") or {}
    walls = {name: (passes.get(name) or {}).get("wall_s") for name in ("kernel", "step")}
    if not all(isinstance(w, int | float) for w in walls.values()):
        return "ok"
    total = walls["kernel"] + walls["step"]
    return (
        f"ok, {total:.0f} s (kernel pass {walls['kernel']:.0f} s, step pass {walls['step']:.0f} s)"
    )


def point_rows(
    points: Sequence[Mapping], captures: Mapping[str, Mapping] | None = None
) -> list[list[str]]:
    """[config, images/s, AI (source), analytic ÷ ncu FLOPs, ncu capture] per roofline
    point; ``captures`` maps a point's ncu file stem to its parsed ncu JSON."""
    rows = []
    for p in points:
        executed, useful = p.get("executed_flops"), p.get("useful_flops")
        ok = all(isinstance(x, int | float) and math.isfinite(x) for x in (executed, useful))
        ratio = f"{useful / executed:.3f}" if ok and executed > 0 else "n/a (no ncu count)"
        config = f"{p['env']} {p['model']} {p['precision']} bs{int(p['batch_size'])}"
        ai = p.get("ai")
        ai_text = f"{ai:.1f} ({p.get('ai_source')})" if isinstance(ai, int | float) else "n/a"
        stem = config_key(p["env"], p["model"], p["precision"], p["batch_size"])
        capture = capture_cell((captures or {}).get(stem))
        rows.append([config, f"{p['images_per_s']:.1f}", ai_text, ratio, capture])
    return rows


def _reading(candidate: Mapping, key: str, unit: str) -> str:
    value = candidate.get(key)
    if isinstance(value, int | float):
        return f"{value:.0f} {unit}"
    if "telemetry" in candidate:
        return f"n/a: {(candidate.get('telemetry') or {}).get('reason') or 'no NVML reading'}"
    return "not recorded"


def sweep_rows(ceilings: Mapping, where: str = "ceilings.json") -> list[list[str]]:
    """[precision, GEMM MxNxK, library, rate, SM clock, power, roof] per GEMM candidate
    of each measured compute roof, fastest first: what each GEMM of the sweep reached
    and the clock and power it ran at (``not recorded`` in files from before the sweep)."""
    rows = []
    for roof in _roofs(ceilings, where):
        if roof.get("kind") != "compute" or roof.get("source") != "measured":
            continue
        gemms = [c for c in roof.get("candidates") or [] if c.get("kind") == "gemm"]
        for c in sorted(gemms, key=lambda c: -(c.get("flops_best") or 0.0)):
            params = c.get("params") or {}
            n = params.get("n")
            m, k = params.get("m", n), params.get("k", n)
            if c.get("status") == "unavailable":
                rate = f"unavailable: {c.get('reason')}"
            elif not isinstance(c.get("flops_best"), int | float):
                rate = f"error: {c.get('error')}"
            else:
                rate = _fmt_rate(float(c["flops_best"]), "FLOP/s")
            rows.append(
                [
                    str(roof.get("precision")),
                    f"{m}x{n}x{k}",
                    str(c.get("library") or "not recorded"),
                    rate,
                    _reading(c, "sm_clock_mhz", "MHz"),
                    _reading(c, "power_w", "W"),
                    "roof" if c.get("set_roof") else "",
                ]
            )
    return rows


def kernels_above_rows(
    points: Sequence[Mapping], captures: Mapping[str, Mapping], ceilings: Mapping
) -> list[list[str]]:
    """[config, kernel, measured roof, kernel rate, above by] per captured kernel that
    beats its class's measured roof; one ``none`` row per capture whose kernels do not."""
    rows = []
    for p in points:
        stem = config_key(p["env"], p["model"], p["precision"], p["batch_size"])
        capture = captures.get(stem)
        if not capture or capture.get("status", "ok") != "ok" or not capture.get("kernels"):
            continue
        config = f"{p['env']} {p['model']} {p['precision']} bs{int(p['batch_size'])}"
        above = kernels_above_measured_roof(capture, ceilings, str(p["precision"]))
        if not above:
            rows.append([config, "none", "", "", ""])
        for kernel in above:
            rows.append(
                [
                    config,
                    f"{kernel['id']}: {kernel['short_name']}",
                    f"{kernel['roof_precision']} {_fmt_rate(kernel['roof'], 'FLOP/s')}",
                    _fmt_rate(kernel["flops"], "FLOP/s"),
                    f"{kernel['above_by']:.1%}",
                ]
            )
    return rows


def energy_lines(ceilings: Mapping) -> list[str]:
    """The ceilings' energy: each metered kernel (joules, mean power) and the fitted
    costs, or why there are none; nothing for a ceilings file from before energy."""
    energy = ceilings.get("energy")
    if not isinstance(energy, Mapping):
        return []
    if not energy.get("available"):
        return [f"Energy not recorded: {energy.get('reason')}"]
    rows = [
        [
            str(k.get("kind")),
            str(k.get("precision") or "–"),
            fmt_gflop(k.get("flop")),
            fmt_bytes(k.get("bytes")),
            f"{k['seconds']:.2f} s" if k.get("seconds") is not None else "–",
            f"{k['joules']:.1f} J" if k.get("joules") is not None else str(k.get("reason")),
            f"{k['mean_power_w']:.0f} W" if k.get("mean_power_w") is not None else "–",
        ]
        for k in energy.get("kernels") or []
    ]
    lines = [
        markdown_table(["kernel", "precision", "work", "bytes", "window", "energy", "power"], rows)
    ]
    costs = energy.get("costs")
    if isinstance(costs, Mapping):
        per_flop = ", ".join(f"{p} {v:.3g}" for p, v in sorted(costs["pj_per_flop"].items()))
        lines.append(
            f"Fitted ({energy.get('source')}): pJ/FLOP {per_flop}; {costs['pj_per_byte']:.3g} "
            f"pJ/B; static {costs['static_power_w']:.0f} W; worst residual "
            f"{costs['max_residual_pct']:.1f}%"
        )
    else:
        lines.append(f"No costs fitted: {energy.get('costs_reason')}")
    return lines


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def summary_markdown(
    env: str,
    device: str,
    ceilings: Mapping,
    selftest: Mapping | None,
    points: Sequence[Mapping],
    captures: Mapping[str, Mapping] | None = None,
) -> str:
    """The whole summary under one heading: the roofs, the self-test and the points, then
    the GEMM sweep and the kernels above their measured roof where the files hold them."""
    sweep = sweep_rows(ceilings)
    above = kernels_above_rows(points, captures or {}, ceilings)
    extra = []
    if sweep:
        extra += [
            "## GEMM sweep: every candidate of the measured roofs, with its clock and power",
            markdown_table(
                ["precision", "GEMM MxNxK", "library", "rate", "SM clock", "power", "set"],
                sweep,
            ),
        ]
    energy = energy_lines(ceilings)
    if energy:
        extra += ["## Energy: the ceilings' metered kernels and the costs fitted on them", *energy]
    if above:
        extra += [
            "## Kernels above their measured roof (that roof is too low)",
            markdown_table(
                ["config", "kernel", "measured roof", "kernel rate (ncu time)", "above by"],
                above,
            ),
        ]
    return "\n\n".join(
        [
            f"# gpu-check: env {env} on {device}",
            "## Ceilings: measured against datasheet",
            markdown_table(
                ["roof", "measured", "datasheet", "measured / datasheet"], roof_rows(ceilings)
            ),
            "## Counter self-test (known GEMM per precision, known copy)",
            markdown_table(["precision", "verdict", "why"], selftest_rows(selftest)),
            "## Study points",
            markdown_table(
                ["config", "images/s", "AI (source)", "analytic ÷ ncu FLOPs", "ncu capture"],
                point_rows(points, captures),
            ),
            *extra,
        ]
    )
