"""Report sections: the study's numbers in, self-contained HTML pages out.

Pure logic: no file I/O, no Snakemake. ``write_report_sections.py`` reads the
files and writes what :func:`all_sections` returns.

Inputs (see docs/contracts.md):

- ``config``: the study config (``envs``, ``study``), as loaded from YAML.
- ``metrics``: ``results/metrics.csv`` as a DataFrame, one row per run.
- ``points``: ``results/roofline_points.csv`` as a DataFrame.
- ``complexity``: the complexity JSONs (a list of dicts, or a dict of them).
- ``ceilings``: ``{env: ceilings JSON}`` (or a list of dicts with ``env``).
- ``env_infos``: ``{env: env_info JSON}`` (or a list of dicts with ``env``).
- ``expected_runs``: optional list of run ids, or of dicts with ``run_id``
  (and ``env`` ...). Without it the expected matrix is derived from the config.
- ``runs``: optional run JSONs (``step_time_s.all``): the per-run step-time
  distribution of the measurement section. Without them it uses metrics.csv.

``config["report"]["baseline_env"]`` names the env that speedups are computed
against; by default the first configured env with successful runs.

Every string that comes from data is escaped with :func:`html.escape`. Failed
runs never enter throughput or roofline tables: they are listed as failures.
"""

from __future__ import annotations

import html
import json
import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dnnroofline import env_compare, roofline
from dnnroofline.aggregate import METRICS_COLUMNS, POINTS_COLUMNS
from dnnroofline.errors import InputError

SECTION_FILES = (
    "design.html",
    "complexity.html",
    "measurement.html",
    "roofline.html",
    "analysis.html",
    "reproducibility.html",
)

PRECISIONS = ("fp32", "tf32", "amp", "bf16")

# The ledgers' columns are defined once, where they are written.
METRIC_COLUMNS = tuple(METRICS_COLUMNS)
METRIC_TEXT = ("run_id", "env", "model", "precision", "status", "message", "device")

POINT_COLUMNS = tuple(POINTS_COLUMNS)
POINT_TEXT = ("env", "model", "precision", "ai_source", "roof_source", "bound", "ai_note")
BOUNDS = ("memory", "compute", "inconclusive")
#: The report's one sentence on the AI range (the bars through the points).
AI_RANGE_SENTENCE = (
    "The horizontal bar through a point is its analytic AI range: from FLOPs / a per-layer "
    "traffic model (each layer reads its inputs and weights and writes its outputs, backward "
    "reads the saved input and output gradient and writes the gradients; tensors that fit in "
    "the last-level cache counted once) up to FLOPs / minimum DRAM bytes, where an analytic "
    "point is plotted; when the range straddles the ridge the bound is <em>inconclusive</em>."
)

#: A configuration whose per-step CV (or CV of images/s over repeats) exceeds
#: this is flagged as noisy.
NOISY_CV = 0.05
#: Below this share of its roof, a point is limited by neither roof: overheads.
LOW_EFFICIENCY = 0.30
#: Close to its roof above this share.
HIGH_EFFICIENCY = 0.70
#: A data-wait share of the step above this is worth fixing.
HIGH_DATA_WAIT = 0.10

GROUP = ["env", "model", "precision", "batch_size"]

# --------------------------------------------------------------------------- formatting


class Raw(str):
    """Markup that is already safe: table cells of this type are not escaped."""


def esc(value: Any) -> str:
    """Escape anything for HTML text and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def _isnum(x: Any) -> bool:
    if x is None or isinstance(x, bool):
        return False
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _missing(x: Any) -> bool:
    if x is None:
        return True
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def sig(x: Any, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits, with thousands separators; '–' if missing."""
    if not _isnum(x):
        return "–"
    x = float(x)
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def fmt_flops_rate(x: Any) -> str:
    """FLOP/s in GFLOP/s."""
    return "–" if not _isnum(x) else f"{sig(float(x) / 1e9)} GFLOP/s"


def fmt_gflop(x: Any) -> str:
    """A FLOP count in GFLOP."""
    return "–" if not _isnum(x) else f"{sig(float(x) / 1e9)} GFLOP"


_BYTE_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def fmt_bytes(x: Any) -> str:
    """Bytes with decimal prefixes (1 MB = 10^6 B)."""
    if not _isnum(x):
        return "–"
    x = float(x)
    for scale, unit in _BYTE_UNITS:
        if abs(x) >= scale:
            return f"{sig(x / scale)} {unit}"
    return f"{sig(x)} B"


def fmt_bandwidth(x: Any) -> str:
    """Bytes/s in GB/s (decimal)."""
    return "–" if not _isnum(x) else f"{sig(float(x) / 1e9)} GB/s"


def fmt_time(x: Any) -> str:
    """Seconds as ms (µs below 1 ms, s above 10 s)."""
    if not _isnum(x):
        return "–"
    x = float(x)
    if abs(x) >= 10:
        return f"{sig(x)} s"
    if abs(x) >= 1e-3 or x == 0:
        return f"{sig(x * 1e3)} ms"
    return f"{sig(x * 1e6)} µs"


def fmt_pct(x: Any, decimals: int = 1) -> str:
    """A fraction as a percentage."""
    return "–" if not _isnum(x) else f"{float(x) * 100:.{decimals}f}%"


def fmt_ai(x: Any) -> str:
    return "–" if not _isnum(x) else f"{sig(x)} FLOP/B"


def fmt_ips(x: Any) -> str:
    return "–" if not _isnum(x) else f"{sig(x)} img/s"


def fmt_ratio(x: Any) -> str:
    return "–" if not _isnum(x) else f"{float(x):.2f}×"


def fmt_count(x: Any) -> str:
    """A count with M/k suffix (parameters)."""
    if not _isnum(x):
        return "–"
    x = float(x)
    if abs(x) >= 1e9:
        return f"{sig(x / 1e9)} G"
    if abs(x) >= 1e6:
        return f"{sig(x / 1e6)} M"
    if abs(x) >= 1e3:
        return f"{sig(x / 1e3)} k"
    return sig(x)


def fmt_batches(batches: Iterable[Any]) -> str:
    vals = sorted({int(b) for b in batches if _isnum(b)})
    if not vals:
        return "–"
    if len(vals) == 1:
        return str(vals[0])
    return f"{vals[0]}–{vals[-1]}"


def _join(items: Sequence[str], last: str = "and") -> str:
    items = list(items)
    if not items:
        return ""
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + f" {last} " + items[-1]


def _cell(value: Any) -> str:
    if isinstance(value, Raw):
        return value
    return esc(value)


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    num_cols: Iterable[int] = (),
    caption: str | None = None,
    row_classes: Sequence[str | None] | None = None,
) -> str:
    """An HTML table; cells are escaped unless they are :class:`Raw`."""
    num = set(num_cols)
    rows = list(rows)
    out = ["<table>"]
    if caption:
        out.append(f"<caption>{_cell(caption)}</caption>")
    head = "".join(
        f'<th scope="col"{" class=num" if i in num else ""}>{_cell(h)}</th>'
        for i, h in enumerate(headers)
    )
    out.append(f"<thead><tr>{head}</tr></thead><tbody>")
    for r, row in enumerate(rows):
        cls = row_classes[r] if row_classes and r < len(row_classes) else None
        tr = f'<tr class="{esc(cls)}">' if cls else "<tr>"
        cells = "".join(
            f"<td{' class=num' if i in num else ''}>{_cell(v)}</td>" for i, v in enumerate(row)
        )
        out.append(f"{tr}{cells}</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _code(text: str) -> Raw:
    return Raw(f"<code>{esc(text)}</code>")


def _pre(lines: Iterable[str]) -> str:
    return "<pre><code>" + "\n".join(esc(line) for line in lines) + "</code></pre>"


def _ul(items: Iterable[str]) -> str:
    """A list of already-safe HTML items."""
    items = list(items)
    if not items:
        return ""
    return "<ul>\n" + "\n".join(f"<li>{i}</li>" for i in items) + "\n</ul>"


_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;font-size:14px;
line-height:1.45;color:#1d1d1f;margin:1em;max-width:75em}
h1{font-size:1.5em;margin:.2em 0 .6em}h2{font-size:1.25em;margin-top:1.4em;
border-bottom:1px solid #ddd}h3{font-size:1.05em;margin-top:1.1em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:13px}
caption{text-align:left;font-weight:600;padding:.3em 0}
th,td{border:1px solid #d0d0d0;padding:.25em .55em;vertical-align:top;text-align:left}
th{background:#f2f2f2}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td.num{white-space:nowrap}
tr.flag td{background:#fde2e2}tr.noisy td{background:#fff6d6}tr.failed td{background:#fdecec}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto;white-space:pre}
.alert{border-left:4px solid #c0392b;background:#fdecea;padding:.5em .8em;margin:.6em 0}
.warn{border-left:4px solid #d4a017;background:#fff8e1;padding:.5em .8em;margin:.6em 0}
.note{color:#555}.bad{color:#b00020;font-weight:700}.ok{color:#1b7f3b}
svg.box{vertical-align:middle;display:block}
"""


def page(title: str, body: str) -> str:
    """A self-contained HTML page (the report shows each in its own pane)."""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{esc(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{esc(title)}</h1>\n{body}\n</body>\n</html>\n"
    )


# --------------------------------------------------------------------------- inputs


def _text_or_none(v: Any) -> str | None:
    if _missing(v):
        return None
    return str(v)


def _to_bool(v: Any) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if _missing(v):
        return False
    if isinstance(v, (int, float, np.integer, np.floating)):
        return bool(v)
    return str(v).strip().lower() in ("true", "1", "yes", "y", "t")


def prepare_frame(df: pd.DataFrame | None, columns: Sequence[str], text: Sequence[str]):
    """Copy with every contract column present; text as str/None, the rest numeric."""
    out = pd.DataFrame(columns=list(columns)) if df is None else df.copy()
    for c in columns:
        if c not in out.columns:
            out[c] = np.nan
    for c in out.columns:
        if c in text:
            out[c] = pd.Series([_text_or_none(v) for v in out[c]], index=out.index, dtype=object)
        elif c in columns and c not in ("above_roof",):
            out[c] = pd.to_numeric(out[c], errors="coerce")
    return out.reset_index(drop=True)


def prepare_metrics(metrics: pd.DataFrame | None) -> pd.DataFrame:
    df = prepare_frame(metrics, METRIC_COLUMNS, METRIC_TEXT)
    df["status"] = [(s or "unknown").strip().lower() for s in df["status"]]
    return df


def ok_runs(metrics: pd.DataFrame) -> pd.DataFrame:
    """Runs that count: status ok and a positive throughput."""
    m = prepare_metrics(metrics)
    return m[(m["status"] == "ok") & (m["images_per_s"] > 0)]


def failed_runs(metrics: pd.DataFrame) -> pd.DataFrame:
    """Runs that did not produce a timing: status other than ok, or ok without timings."""
    m = prepare_metrics(metrics)
    return m[(m["status"] != "ok") | ~(m["images_per_s"] > 0)]


def prepare_points(points: pd.DataFrame | None) -> pd.DataFrame:
    """Valid roofline points, with ``eff`` (attained/roof), ``bound_`` and ``above``."""
    df = prepare_frame(points, POINT_COLUMNS, POINT_TEXT)
    if df.empty:
        for c in ("eff", "bound_", "above", "gap"):
            df[c] = pd.Series(dtype=object)
        return df
    # a point needs at least one ok run and an attained rate; failed runs never plot
    keep = (df["attained_flops"] > 0) & ~(df["runs_ok"] <= 0)
    df = df[keep].reset_index(drop=True)
    effs, bounds, aboves = [], [], []
    for _, r in df.iterrows():
        att, roof = r["attained_flops"], r["roof_flops"]
        eff = att / roof if _isnum(att) and _isnum(roof) and roof > 0 else r["efficiency"]
        effs.append(float(eff) if _isnum(eff) else math.nan)
        b = (r["bound"] or "").strip().lower()
        if b not in BOUNDS and _isnum(r["ai"]) and _isnum(r["ridge_ai"]):
            b = "memory" if r["ai"] < r["ridge_ai"] else "compute"
        bounds.append(b if b in BOUNDS else None)
        above = _to_bool(r["above_roof"]) or (_isnum(eff) and eff > 1.0 + 1e-9)
        aboves.append(above)
    df["eff"] = effs
    df["bound_"] = pd.Series(bounds, dtype=object)
    df["above"] = aboves
    df["gap"] = df["roof_flops"] - df["attained_flops"]
    return df.sort_values(GROUP, kind="stable").reset_index(drop=True)


def _keyed(objs: Any, key: str = "env") -> dict[str, dict]:
    """``{env: obj}`` from a dict of them, or a list of dicts carrying ``env``."""
    if objs is None:
        return {}
    if isinstance(objs, Mapping):
        if key in objs and not isinstance(objs.get(key), Mapping):
            return {str(objs[key]): dict(objs)}
        return {str(k): dict(v) for k, v in objs.items() if isinstance(v, Mapping)}
    out: dict[str, dict] = {}
    for o in objs:
        if isinstance(o, Mapping) and o.get(key) is not None:
            out[str(o[key])] = dict(o)
    return out


def complexity_index(complexity: Any) -> dict[tuple[str, int], dict]:
    """``{(arch, batch_size): complexity JSON}``."""
    if complexity is None:
        return {}
    items = complexity.values() if isinstance(complexity, Mapping) else complexity
    if isinstance(complexity, Mapping) and "arch" in complexity:
        items = [complexity]
    out = {}
    for c in items:
        if isinstance(c, Mapping) and c.get("arch") is not None and _isnum(c.get("batch_size")):
            out[(str(c["arch"]), int(c["batch_size"]))] = dict(c)
    return out


def _study(config: Mapping | None) -> dict:
    return dict((config or {}).get("study") or {})


def _envs(config: Mapping | None) -> dict[str, dict]:
    envs = (config or {}).get("envs") or {}
    return {str(k): dict(v or {}) for k, v in envs.items()}


def env_matrix(config: Mapping | None, env: str) -> dict:
    """The env's resolved matrix: models, precisions, batch sizes, runs, threads, device."""
    study = _study(config)
    e = _envs(config).get(env, {})
    return {
        "models": list(e.get("models") or study.get("models") or []),
        "precisions": list(e.get("precisions") or study.get("precisions") or []),
        "batch_sizes": [int(b) for b in (e.get("batch_sizes") or study.get("batch_sizes") or [])],
        "runs": int(study.get("runs") or 1),
        "threads": e.get("threads"),
        "device": e.get("device", "auto"),
    }


def make_run_id(env: str, model: str, precision: str, batch: int, run: int) -> str:
    return f"{env}_{model}_{precision}_bs{int(batch)}_run{int(run)}"


def parse_run_id(run_id: str, envs: Iterable[str], models: Iterable[str]) -> dict | None:
    """Split ``{env}_{model}_{precision}_bs{batch}_run{N}`` with the configured names."""
    alt = lambda names: "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))  # noqa: E731
    envs, models = list(envs), list(models)
    if not envs or not models:
        return None
    pat = (
        rf"^(?P<env>{alt(envs)})_(?P<model>{alt(models)})_(?P<precision>[A-Za-z0-9]+)"
        r"_bs(?P<batch_size>\d+)_run(?P<run>\d+)$"
    )
    m = re.match(pat, run_id)
    if not m:
        return None
    d = m.groupdict()
    d["batch_size"], d["run"] = int(d["batch_size"]), int(d["run"])
    d["run_id"] = run_id
    return d


def expected_run_table(
    config: Mapping | None, expected_runs: Any = None, metrics: pd.DataFrame | None = None
) -> list[dict]:
    """Expected runs as dicts ``{run_id, env, model, precision, batch_size, run}``.

    From ``expected_runs`` where given (ids or dicts), else from the config's
    matrix, numbering repeats 1..N (0..N-1 if the ledger shows a ``run0``).
    """
    envs = _envs(config)
    all_models = set(_study(config).get("models") or [])
    for e in envs.values():
        all_models.update(e.get("models") or [])
    if metrics is not None and not metrics.empty:
        all_models.update(m for m in metrics["model"] if m)
        env_names = set(envs) | {e for e in metrics["env"] if e}
    else:
        env_names = set(envs)
    if expected_runs is not None:
        out = []
        for item in expected_runs:
            if isinstance(item, Mapping):
                rid = str(item.get("run_id") or "")
                d = parse_run_id(rid, env_names | {str(item.get("env", ""))}, all_models) or {}
                d = {**d, **{k: v for k, v in item.items() if v is not None}}
                d["run_id"] = rid
            else:
                rid = str(item)
                d = parse_run_id(rid, env_names, all_models) or {"run_id": rid}
            out.append(d)
        return out
    base = 1
    if metrics is not None and not metrics.empty and (metrics["run"] == 0).any():
        base = 0
    out = []
    for env in envs:
        mx = env_matrix(config, env)
        for model in mx["models"]:
            for prec in mx["precisions"]:
                for b in mx["batch_sizes"]:
                    for n in range(base, base + mx["runs"]):
                        out.append(
                            {
                                "run_id": make_run_id(env, model, prec, b, n),
                                "env": env,
                                "model": model,
                                "precision": prec,
                                "batch_size": b,
                                "run": n,
                            }
                        )
    return out


def missing_runs(expected: list[dict], metrics: pd.DataFrame) -> list[dict]:
    present = {r for r in metrics["run_id"] if r}
    return [e for e in expected if e["run_id"] not in present]


def throughput_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per (env, model, precision, batch) over ok runs only: images/s and step-time spread."""
    m = ok_runs(metrics)
    cols = GROUP + [
        "n_ok",
        "ips_median",
        "ips_min",
        "ips_max",
        "step_median",
        "step_p5",
        "step_p95",
        "step_cv_max",
        "repeat_cv",
        "data_wait_share",
        "noisy",
    ]
    if m.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, g in m.groupby(GROUP, sort=True, dropna=False):
        ips = g["images_per_s"].astype(float)
        repeat_cv = float(ips.std(ddof=1) / ips.mean()) if len(ips) > 1 else math.nan
        step_cv = g["step_cv"].max()
        share = (g["data_wait_median_s"] / g["step_median_s"]).median()
        noisy = (_isnum(step_cv) and step_cv > NOISY_CV) or (
            _isnum(repeat_cv) and repeat_cv > NOISY_CV
        )
        rows.append(
            [
                *key,
                len(g),
                float(ips.median()),
                float(ips.min()),
                float(ips.max()),
                g["step_median_s"].median(),
                g["step_p5_s"].min(),
                g["step_p95_s"].max(),
                step_cv,
                repeat_cv,
                share,
                bool(noisy),
            ]
        )
    return pd.DataFrame(rows, columns=cols)


def _roofs(ceil: Mapping | None) -> list[roofline.Roof]:
    """The valid roofs of a ceilings JSON (dnnroofline.roofline rules; bad entries skipped).

    The roofline stage already refused invalid ceilings; the report still renders
    whatever is valid, so one bad entry never hides the rest.
    """
    entries = (ceil or {}).get("roofs") or []
    try:
        return roofline.parse_roofs({"roofs": list(entries)})
    except InputError:
        out = []
        for e in entries:
            try:
                out += roofline.parse_roofs({"roofs": [e]})
            except InputError:
                continue
        return out


def _pick_roof(
    roofs: list[roofline.Roof],
    kind: str,
    precision: str | None,
    sources: Sequence[str] = roofline.ROOF_SOURCES,
) -> roofline.Roof | None:
    """The roof the roofline stage uses (:func:`roofline.select_roof`), from ``sources`` only."""
    return roofline.select_roof([r for r in roofs if r.source in sources], kind, precision)


def ridge_for(env: str, precision: str, points: pd.DataFrame, ceilings: Mapping) -> dict | None:
    """The ridge the points used for (env, precision), else from ceilings (measured first)."""
    p = points[(points["env"] == env) & (points["precision"] == precision)] if len(points) else []
    if len(p) and p["ridge_ai"].notna().any():
        src = next((s for s in p["roof_source"] if s), None)
        return {
            "ridge": float(p["ridge_ai"].median()),
            "peak": float(p["peak_flops"].median()),
            "bw": float(p["peak_bandwidth"].median()),
            "source": src or "as in roofline_points.csv",
        }
    roofs = _roofs(ceilings.get(env))
    c = _pick_roof(roofs, "compute", precision)
    m = _pick_roof(roofs, "memory", None)
    if not c or not m:
        return None
    src = c.source if c.source == m.source else f"compute={c.source};memory={m.source}"
    return {
        "ridge": c.value / m.value,
        "peak": c.value,
        "bw": m.value,
        "source": src,
    }


def analytic_ai(cx: Mapping, precision: str | None = None) -> float:
    """Training FLOPs per step / analytic minimum DRAM bytes per step."""
    flops = (cx.get("flops") or {}).get("train_step")
    by = (cx.get("by_precision") or {}).get(precision or "fp32") or {}
    dram = by.get("min_dram_bytes_per_step") or cx.get("min_dram_bytes_per_step")
    if _isnum(flops) and _isnum(dram) and float(dram) > 0:
        return float(flops) / float(dram)
    return math.nan


def _depthwise_share(cx: Mapping) -> float:
    by = (cx.get("flops") or {}).get("by_layer_type") or {}
    total = sum(_layer_total(v) for v in by.values())
    dw = sum(_layer_total(v) for k, v in by.items() if "depthwise" in str(k).lower())
    return dw / total if total > 0 else 0.0


def _layer_total(v: Any) -> float:
    if isinstance(v, Mapping):
        return sum(float(x) for x in (v.get("forward"), v.get("backward")) if _isnum(x))
    return float(v) if _isnum(v) else 0.0


def _env_device(env: str, config: Mapping | None, env_infos: Mapping) -> str:
    info = env_infos.get(env) or {}
    dev = info.get("device") or env_matrix(config, env)["device"] or "auto"
    return str(dev)


def _env_threads(env: str, config: Mapping | None, env_infos: Mapping, metrics=None):
    t = env_matrix(config, env)["threads"]
    if t is None and metrics is not None and len(metrics):
        tt = metrics.loc[metrics["env"] == env, "threads"].dropna()
        if len(tt):
            t = int(tt.iloc[0])
    return t


def _env_hw(env: str, env_infos: Mapping, ceilings: Mapping | None = None) -> str:
    info = env_infos.get(env) or {}
    gpus = info.get("gpus") or []
    if gpus:
        return ", ".join(str(g.get("name")) for g in gpus if isinstance(g, Mapping))
    if info.get("cpu_model"):
        return str(info["cpu_model"])
    return str(((ceilings or {}).get(env) or {}).get("device_name") or "unknown hardware")


def _label(r: Mapping) -> str:
    return f"{r['env']} · {r['model']} · {r['precision']} · bs {int(r['batch_size'])}"


# --------------------------------------------------------------------------- design


def design_section(
    config: Mapping,
    env_infos: Mapping | Sequence | None,
    metrics: pd.DataFrame | None,
    points: pd.DataFrame | None,
    complexity: Any = None,
    ceilings: Mapping | Sequence | None = None,
    expected_runs: Any = None,
) -> str:
    """Objective, hypothesis and verdict, envs, the run matrix and its completion."""
    env_infos = _keyed(env_infos)
    ceilings = _keyed(ceilings)
    m = prepare_metrics(metrics)
    pts = prepare_points(points)
    cx = complexity_index(complexity)
    study = _study(config)
    envs = list(_envs(config)) or sorted({e for e in m["env"] if e})
    models = list(study.get("models") or [])
    expected = expected_run_table(config, expected_runs, m)
    miss = missing_runs(expected, m)
    expected_ids = {e["run_id"] for e in expected}
    ok = ok_runs(m)
    failed = failed_runs(m)
    n_ok = int(ok["run_id"].isin(expected_ids).sum()) if expected else len(ok)
    n_fail = int(failed["run_id"].isin(expected_ids).sum()) if expected else len(failed)
    extra = sorted({r for r in m["run_id"] if r} - expected_ids) if expected else []

    parts = ["<h2>Objective</h2>"]
    precs = sorted({p for e in envs for p in env_matrix(config, e)["precisions"]})
    batches = sorted({b for e in envs for b in env_matrix(config, e)["batch_sizes"]})
    parts.append(
        "<p>Find where one training step (forward, backward and SGD update) of "
        f"<strong>{esc(_join(models))}</strong> sits on the roofline of "
        f"{'each of ' if len(envs) > 1 else ''}<strong>{esc(_join(envs))}</strong> in "
        f"{esc(_join(precs))} at batch sizes {esc(_join([str(b) for b in batches]))}, "
        "what bounds each point (memory bandwidth, compute peak, or neither), and how far it "
        "is from its roof.</p>"
    )

    parts.append("<h2>Hypothesis and verdict</h2>")
    parts.append(_hypothesis_html(config, envs, env_infos, m, pts, cx, ceilings))

    parts.append("<h2>Environments</h2>")
    rows = []
    for env in envs:
        info = env_infos.get(env) or {}
        mx = env_matrix(config, env)
        threads = _env_threads(env, config, env_infos, m)
        cores = info.get("cpu_cores_physical")
        opts = env_compare.env_options(config, env)
        nproc = f"{opts['nproc']} processes × " if opts["nproc"] > 1 else ""
        rows.append(
            [
                env,
                f"{mx['device']}" + (f" → {info['device']}" if info.get("device") else ""),
                _join(
                    [str(g.get("name")) for g in info.get("gpus") or [] if isinstance(g, Mapping)]
                )
                or "–",
                info.get("cpu_model")
                or (
                    (ceilings.get(env) or {}).get("device_name")
                    if _env_device(env, config, env_infos) == "cpu"
                    else None
                )
                or "–",
                nproc
                + ("all cores" if threads is None else str(threads))
                + (f" of {cores} physical" if cores else ""),
                env_compare.describe(opts),
                _join(mx["precisions"]) or "–",
                ", ".join(str(b) for b in mx["batch_sizes"]) or "–",
                (
                    "on this machine"
                    if _measured_here(env, {}, config, env_infos)
                    else "another machine (results copied in)"
                    if info
                    else "another machine (no results yet)"
                ),
            ]
        )
    parts.append(
        table(
            [
                "env",
                "device (config → detected)",
                "GPU",
                "CPU",
                "threads",
                "how the step runs",
                "precisions",
                "batch sizes",
                "measured on",
            ],
            rows,
        )
    )

    parts.append("<h2>Study</h2>")
    data = study.get("data", "synthetic")
    data_txt = (
        "synthetic random tensors (no I/O; measures compute only)"
        if str(data) == "synthetic"
        else f"ImageFolder at {data}"
    )
    srows = [
        ["models", _join(models) or "–"],
        ["precisions", _join(precs) or "–"],
        ["batch sizes", ", ".join(str(b) for b in batches) or "–"],
        ["repeats per configuration", study.get("runs", "–")],
        ["warm-up iterations (untimed)", study.get("warmup_iters", "–")],
        ["timed iterations per run", study.get("iters", "–")],
        ["image size", f"{study.get('image_size', '–')} px (3 channels)"],
        ["data", data_txt],
        ["optimizer", "SGD, momentum 0.9, weight decay 1e-4"],
    ]
    for k in ("channels_last", "compile", "workers"):
        if k in study:
            srows.append([k.replace("_", " "), study[k]])
    parts.append(table(["setting", "value"], srows))

    parts.append("<h2>Run matrix</h2>")
    parts.append(
        f"<p>{len(expected)} runs expected "
        f"({len(envs)} env{'s' if len(envs) != 1 else ''} × models × precisions × batch sizes "
        f"× {study.get('runs', '?')} repeats): <span class=ok>{n_ok} ok</span>, "
        f"<span class={'bad' if n_fail else 'ok'}>{n_fail} failed</span>, "
        f"<span class={'bad' if miss else 'ok'}>{len(miss)} missing</span>. "
        "Failed and missing runs are listed in the analysis section; they never enter "
        "throughput tables or roofline points.</p>"
    )
    if extra:
        parts.append(
            f"<p class=note>{len(extra)} run(s) in metrics.csv are outside the configured "
            f"matrix (kept, e.g. from an earlier config): {esc(', '.join(extra[:10]))}"
            f"{' …' if len(extra) > 10 else ''}.</p>"
        )
    rows = []
    for env in envs:
        mx = env_matrix(config, env)
        exp_e = [e for e in expected if e.get("env") == env]
        ids = {e["run_id"] for e in exp_e}
        rows.append(
            [
                env,
                len(mx["models"]),
                len(mx["precisions"]),
                len(mx["batch_sizes"]),
                mx["runs"],
                len(exp_e),
                int(ok["run_id"].isin(ids).sum()),
                int(failed["run_id"].isin(ids).sum()),
                sum(1 for e in miss if e.get("env") == env),
            ]
        )
    parts.append(
        table(
            [
                "env",
                "models",
                "precisions",
                "batches",
                "repeats",
                "runs",
                "ok",
                "failed",
                "missing",
            ],
            rows,
            num_cols=range(1, 9),
        )
    )
    return page("Experiment design", "\n".join(parts))


def _hypothesis_html(config, envs, env_infos, m, pts, cx, ceilings) -> str:
    out = []
    for env in envs:
        mx = env_matrix(config, env)
        dev = _env_device(env, config, env_infos)
        threads = _env_threads(env, config, env_infos, m)
        hw = _env_hw(env, env_infos, ceilings)
        where = f"{dev.upper() if dev in ('cpu', 'mps') else dev} ({hw}"
        if dev == "cpu" and threads is not None:
            where += f", {threads} thread{'s' if int(threads) != 1 else ''}"
        where += ")"
        for prec in mx["precisions"]:
            rg = ridge_for(env, prec, pts, ceilings)
            preds = []  # (model, ai_lo, ai_hi, bound)
            for model in mx["models"]:
                ais = [
                    analytic_ai(cx[(model, b)], prec) for b in mx["batch_sizes"] if (model, b) in cx
                ]
                ais = [a for a in ais if _isnum(a)]
                if not ais:
                    continue
                if rg:
                    n_mem = sum(a < rg["ridge"] for a in ais)
                    bound = (
                        "memory"
                        if n_mem == len(ais)
                        else "compute"
                        if n_mem == 0
                        else "mixed (crosses the ridge)"
                    )
                else:
                    bound = None
                preds.append((model, min(ais), max(ais), bound))
            bs = fmt_batches(mx["batch_sizes"])
            head = f"<h3>{esc(env)} · {esc(prec)}</h3>"
            if not preds:
                out.append(
                    head + "<p class=note>No complexity results yet: no analytic AI to "
                    "base a hypothesis on.</p>"
                )
                continue
            if not rg:
                out.append(
                    head + f"<p class=warn>No {esc(prec)} compute roof and memory roof for "
                    f"{esc(env)} in ceilings.json: the ridge point, and so the hypothesis, "
                    "cannot be stated. The roofline stage refuses to plot without them.</p>"
                )
                continue
            preds.sort(key=lambda p: -p[2])

            def _desc(p):
                model, lo, hi, _ = p
                ai = fmt_ai(lo) if sig(lo) == sig(hi) else f"{sig(lo)}–{sig(hi)} FLOP/B"
                s = f"<strong>{esc(model)}</strong> (analytic AI {esc(ai)}"
                key = next((k for k in cx if k[0] == model), None)
                dws = _depthwise_share(cx[key]) if key else 0.0
                if dws > 0:
                    s += f"; depthwise convolutions, of low AI, do {fmt_pct(dws)} of its FLOPs"
                return s + ")"

            comp = [p for p in preds if p[3] == "compute"]
            mem = [p for p in preds if p[3] == "memory"]
            mixed = [p for p in preds if p[3] not in ("compute", "memory")]
            clauses = []
            if comp:
                clauses.append(
                    f"{_join([_desc(p) for p in comp])} "
                    f"{'is' if len(comp) == 1 else 'are'} compute-bound"
                )
            if mem:
                one = len(mem) == 1
                verb = (
                    ("sits" if one else "sit") + " lower, memory-bound"
                    if comp
                    else ("is memory-bound" if one else "are memory-bound")
                )
                clauses.append(f"{'and ' if comp else ''}{_join([_desc(p) for p in mem])} {verb}")
            if mixed:
                clauses.append(f"{_join([_desc(p) for p in mixed])} cross the ridge with batch")
            order = [p[0] for p in preds]
            out.append(
                head + f"<p><strong>Hypothesis:</strong> at batch {esc(bs)} on {esc(where)}, "
                f"where the {esc(prec)} ridge point is {esc(fmt_ai(rg['ridge']))} "
                f"({esc(fmt_flops_rate(rg['peak']))} / {esc(fmt_bandwidth(rg['bw']))}, "
                f"{esc(rg['source'])}), {', '.join(clauses)}. "
                + (
                    "All share the flat compute roof, so they should attain similar GFLOP/s, "
                    "near the peak; differences then come from kernel efficiency, not AI.</p>"
                    if all(p[3] == "compute" for p in preds)
                    else f"Attained GFLOP/s should follow AI: {esc(' > '.join(order))}.</p>"
                )
            )
            out.append(_verdict_html(env, prec, preds, pts))
    if not out:
        return "<p class=note>No environments configured.</p>"
    return "\n".join(out)


def _verdict_html(env, prec, preds, pts) -> str:
    p = pts[(pts["env"] == env) & (pts["precision"] == prec)] if len(pts) else pts
    if p is None or not len(p):
        return (
            "<p><strong>Verdict:</strong> not yet: no measured points for this env and "
            "precision.</p>"
        )
    pred = {model: bound for model, _, _, bound in preds}
    held, broke = 0, []
    for _, r in p.iterrows():
        exp = pred.get(r["model"])
        if exp in ("memory", "compute"):
            if exp == r["bound_"]:
                held += 1
            else:
                broke.append(
                    f"{esc(r['model'])} bs {int(r['batch_size'])} is {esc(r['bound_'])}-bound "
                    f"(AI {esc(fmt_ai(r['ai']))}, {esc(r['ai_source'] or '?')})"
                )
    checked = held + len(broke)
    s = f"<p><strong>Verdict:</strong> the bound held for {held} of {checked} measured points"
    s += f"; it failed for {_join(broke)}." if broke else "."
    by_model = p.groupby("model")["attained_flops"].median().sort_values(ascending=False)
    measured_order = list(by_model.index)
    predicted_order = [m for m, *_ in preds if m in measured_order]
    all_compute = all(bound == "compute" for _, _, _, bound in preds)
    if len(measured_order) > 1 and all_compute:
        lo, hi = by_model.iloc[-1], by_model.iloc[0]
        spread = hi / lo if lo > 0 else math.nan
        s += (
            f" On the shared compute roof the models span {fmt_ratio(spread)} in attained "
            f"GFLOP/s ({esc(by_model.index[0])} {esc(fmt_flops_rate(hi))}, "
            f"{esc(by_model.index[-1])} {esc(fmt_flops_rate(lo))}): "
            + (
                "similar, as predicted."
                if _isnum(spread) and spread <= 1.5
                else "not similar, so kernel efficiency, not AI, separates them."
            )
        )
    elif len(measured_order) > 1:
        if measured_order == predicted_order:
            s += " The attained-GFLOP/s ranking follows AI, as predicted: "
        else:
            s += " The attained-GFLOP/s ranking does <em>not</em> follow AI: "
        s += (
            esc(" > ".join(f"{mm} ({fmt_flops_rate(by_model[mm])})" for mm in measured_order)) + "."
        )
    low = p[p["eff"] < LOW_EFFICIENCY]
    if len(low):
        names = sorted({f"{r['model']} bs {int(r['batch_size'])}" for _, r in low.iterrows()})
        s += (
            f" But {esc(_join(names))} reach{'es' if len(names) == 1 else ''} under "
            f"{fmt_pct(LOW_EFFICIENCY, 0)} of {'its' if len(names) == 1 else 'their'} roof "
            f"(lowest {fmt_pct(low['eff'].min())}): there neither roof is what limits the step; "
            "overheads do (see the analysis)."
        )
    above = p[p["above"]]
    if len(above):
        s += (
            f" <span class=bad>{len(above)} point(s) lie above the roof: check the peak or the "
            "FLOP count.</span>"
        )
    return s + "</p>"


# --------------------------------------------------------------------------- complexity


def complexity_section(complexity: Any, top_types: int = 4) -> str:
    """Table per (model, batch) of the analytic counts, and how they were counted."""
    cx = complexity_index(complexity)
    parts = [
        "<p>Counts are <strong>FLOPs, not MACs</strong>: one multiply-add is 2 FLOPs "
        "(fvcore and torchvision's “GFLOPS” count MACs, half of this). All counts are for the "
        "whole batch. The training step is forward + backward + optimizer. The backward pass is "
        "counted per layer: for convolutions and linear layers it is the gradient with respect "
        "to the input plus the gradient with respect to the weights, each as large as the "
        "forward product (about 2× forward; the first layer needs no input gradient); "
        "element-wise layers (BN, activations, pooling) are counted from their own gradient "
        "formulas. The optimizer is SGD with momentum and weight decay: 6 FLOPs per parameter. "
        "Bytes are fp32 and decimal (1 MB = 10<sup>6</sup> B). The minimum DRAM bytes per "
        "step is an analytic lower bound (weights, gradients and optimizer state read/written "
        "once, activations written in forward and read back in backward); analytic AI = "
        "train-step FLOPs / that bound, so real traffic is higher and real AI lower.</p>"
    ]
    if not cx:
        parts.append("<p class=warn>No complexity results.</p>")
        return page("Model complexity", "\n".join(parts))
    rows = []
    for (model, b), c in sorted(cx.items()):
        fl = c.get("flops") or {}
        by = fl.get("by_layer_type") or {}
        tot = sum(_layer_total(v) for v in by.values())
        tops = sorted(by.items(), key=lambda kv: -_layer_total(kv[1]))[:top_types]
        top_txt = "; ".join(
            f"{k} {fmt_pct(_layer_total(v) / tot, 0) if tot > 0 else '–'}" for k, v in tops
        )
        byt = c.get("bytes") or {}
        rows.append(
            [
                model,
                b,
                fmt_count(c.get("params")),
                fmt_gflop(fl.get("forward")),
                fmt_gflop(fl.get("backward")),
                fmt_gflop(fl.get("optimizer")),
                fmt_gflop(fl.get("train_step")),
                ratio_txt(fl.get("backward"), fl.get("forward")),
                top_txt or "–",
                fmt_bytes(byt.get("activations")),
                fmt_bytes(c.get("min_dram_bytes_per_step")),
                fmt_ai(analytic_ai(c, "fp32")),
                fmt_bytes(c.get("peak_memory_bytes")),
            ]
        )
    parts.append(
        table(
            [
                "model",
                "batch",
                "params",
                "forward",
                "backward",
                "optimizer",
                "train step",
                "bwd/fwd",
                "FLOPs by layer type (fwd+bwd share)",
                "activations",
                "min DRAM bytes / step",
                "analytic AI (fp32)",
                "est. peak memory",
            ],
            rows,
            num_cols=[1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12],
        )
    )
    # lower-precision activation traffic, where counted
    prow = []
    for (model, b), c in sorted(cx.items()):
        for prec, d in sorted((c.get("by_precision") or {}).items()):
            if not isinstance(d, Mapping):
                continue
            prow.append(
                [
                    model,
                    b,
                    prec,
                    fmt_bytes(d.get("activation_bytes")),
                    fmt_bytes(d.get("min_dram_bytes_per_step")),
                    fmt_ai(analytic_ai(c, prec)),
                    fmt_bytes(d.get("peak_memory_bytes")),
                ]
            )
    if prow:
        parts.append("<h2>By precision</h2>")
        parts.append(
            table(
                [
                    "model",
                    "batch",
                    "precision",
                    "activation bytes",
                    "min DRAM bytes / step",
                    "analytic AI",
                    "est. peak memory",
                ],
                prow,
                num_cols=[1, 3, 4, 5, 6],
            )
        )
    methods = sorted({str(c.get("method")) for c in cx.values() if c.get("method")})
    if methods:
        parts.append("<h2>Method, as recorded by complexity.py</h2>")
        parts.append(_ul(esc(x) for x in methods))
    return page("Model complexity", "\n".join(parts))


def ratio_txt(a: Any, b: Any) -> str:
    if _isnum(a) and _isnum(b) and float(b) > 0:
        return f"{float(a) / float(b):.2f}"
    return "–"


# --------------------------------------------------------------------------- measurement


def measurement_section(
    config: Mapping,
    env_infos: Mapping | Sequence | None,
    metrics: pd.DataFrame | None,
    runs: Sequence[Mapping] | None = None,
) -> str:
    """How the timing was done, then throughput per configuration (ok runs only)."""
    env_infos = _keyed(env_infos)
    m = prepare_metrics(metrics)
    study = _study(config)
    envs = list(_envs(config)) or sorted({e for e in m["env"] if e})
    devs = {env: _env_device(env, config, env_infos) for env in envs}
    thr = []
    for env in envs:
        t = _env_threads(env, config, env_infos, m)
        thr.append(f"{env}: {'all cores' if t is None else t}")
    cuda = [e for e, d in devs.items() if d == "cuda"]
    items = [
        f"{esc(study.get('warmup_iters', '?'))} warm-up iterations first, untimed: "
        "allocator growth, cuDNN/oneDNN autotuning and compilation stay out of the numbers.",
        f"Then a fixed {esc(study.get('iters', '?'))} timed training steps (forward, backward, "
        "SGD step), each timed on its own; the data wait before each step is timed apart from "
        "the compute.",
        (
            f"On CUDA ({esc(_join(cuda))}) each step is synchronized with the device "
            "(CUDA events / synchronize before reading the clock), so asynchronous kernel "
            "launches are not mistaken for finished work."
            if cuda
            else "All envs here run on the CPU/MPS; on CUDA envs each step would be "
            "synchronized with the device before the clock is read."
        ),
        "Per run: the median step time and the p5–p95 of per-step times; images/s = batch / "
        "median step time (never a mean of per-step rates). The coefficient of variation "
        "(std/mean) of step times measures noise.",
        f"{esc(study.get('runs', '?'))} independent repeats per configuration, each in a fresh "
        "process; the tables give the median over repeats with min–max.",
        "One measurement at a time per machine: timed runs never overlap each other or a "
        "profile. CPU threads per run (OMP_NUM_THREADS from the rule's threads): "
        f"{esc('; '.join(thr))}.",
        "Wall, user and sys time and max RSS are recorded per process; ncu profiles (GPU) are "
        "separate runs and only supply counts, never durations.",
    ]
    parts = ["<h2>Method</h2>", _ul(items)]
    tp = throughput_table(m)
    parts.append("<h2>Throughput (ok runs only)</h2>")
    parts.append(
        f"<p>Configurations with step-time CV or repeat-to-repeat CV of images/s above "
        f"{fmt_pct(NOISY_CV, 0)} are flagged <strong>noisy</strong>.</p>"
    )
    if tp.empty:
        parts.append("<p class=warn>No successful runs yet.</p>")
    for (env, prec), g in tp.groupby(["env", "precision"], sort=True):
        rows, classes = [], []
        for _, r in g.iterrows():
            rows.append(
                [
                    r["model"],
                    int(r["batch_size"]),
                    int(r["n_ok"]),
                    sig(r["ips_median"]),
                    f"{sig(r['ips_min'])}–{sig(r['ips_max'])}",
                    fmt_time(r["step_median"]),
                    f"{fmt_time(r['step_p5'])} / {fmt_time(r['step_p95'])}",
                    fmt_pct(r["step_cv_max"]),
                    fmt_pct(r["repeat_cv"]),
                    fmt_pct(r["data_wait_share"]),
                    Raw("<span class=bad>noisy</span>") if r["noisy"] else "ok",
                ]
            )
            classes.append("noisy" if r["noisy"] else None)
        dev = devs.get(env, "")
        parts.append(
            table(
                [
                    "model",
                    "batch",
                    "ok runs",
                    "images/s (median)",
                    "images/s min–max",
                    "step time (median)",
                    "step p5 / p95",
                    "step CV (max over repeats)",
                    "repeat CV of images/s",
                    "data wait share",
                    "noise",
                ],
                rows,
                num_cols=range(1, 10),
                caption=f"{env} ({dev}) · {prec}",
                row_classes=classes,
            )
        )
    n_fail = len(failed_runs(m))
    if n_fail:
        parts.append(
            f"<p class=note>{n_fail} failed run(s) are excluded from these tables; "
            "see the analysis section for their messages.</p>"
        )
    parts.append(gpu_clocks_html(runs))
    parts.append("<h2>Step-time distribution per run</h2>")
    parts.append(step_distribution_html(m, runs))
    return page("Measurement", "\n".join(parts))


def gpu_clocks_html(runs: Sequence[Mapping] | None) -> str:
    """GPU clocks, power and temperature of each sampled CUDA run; throttled runs flagged."""
    sampled = [r for r in runs or [] if isinstance(r.get("gpu_telemetry"), Mapping)]
    if not sampled:
        return ""

    def med(t: Mapping, key: str) -> str:
        v = t.get(key)
        return sig(v["median"]) if isinstance(v, Mapping) else "–"

    rows, classes, flagged = [], [], []
    for r in sorted(sampled, key=lambda x: str(x.get("run_id"))):
        t = r["gpu_telemetry"]
        if not t.get("available"):
            rows.append([r.get("run_id") or "?", "–", "–", "–", "–", t.get("reason") or "?"])
            classes.append(None)
            continue
        lim = t.get("limits") or {}
        sm = med(t, "sm_mhz") + (f" / {lim['sm_max_mhz']}" if lim.get("sm_max_mhz") else "")
        verdict = (
            Raw(
                f"<span class=bad>THROTTLED ({esc(', '.join(t.get('limiting_reasons') or []))}, "
                f"{esc(fmt_pct(t.get('throttled_fraction')))} of samples)</span>"
            )
            if t.get("throttled")
            else "not throttled"
        )
        if t.get("throttled"):
            flagged.append(str(r.get("run_id")))
        rows.append(
            [
                r.get("run_id") or "?",
                sm,
                med(t, "mem_mhz"),
                med(t, "power_w"),
                med(t, "temperature_c"),
                verdict,
            ]
        )
        classes.append("flag" if t.get("throttled") else None)
    head = (
        "<h2>GPU clocks while timing</h2><p>NVML sampled the timed steps of each CUDA run "
        "(medians; SM clock against its maximum). A run is <strong>throttled</strong> when a "
        "power cap, thermal or hardware slowdown held the clocks down in any sample: its "
        "images/s is lower than the GPU's unthrottled speed.</p>"
    )
    if flagged:
        head += f"<p class=warn>{len(flagged)} throttled run(s): {esc(_join(flagged))}.</p>"
    return head + table(
        ["run", "SM MHz", "memory MHz", "power W", "temperature °C", "throttle"],
        rows,
        num_cols=[1, 2, 3, 4],
        row_classes=classes,
    )


# --------------------------------------------------------------------------- roofline


def roofline_section(
    ceilings: Mapping | Sequence | None, points: pd.DataFrame | None, config: Mapping | None = None
) -> str:
    """Ceilings per env (measured vs datasheet), ridge points, and the point table."""
    ceilings = _keyed(ceilings)
    pts = prepare_points(points)
    envs = list(_envs(config)) if config else []
    for e in list(ceilings) + [e for e in pts["env"] if e]:
        if e not in envs:
            envs.append(e)
    parts = [
        "<p>Roof at a point = min(peak FLOP/s, AI × peak bandwidth); the ridge point is peak "
        "FLOP/s / peak bandwidth. A point left of its ridge is memory-bound, right of it "
        "compute-bound. Efficiency = attained FLOP/s / roof at that AI. On GPU, AI comes from "
        "ncu (FLOPs / DRAM bytes of the whole training step); on CPU and MPS there are no DRAM "
        "counters and AI is analytic (FLOPs / minimum DRAM bytes), an upper bound on the real "
        "AI. Attained FLOP/s = FLOPs per step / median step time of the uninstrumented runs. "
        "Two rates are named apart: executed FLOP/s = ncu's FLOPs / median step (all the GPU "
        "executed, padding and recomputation included) and useful FLOP/s = analytic model FLOPs "
        "/ median step (the model-FLOPs-utilisation convention). A GPU point whose counters are "
        "missing or failed the counter self-test uses the analytic AI; the flag column says "
        "why.</p>"
        f"<p>{AI_RANGE_SENTENCE}</p>"
    ]
    above_all = pts[pts["above"]] if len(pts) else pts
    if len(above_all):
        items = [
            f"{esc(_label(r))}: attained {esc(fmt_flops_rate(r['attained_flops']))} > roof "
            f"{esc(fmt_flops_rate(r['roof_flops']))} ({esc(fmt_pct(r['eff']))})"
            for _, r in above_all.iterrows()
        ]
        parts.append(
            "<div class=alert><strong>ABOVE THE ROOF — check the peak or the FLOP count.</strong>"
            " A point cannot beat its roof: the peak is too low (wrong datasheet row, wrong "
            "precision, clock or core count) or the FLOPs per step are overcounted (MACs vs "
            "FLOPs, backward double-counted)." + _ul(items) + "</div>"
        )
    parts.append("<h2>Ceilings</h2>")
    for env in envs:
        ceil = ceilings.get(env)
        parts.append(f"<h3>{esc(env)}</h3>")
        if not ceil:
            parts.append(
                f"<p class=warn>No ceilings.json for {esc(env)}: its points cannot be placed.</p>"
            )
            continue
        roofs = _roofs(ceil)
        parts.append(
            f"<p>{esc(ceil.get('device_name') or ceil.get('device') or '')}"
            f"{' · ' + esc(ceil.get('threads')) + ' threads' if ceil.get('threads') else ''}"
            "</p>"
        )
        rows = []
        keys = []
        ratios = []
        for r in roofs:
            k = (r.kind, r.precision)
            if k not in keys:
                keys.append(k)
        for kind, prec in keys:
            meas = _pick_roof(roofs, kind, prec, sources=("measured",))
            ds = _pick_roof(roofs, kind, prec, sources=("datasheet",))
            f = fmt_flops_rate if kind == "compute" else fmt_bandwidth
            pct = "–"
            if meas and ds:
                pct = fmt_pct(meas.value / ds.value)
                ratios.append((kind, prec, meas.value, ds.value))
            rows.append(
                [
                    kind,
                    prec or "(all)",
                    f(meas.value) if meas else "–",
                    (meas.note or "–") if meas else "–",
                    f(ds.value) if ds else "–",
                    (ds.note or "–") if ds else "–",
                    pct,
                ]
            )
        for kind, prec, meas_v, ds_v in ratios:
            what = f"{kind} roof" + (f" ({prec})" if prec else "")
            r = meas_v / ds_v
            if r < 0.5:
                parts.append(
                    f"<p class=warn>The measured {esc(what)} is only {esc(fmt_pct(r))} of the "
                    "datasheet: the microbenchmark may be too small or too short (a quick "
                    "mode, cache-resident arrays), or the datasheet row may not match this "
                    "machine. Efficiencies against the measured roof read high.</p>"
                )
            elif r > 1.05:
                parts.append(
                    f"<p class=warn>The measured {esc(what)} exceeds the datasheet "
                    f"({esc(fmt_pct(r))}): the datasheet row is wrong for this machine, or the "
                    "benchmark counts bytes or FLOPs it does not do (cache-resident data).</p>"
                )
        parts.append(
            table(
                [
                    "roof",
                    "precision",
                    "measured",
                    "method",
                    "datasheet",
                    "citation",
                    "measured / datasheet",
                ],
                rows,
                num_cols=[2, 4, 6],
            )
        )
        # ridge points, per precision and source
        rrows = []
        for prec in sorted({p for k, p in keys if k == "compute" and p}):
            for src in ("measured", "datasheet"):
                c = _pick_roof(roofs, "compute", prec, sources=(src,))
                mm = _pick_roof(roofs, "memory", None, sources=(src,))
                if c and mm:
                    rrows.append([prec, src, fmt_ai(c.value / mm.value)])
        if rrows:
            parts.append(table(["precision", "roofs", "ridge point"], rrows, num_cols=[2]))
    parts.append("<h2>Points</h2>")
    if pts.empty:
        parts.append("<p class=warn>No roofline points yet (no successful runs).</p>")
    for env, g in pts.groupby("env", sort=True):
        rows, classes = [], []
        for _, r in g.iterrows():
            rows.append(
                [
                    r["model"],
                    r["precision"],
                    int(r["batch_size"]),
                    fmt_ai(r["ai"]),
                    r["ai_source"] or "–",
                    fmt_ai(r["ridge_ai"]),
                    sig(r["attained_flops"] / 1e9) if _isnum(r["attained_flops"]) else "–",
                    sig(r["executed_flops"] / 1e9) if _isnum(r["executed_flops"]) else "–",
                    sig(r["useful_flops"] / 1e9) if _isnum(r["useful_flops"]) else "–",
                    sig(r["roof_flops"] / 1e9) if _isnum(r["roof_flops"]) else "–",
                    r["roof_source"] or "–",
                    fmt_pct(r["eff"]),
                    r["bound_"] or "–",
                    Raw(
                        (
                            "<span class=bad>ABOVE ROOF: check the peak or the FLOP count</span>"
                            if r["above"]
                            else ""
                        )
                        + (f"<span class=warn>{esc(r['ai_note'])}</span>" if r["ai_note"] else "")
                    ),
                ]
            )
            classes.append("flag" if r["above"] or r["ai_note"] else None)
        parts.append(
            table(
                [
                    "model",
                    "precision",
                    "batch",
                    "AI",
                    "AI source",
                    "ridge",
                    "attained GFLOP/s",
                    "executed GFLOP/s (ncu)",
                    "useful GFLOP/s (analytic)",
                    "roof GFLOP/s",
                    "roof source",
                    "efficiency",
                    "bound",
                    "flag",
                ],
                rows,
                num_cols=[2, 3, 5, 6, 7, 8, 9, 11],
                caption=str(env),
                row_classes=classes,
            )
        )
    return page("Roofline", "\n".join(parts))


# --------------------------------------------------------------------------- analysis


def analysis_section(
    config: Mapping,
    metrics: pd.DataFrame | None,
    points: pd.DataFrame | None,
    env_infos: Mapping | Sequence | None = None,
    complexity: Any = None,
    ceilings: Mapping | Sequence | None = None,
    expected_runs: Any = None,
    runs: Sequence[Mapping] | None = None,
) -> str:
    """Per-point diagnosis, cross-model/env/batch comparisons, failed and missing runs."""
    env_infos = _keyed(env_infos)
    ceilings = _keyed(ceilings)
    m = prepare_metrics(metrics)
    pts = prepare_points(points)
    cx = complexity_index(complexity)
    tp = throughput_table(m)
    parts = []

    # summary
    if len(pts):
        nm = int((pts["bound_"] == "memory").sum())
        nc = int((pts["bound_"] == "compute").sum())
        nlow = int((pts["eff"] < LOW_EFFICIENCY).sum())
        under = pts[~pts["above"].astype(bool) & pts["eff"].notna()]
        best = under.loc[under["eff"].idxmax()] if len(under) else None
        s = (
            f"<p>{len(pts)} point(s): {nm} memory-bound, {nc} compute-bound by AI vs ridge; "
            f"{nlow} below {fmt_pct(LOW_EFFICIENCY, 0)} of their roof."
        )
        if best is not None:
            s += (
                f" Closest to its roof: {esc(_label(best))} at {esc(fmt_pct(best['eff']))}; "
                f"median efficiency {esc(fmt_pct(under['eff'].median()))}."
            )
        parts.append(s + "</p>")
        n_above = int(pts["above"].sum())
        if n_above:
            parts.append(
                f"<div class=alert><strong>{n_above} point(s) above the roof — check the peak "
                "or the FLOP count.</strong></div>"
            )

    parts.append("<h2>At a glance</h2>")
    parts.append(_at_a_glance_html(pts, tp))

    parts.append("<h2>Across models</h2>")
    parts.append(_cross_model_html(tp, pts))
    parts.append("<h2>Across environments</h2>")
    parts.append("<h3>Fastest env per model</h3>")
    parts.append(_fastest_env_html(tp, config))
    parts.append("<h3>Per configuration</h3>")
    if tp["env"].nunique() > 1:
        parts.append(_cross_env_html(tp))
    parts.append(_speedup_html(tp, pts, config))
    parts.append("<h3>Compiling: what it costs, when it pays off</h3>")
    parts.append(env_compare.compile_html(config, runs, env_infos))
    parts.append("<h3>Data-parallel scaling</h3>")
    parts.append(env_compare.scaling_html(config, tp, env_infos, m))
    parts.append("<h2>Precision effect</h2>")
    parts.append(_precision_effect_html(tp, pts, config))
    parts.append("<h2>Batch-size scaling</h2>")
    parts.append(_batch_scaling_html(tp, pts))
    parts.append(_batch_table_html(tp))
    parts.append("<h2>Noisy configurations</h2>")
    parts.append(_noisy_html(tp))
    parts.append("<h2>Memory footprint</h2>")
    parts.append(memory_footprint_html(config, m, cx, env_infos))

    parts.append("<h2>Per point</h2>")
    if pts.empty:
        parts.append("<p class=warn>No roofline points: nothing measured successfully yet.</p>")
    for _, r in pts.iterrows():
        parts.append(_point_html(r, pts, tp, cx, config, env_infos, ceilings))

    parts.append("<h2>Failed runs</h2>")
    fl = failed_runs(m)
    if fl.empty:
        parts.append("<p class=ok>No failed runs.</p>")
    else:
        rows = [
            [
                r["run_id"] or "–",
                r["env"] or "–",
                r["model"] or "–",
                r["precision"] or "–",
                int(r["batch_size"]) if _isnum(r["batch_size"]) else "–",
                r["status"],
                r["message"] or "(no message)",
            ]
            for _, r in fl.sort_values("run_id", na_position="last").iterrows()
        ]
        oom = int((fl["status"] == "oom").sum())
        parts.append(
            f"<p>{len(fl)} run(s) failed ({oom} out of memory). They are excluded from the "
            "throughput tables and from roofline points."
            + (
                " An OOM means the batch does not fit this device at this precision: drop "
                "that batch size for the env (envs.&lt;env&gt;.batch_sizes) or use amp/bf16."
                if oom
                else ""
            )
            + "</p>"
        )
        parts.append(
            table(
                ["run_id", "env", "model", "precision", "batch", "status", "message"],
                rows,
                num_cols=[4],
                row_classes=["failed"] * len(rows),
            )
        )

    parts.append("<h2>Missing runs</h2>")
    expected = expected_run_table(config, expected_runs, m)
    miss = missing_runs(expected, m)
    if not miss:
        parts.append(f"<p class=ok>None: all {len(expected)} expected runs are in metrics.csv.</p>")
    else:
        rows = []
        for e in miss:
            env = e.get("env") or "?"
            if not _measured_here(env, e, config, env_infos):
                dev = env_matrix(config, env)["device"]
                on = f"a {dev} machine" if dev and dev != "auto" else "its machine"
                how = (
                    f"on {on} (env {env}): snakemake --cores all; then copy that "
                    f"machine's results/{env}/ here and re-run snakemake"
                )
            else:
                how = f"snakemake --cores all results/{env}/runs/{e['run_id']}.json"
            rows.append([e["run_id"], env, _code(how)])
        parts.append(
            f"<p>{len(miss)} of {len(expected)} expected runs are absent from metrics.csv "
            "(never run, interrupted, or run on another machine whose results were not copied "
            "in). Then rebuild metrics.csv and this report with "
            "<code>snakemake --cores all</code>.</p>"
        )
        parts.append(table(["run_id", "env", "how to produce it"], rows))
    return page("Analysis", "\n".join(parts))


def _measured_here(env: str, run: Mapping, config: Mapping | None, env_infos: Mapping) -> bool:
    """Whether this machine measures ``env``: the matrix's flag, else the config, else env_info."""
    flag = run.get("measured_here")
    if isinstance(flag, bool):
        return flag
    measure = (config or {}).get("measure_envs")
    if isinstance(measure, (list, tuple)):
        return env in measure
    return not env_infos or env in env_infos


def _other_precision_peaks(env, prec, ceilings) -> list[str]:
    roofs = _roofs(ceilings.get(env))
    cur = _pick_roof(roofs, "compute", prec)
    out = []
    for p in PRECISIONS:
        if p == prec:
            continue
        r = _pick_roof(roofs, "compute", p)
        if r and (not cur or r.value > cur.value * 1.05):
            out.append(f"{p} {fmt_flops_rate(r.value)}")
    return out


def _point_html(r, pts, tp, cx, config, env_infos, ceilings) -> str:
    env, model, prec, b = r["env"], r["model"], r["precision"], int(r["batch_size"])
    info = env_infos.get(env) or {}
    dev = _env_device(env, config, env_infos)
    bound = r["bound_"]
    eff, gap = r["eff"], r["gap"]
    ai, ridge = r["ai"], r["ridge_ai"]
    head = f"<h3>{esc(_label(r))}</h3>"
    s = "<p>"
    if bound == "memory":
        s += (
            f"<strong>Memory-bound</strong>: AI {esc(fmt_ai(ai))} ({esc(r['ai_source'] or '?')}) "
            f"is below the ridge {esc(fmt_ai(ridge))}"
        )
        if _isnum(ai) and _isnum(ridge) and ridge > 0:
            s += f" ({ai / ridge:.2f}× the ridge)"
        s += (
            f", so its roof is bandwidth × AI = {esc(fmt_bandwidth(r['peak_bandwidth']))} × "
            f"{esc(sig(ai))} = {esc(fmt_flops_rate(r['roof_flops']))}"
        )
    elif bound == "compute":
        s += (
            f"<strong>Compute-bound</strong>: AI {esc(fmt_ai(ai))} "
            f"({esc(r['ai_source'] or '?')}) is above the ridge {esc(fmt_ai(ridge))}"
        )
        if _isnum(ai) and _isnum(ridge) and ridge > 0:
            s += f" ({ai / ridge:.2f}× the ridge)"
        s += (
            f", so its roof is the {esc(prec)} compute peak, {esc(fmt_flops_rate(r['roof_flops']))}"
        )
    elif bound == "inconclusive":
        s += (
            f"<strong>Bound inconclusive</strong>: its analytic AI range "
            f"{esc(fmt_ai(r.get('ai_low')))} – {esc(fmt_ai(r.get('ai_high')))} straddles the "
            f"ridge {esc(fmt_ai(ridge))}, so without traffic counters it may be either; it is "
            f"plotted at {esc(fmt_ai(ai))} against {esc(fmt_flops_rate(r['roof_flops']))}"
        )
    else:
        s += f"Bound unknown (AI {esc(fmt_ai(ai))}, ridge {esc(fmt_ai(ridge))})"
    if bound in ("memory", "compute") and _isnum(r.get("ai_low")) and _isnum(r.get("ai_high")):
        s += f"; analytic AI range {esc(fmt_ai(r['ai_low']))} – {esc(fmt_ai(r['ai_high']))}"
    if r["roof_source"]:
        s += f" ({esc(r['roof_source'])} roof)"
    s += f". It attains {esc(fmt_flops_rate(r['attained_flops']))}: "
    if r["above"]:
        s += (
            f"<span class=bad>{esc(fmt_pct(eff))} of its roof — ABOVE THE ROOF by "
            f"{esc(fmt_flops_rate(-gap))}: check the peak or the FLOP count</span>.</p>"
        )
    else:
        s += f"<strong>{esc(fmt_pct(eff))}</strong> of its roof, "
        s += f"{esc(fmt_flops_rate(gap))} short"
        if _isnum(eff) and eff >= HIGH_EFFICIENCY:
            s += " — close to the roof, so the roof itself must move to go faster"
        elif _isnum(eff) and eff < LOW_EFFICIENCY:
            s += " — far below both roofs: the roofline does not explain this step time"
        s += ".</p>"

    trow = tp[
        (tp["env"] == env)
        & (tp["model"] == model)
        & (tp["precision"] == prec)
        & (tp["batch_size"] == b)
    ]
    tr = trow.iloc[0] if len(trow) else None
    moves: list[str] = []
    study = _study(config)
    envcfg = _envs(config).get(env, {})
    channels_last = envcfg.get("channels_last", study.get("channels_last", False))
    compiled = envcfg.get("compile", study.get("compile", False))
    low_prec = prec in ("amp", "bf16")
    if r["above"]:
        moves.append(
            "<span class=bad>First fix the numbers: a point above its roof means a wrong peak "
            f"({esc(r['roof_source'] or 'roof')}) or overcounted FLOPs.</span>"
        )
    if bound == "memory":
        same = pts[(pts["env"] == env) & (pts["model"] == model) & (pts["precision"] == prec)]
        same = same.sort_values("batch_size")
        txt = "raise AI with a larger batch (amortizes weight, gradient and optimizer traffic"
        if len(same) > 1 and _isnum(same["ai"].iloc[0]) and _isnum(same["ai"].iloc[-1]):
            txt += (
                f"; here AI goes from {sig(same['ai'].iloc[0])} at bs "
                f"{int(same['batch_size'].iloc[0])} to {sig(same['ai'].iloc[-1])} at bs "
                f"{int(same['batch_size'].iloc[-1])}"
            )
        moves.append(esc(txt + ")"))
        if not compiled:
            moves.append(
                "operator fusion (torch.compile) to keep BN/activation outputs out of DRAM"
            )
        if not channels_last:
            moves.append("channels-last memory format (avoids layout conversions)")
        if not low_prec:
            c = cx.get((model, b)) or {}
            by = c.get("by_precision") or {}
            lo = next((by[p] for p in ("bf16", "amp") if isinstance(by.get(p), Mapping)), None)
            t = "lower-precision activations (amp/bf16 halve activation traffic"
            if lo and _isnum(lo.get("min_dram_bytes_per_step")):
                t += (
                    f": min DRAM bytes/step {fmt_bytes(c.get('min_dram_bytes_per_step'))} → "
                    f"{fmt_bytes(lo['min_dram_bytes_per_step'])}"
                )
            moves.append(esc(t + ")"))
    elif bound == "compute":
        if dev == "cuda":
            ccs = [
                str(g.get("compute_capability"))
                for g in info.get("gpus") or []
                if isinstance(g, Mapping) and g.get("compute_capability")
            ]
            cc = _cc_float(ccs[0]) if ccs else None
            if not low_prec and prec != "tf32" and (cc is None or cc >= 8.0):
                others = _other_precision_peaks(env, prec, ceilings)
                moves.append(
                    esc(
                        "tensor cores: tf32/bf16/amp"
                        + (f" (peaks: {', '.join(others)})" if others else "")
                    )
                )
            elif not low_prec and cc is not None and cc >= 7.0:
                moves.append("tensor cores through amp (fp16); this GPU has no tf32/bf16 units")
            moves.append("better kernels (cuDNN autotuning, torch.compile, fused optimizer)")
        else:
            threads = _env_threads(env, config, env_infos)
            cores = info.get("cpu_cores_physical")
            if _isnum(threads) and _isnum(cores) and int(threads) < int(cores):
                moves.append(
                    esc(
                        f"more threads: this env uses {int(threads)} of {int(cores)} physical cores"
                    )
                )
            elif threads is None and not cores:
                moves.append("more cores/threads")
            flags = {str(f).lower() for f in info.get("cpu_flags") or []}
            bf = sorted(flags & {"amx_bf16", "avx512_bf16", "amx_tile"})
            if not low_prec and bf:
                moves.append(esc(f"bf16 autocast: this CPU has {', '.join(bf)}"))
            elif not low_prec and flags:
                moves.append(
                    "lower precision is unlikely to help: env_info lists no bf16 units "
                    "(avx512_bf16, amx_bf16) for this CPU, so bf16 would be emulated"
                )
            moves.append("better kernels (oneDNN, torch.compile)")
    if _isnum(eff) and eff < LOW_EFFICIENCY:
        txt = (
            f"overheads first: at {fmt_pct(eff)} of the roof the time goes to framework "
            "dispatch, kernel launches and many small kernels"
        )
        txt += (
            " (larger batches, torch.compile or CUDA graphs amortize them)"
            if dev == "cuda"
            else " (larger batches and torch.compile amortize them)"
        )
        moves.append(esc(txt))
    if tr is not None and _isnum(tr["data_wait_share"]) and tr["data_wait_share"] > HIGH_DATA_WAIT:
        moves.append(
            f"<span class=bad>data loading: {esc(fmt_pct(tr['data_wait_share']))} of each step "
            "waits for data</span> (more loader workers, pin_memory, faster storage)"
        )
    extra = ""
    if tr is not None and tr["noisy"]:
        extra = (
            f"<p class=warn>Noisy timing: step CV {esc(fmt_pct(tr['step_cv_max']))}, "
            f"repeat CV {esc(fmt_pct(tr['repeat_cv']))} (threshold {fmt_pct(NOISY_CV, 0)}). "
            "Treat this point's numbers with care; quiet the machine, pin threads, or run "
            "more iterations.</p>"
        )
    spread = ""
    if tr is not None:
        spread = (
            f"<p class=note>{esc(fmt_ips(tr['ips_median']))} (min–max "
            f"{esc(sig(tr['ips_min']))}–{esc(sig(tr['ips_max']))} over {int(tr['n_ok'])} ok "
            f"run(s)), step {esc(fmt_time(tr['step_median']))}.</p>"
        )
    return head + s + spread + extra + ("<p>What would move it:</p>" + _ul(moves) if moves else "")


def _cc_float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _cross_model_html(tp: pd.DataFrame, pts: pd.DataFrame) -> str:
    out = []
    for (env, prec, b), g in tp.groupby(["env", "precision", "batch_size"], sort=True):
        if len(g) < 2:
            continue
        g = g.sort_values("ips_median", ascending=False)
        top = g.iloc[0]
        rest = [
            f"{fmt_ratio(top['ips_median'] / r['ips_median'])} {r['model']} "
            f"({fmt_ips(r['ips_median'])})"
            for _, r in g.iloc[1:].iterrows()
            if r["ips_median"] > 0
        ]
        s = (
            f"<li><strong>{esc(env)} · {esc(prec)} · bs {int(b)}</strong>: "
            f"{esc(top['model'])} is fastest at {esc(fmt_ips(top['ips_median']))}, "
            f"{esc(_join(rest))}."
        )
        p = pts[(pts["env"] == env) & (pts["precision"] == prec) & (pts["batch_size"] == b)]
        if len(p) > 1:
            p = p.sort_values("attained_flops", ascending=False)
            if p.iloc[0]["model"] != top["model"]:
                s += (
                    f" In GFLOP/s {esc(p.iloc[0]['model'])} leads "
                    f"({esc(fmt_flops_rate(p.iloc[0]['attained_flops']))}, "
                    f"{esc(fmt_pct(p.iloc[0]['eff']))} of its roof): the fastest model in "
                    "images/s does the least work per image, not the most efficient work."
                )
            else:
                s += (
                    f" It also attains the most GFLOP/s "
                    f"({esc(fmt_flops_rate(p.iloc[0]['attained_flops']))})."
                )
        out.append(s + "</li>")
    if not out:
        return "<p class=note>Fewer than two models measured in any env/precision/batch.</p>"
    return "<ul>\n" + "\n".join(out) + "\n</ul>"


def _cross_env_html(tp: pd.DataFrame) -> str:
    out = []
    for (model, prec, b), g in tp.groupby(["model", "precision", "batch_size"], sort=True):
        if g["env"].nunique() < 2:
            continue
        g = g.sort_values("ips_median", ascending=False)
        top = g.iloc[0]
        rest = [
            f"{fmt_ratio(top['ips_median'] / r['ips_median'])} {r['env']} "
            f"({fmt_ips(r['ips_median'])})"
            for _, r in g.iloc[1:].iterrows()
            if r["ips_median"] > 0
        ]
        out.append(
            f"<li><strong>{esc(model)} · {esc(prec)} · bs {int(b)}</strong>: fastest on "
            f"{esc(top['env'])} at {esc(fmt_ips(top['ips_median']))}, {esc(_join(rest))}.</li>"
        )
    if not out:
        return (
            "<p class=note>Only one env measured per configuration: no cross-env comparison. "
            "Copy another machine's results/&lt;env&gt;/ here to compare.</p>"
        )
    return "<ul>\n" + "\n".join(out) + "\n</ul>"


def _batch_scaling_html(tp: pd.DataFrame, pts: pd.DataFrame) -> str:
    out = []
    for (env, model, prec), g in tp.groupby(["env", "model", "precision"], sort=True):
        if g["batch_size"].nunique() < 2:
            continue
        g = g.sort_values("batch_size")
        lo, hi = g.iloc[0], g.iloc[-1]
        gain = hi["ips_median"] / lo["ips_median"] - 1 if lo["ips_median"] > 0 else math.nan
        verdict = (
            "throughput saturates: per-step overheads are already amortized"
            if abs(gain) < 0.05
            else "larger batches amortize per-step overheads"
            if gain > 0
            else "larger batches are slower (cache spill or memory pressure)"
        )
        s = (
            f"<li><strong>{esc(env)} · {esc(model)} · {esc(prec)}</strong>: "
            f"{esc(sig(lo['ips_median']))} → {esc(sig(hi['ips_median']))} img/s from bs "
            f"{int(lo['batch_size'])} to {int(hi['batch_size'])} "
            f"(<strong>{'+' if gain >= 0 else ''}{esc(fmt_pct(gain))}</strong>; {verdict})"
        )
        p = pts[(pts["env"] == env) & (pts["model"] == model) & (pts["precision"] == prec)]
        p = p.sort_values("batch_size")
        if len(p) > 1:
            s += (
                f"; efficiency {esc(fmt_pct(p['eff'].iloc[0]))} → {esc(fmt_pct(p['eff'].iloc[-1]))}"
            )
        out.append(s + ".</li>")
    if not out:
        return "<p class=note>Only one batch size measured per configuration.</p>"
    return "<ul>\n" + "\n".join(out) + "\n</ul>"


# --------------------------------------------------------------------------- comparisons


def short_lever(bound: str | None, efficiency: Any, above: Any = False) -> str:
    """One line on what would move a point (the per-point analysis says it in full)."""
    if _to_bool(above):
        return "fix the numbers first: above its roof means a wrong peak or FLOP count"
    if _isnum(efficiency) and float(efficiency) < LOW_EFFICIENCY:
        return "overheads, not a roof: larger batch, torch.compile, fewer small kernels"
    if bound == "memory":
        return "raise AI: larger batch, operator fusion, lower-precision activations"
    if bound == "inconclusive":
        return "AI range straddles the ridge: traffic counters (perf, ncu) would decide"
    if bound == "compute":
        if _isnum(efficiency) and float(efficiency) >= HIGH_EFFICIENCY:
            return "near its roof: only a higher roof helps (tensor cores, lower precision)"
        return "better kernels (cuDNN/oneDNN, torch.compile) or a higher roof"
    return "unknown bound"


def _env_order(config: Mapping | None, *frames: pd.DataFrame) -> list[str]:
    envs = list(_envs(config))
    for f in frames:
        for e in f["env"] if len(f) else []:
            if e and e not in envs:
                envs.append(e)
    return envs


def baseline_env(config: Mapping | None, tp: pd.DataFrame) -> tuple[str | None, str | None]:
    """(baseline, note): ``report.baseline_env`` if it has results, else the first env that does."""
    have = set(tp["env"]) if len(tp) else set()
    order = [e for e in _env_order(config, tp) if e in have]
    if not order:
        return None, None
    want = ((config or {}).get("report") or {}).get("baseline_env")
    if want and want in have:
        return str(want), None
    if want:
        return order[0], (
            f"report.baseline_env {want!r} has no successful runs; speedups are against "
            f"{order[0]} instead."
        )
    return order[0], None


def _ips_cell(r: Mapping) -> str:
    s = f"{sig(r['ips_median'])} ({sig(r['ips_min'])}–{sig(r['ips_max'])})"
    return s + (" ⚠" if r["noisy"] else "")


def _ai_range_text(r: Any) -> str:
    """`` [low–high]``: a point's analytic AI range, or "" where it is unknown."""
    lo, hi = r.get("ai_low"), r.get("ai_high")
    return f" [{sig(lo)}–{sig(hi)}]" if _isnum(lo) and _isnum(hi) else ""


def _at_a_glance_html(pts: pd.DataFrame, tp: pd.DataFrame) -> str:
    """One row per point: the five questions (speed, bound, distance from roof, lever)."""
    if pts.empty:
        return "<p class=warn>No roofline points yet.</p>"
    rows, classes = [], []
    for _, r in pts.iterrows():
        t = tp[
            (tp["env"] == r["env"])
            & (tp["model"] == r["model"])
            & (tp["precision"] == r["precision"])
            & (tp["batch_size"] == r["batch_size"])
        ]
        t = t.iloc[0] if len(t) else None
        headroom = (
            r["roof_flops"] / r["attained_flops"]
            if _isnum(r["roof_flops"]) and _isnum(r["attained_flops"]) and r["attained_flops"] > 0
            else math.nan
        )
        rows.append(
            [
                r["env"],
                r["model"],
                r["precision"],
                int(r["batch_size"]),
                _ips_cell(t) if t is not None else sig(r["images_per_s"]),
                sig(r["attained_flops"] / 1e9) if _isnum(r["attained_flops"]) else "–",
                f"{sig(r['ai'])} ({r['ai_source'] or '?'})" + _ai_range_text(r),
                r["bound_"] or "–",
                fmt_pct(r["eff"]),
                Raw("<span class=bad>above roof</span>")
                if r["above"]
                else (f"{headroom:.1f}× below" if _isnum(headroom) else "–"),
                short_lever(r["bound_"], r["eff"], r["above"]),
            ]
        )
        classes.append("flag" if r["above"] else "noisy" if t is not None and t["noisy"] else None)
    return table(
        [
            "env",
            "model",
            "precision",
            "batch",
            "images/s (min–max)",
            "GFLOP/s",
            "AI FLOP/B (source) [range]",
            "bound",
            "efficiency",
            "distance from roof",
            "what would move it",
        ],
        rows,
        num_cols=[3, 4, 5, 6, 8, 9],
        row_classes=classes,
    ) + (
        "<p class=note>Efficiency = attained / roof at the point's AI; distance = roof / "
        "attained. ⚠ marks a noisy configuration (CV above "
        f"{fmt_pct(NOISY_CV, 0)}). Each point is explained in full under “Per point”.</p>"
    )


def _fastest_env_html(tp: pd.DataFrame, config: Mapping | None) -> str:
    """Per model: the fastest env at its best configuration, and by how much."""
    if tp.empty:
        return "<p class=warn>No successful runs yet.</p>"
    items = []
    envs = _env_order(config, tp)
    for model, g in tp.groupby("model", sort=True):
        best = []
        for env in envs:
            ge = g[g["env"] == env]
            if len(ge):
                best.append(ge.loc[ge["ips_median"].idxmax()])
        best.sort(key=lambda r: -r["ips_median"])
        top = best[0]

        def cfg(r):
            return f"{r['precision']}, bs {int(r['batch_size'])}: {fmt_ips(r['ips_median'])}"

        if len(best) == 1:
            items.append(
                f"<strong>{esc(model)}</strong>: measured on {esc(top['env'])} only; its best "
                f"configuration is {esc(cfg(top))}."
            )
            continue
        rest = [
            f"{fmt_ratio(top['ips_median'] / r['ips_median'])} {r['env']} ({cfg(r)})"
            for r in best[1:]
            if r["ips_median"] > 0
        ]
        items.append(
            f"<strong>{esc(model)}</strong>: fastest on <strong>{esc(top['env'])}</strong> "
            f"({esc(cfg(top))}), {esc(_join(rest))}."
        )
    return _ul(items)


def _speedup_html(tp: pd.DataFrame, pts: pd.DataFrame, config: Mapping | None) -> str:
    """Throughput per (model, precision, batch) and env, with speedups against the baseline."""
    if tp.empty:
        return "<p class=warn>No successful runs yet.</p>"
    base, note = baseline_env(config, tp)
    envs = [e for e in _env_order(config, tp) if e in set(tp["env"])]
    others = [e for e in envs if e != base]
    parts = []
    if note:
        parts.append(f"<p class=warn>{esc(note)}</p>")
    if not others:
        parts.append(
            f"<p class=note>Only {esc(base)} has results: no speedups yet. Copy another "
            "machine's results/&lt;env&gt;/ here (or list it under envs) to compare; set "
            "<code>report: {baseline_env: …}</code> to choose the env speedups are "
            "measured against.</p>"
        )
    idx = tp.set_index(GROUP)
    pidx = pts.set_index(GROUP) if len(pts) else None
    rows, erows = [], []
    for (model, prec, b), _g in tp.groupby(["model", "precision", "batch_size"], sort=True):
        row = [model, prec, int(b)]
        erow = [model, prec, int(b)]
        for env in envs:
            key = (env, model, prec, b)
            row.append(_ips_cell(idx.loc[key]) if key in idx.index else "–")
            if pidx is not None and key in pidx.index:
                p = pidx.loc[key]
                erow.append(f"{fmt_pct(p['eff'])} ({p['bound_'] or '?'})")
            else:
                erow.append("–")
        bkey = (base, model, prec, b)
        for env in others:
            key = (env, model, prec, b)
            if key in idx.index and bkey in idx.index and idx.loc[bkey]["ips_median"] > 0:
                row.append(fmt_ratio(idx.loc[key]["ips_median"] / idx.loc[bkey]["ips_median"]))
            else:
                row.append("–")
        rows.append(row)
        erows.append(erow)
    heads = ["model", "precision", "batch"] + [f"{e} images/s (min–max)" for e in envs]
    heads += [f"{e} vs {base}" for e in others]
    parts.append(
        table(
            heads,
            rows,
            num_cols=range(2, len(heads)),
            caption=f"Throughput: median over repeats (min–max); speedup against {base}",
        )
    )
    parts.append(
        table(
            ["model", "precision", "batch"] + envs,
            erows,
            num_cols=range(2, 3 + len(envs)),
            caption="Efficiency: attained FLOP/s as a share of the roof at the point's AI (bound)",
        )
    )
    return "\n".join(parts)


def _precision_effect_html(tp: pd.DataFrame, pts: pd.DataFrame, config: Mapping | None) -> str:
    """fp32 vs tf32 vs amp vs bf16 on the same env, model and batch."""
    out_rows, sentences = [], []
    order = {p: i for i, p in enumerate(PRECISIONS)}
    precs_all = sorted(set(tp["precision"]) if len(tp) else set(), key=lambda p: order.get(p, 9))
    for (env, model, b), g in tp.groupby(["env", "model", "batch_size"], sort=True):
        if g["precision"].nunique() < 2:
            continue
        by = {r["precision"]: r for _, r in g.iterrows()}
        ref = "fp32" if "fp32" in by else sorted(by, key=lambda p: order.get(p, 9))[0]
        row = [env, model, int(b)]
        for p in precs_all:
            if p not in by:
                row.append("–")
                continue
            cell = sig(by[p]["ips_median"])
            if p != ref and by[ref]["ips_median"] > 0:
                cell += f" ({fmt_ratio(by[p]['ips_median'] / by[ref]['ips_median'])})"
            row.append(cell)
        out_rows.append(row)
        best = max(by.values(), key=lambda r: r["ips_median"])
        if best["precision"] != ref and by[ref]["ips_median"] > 0:
            sentences.append(
                f"{env} · {model} · bs {int(b)}: {best['precision']} is "
                f"{fmt_ratio(best['ips_median'] / by[ref]['ips_median'])} {ref}"
            )
        else:
            sentences.append(f"{env} · {model} · bs {int(b)}: no lower precision beats {ref} here")
    if not out_rows:
        measured = _join(precs_all) or "none"
        return (
            f"<p class=note>Only one precision per env, model and batch was measured "
            f"({esc(measured)}): no precision comparison. Add precisions to "
            "<code>study.precisions</code> (or an env's <code>precisions</code>): bf16 runs on "
            "CPUs and recent GPUs, tf32 and amp need CUDA.</p>"
        )
    return table(
        ["env", "model", "batch"] + [f"{p} images/s" for p in precs_all],
        out_rows,
        num_cols=range(2, 3 + len(precs_all)),
        caption="Precision effect: images/s (× the fp32 run of the same env, model and batch)",
    ) + _ul(esc(s) + "." for s in sentences)


def _batch_table_html(tp: pd.DataFrame) -> str:
    batches = sorted({int(b) for b in tp["batch_size"]}) if len(tp) else []
    rows = []
    for (env, model, prec), g in tp.groupby(["env", "model", "precision"], sort=True):
        if g["batch_size"].nunique() < 2:
            continue
        by = {int(r["batch_size"]): r["ips_median"] for _, r in g.iterrows()}
        row = [env, model, prec] + [sig(by[b]) if b in by else "–" for b in batches]
        lo, hi = by[min(by)], by[max(by)]
        row.append(fmt_ratio(hi / lo) if lo > 0 else "–")
        rows.append(row)
    if not rows:
        return ""
    return table(
        ["env", "model", "precision"] + [f"bs {b}" for b in batches] + ["largest / smallest"],
        rows,
        num_cols=range(3, 4 + len(batches)),
        caption="Images/s (median over repeats) per batch size",
    )


def _noisy_html(tp: pd.DataFrame) -> str:
    noisy = tp[tp["noisy"]] if len(tp) else tp
    if not len(noisy):
        if tp.empty:
            return "<p class=note>No successful runs.</p>"
        return (
            f"<p class=ok>No noisy configuration: every step-time CV and repeat-to-repeat CV "
            f"is at most {fmt_pct(NOISY_CV, 0)}.</p>"
        )
    items = []
    for _, r in noisy.iterrows():
        why = []
        if _isnum(r["step_cv_max"]) and r["step_cv_max"] > NOISY_CV:
            why.append(f"step-time CV up to {fmt_pct(r['step_cv_max'])}")
        if _isnum(r["repeat_cv"]) and r["repeat_cv"] > NOISY_CV:
            why.append(f"images/s varies {fmt_pct(r['repeat_cv'])} between repeats")
        items.append(
            f"<strong>{esc(_label(r))}</strong>: {esc(_join(why))} "
            f"({esc(sig(r['ips_min']))}–{esc(sig(r['ips_max']))} img/s)"
        )
    return (
        f"<p>{len(noisy)} of {len(tp)} configurations are noisy (CV above "
        f"{fmt_pct(NOISY_CV, 0)}): their numbers carry more uncertainty than the others. "
        "Quiet the machine, pin threads, or raise <code>study.iters</code> and "
        "<code>study.runs</code>. Per-run step-time distributions are in the measurement "
        "section.</p>" + _ul(items)
    )


# ---- step-time distribution per run


def _box_svg(values: Sequence[float], lo: float, hi: float, w: int = 180, h: int = 16) -> Raw:
    """A tiny horizontal box plot (Tukey whiskers, outliers in red) on the scale lo..hi."""
    v = np.asarray([x for x in values if _isnum(x)], dtype=float)
    if not len(v) or not (hi > lo):
        return Raw("")
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    iqr = q3 - q1
    inl = v[(v >= q1 - 1.5 * iqr) & (v <= q3 + 1.5 * iqr)]
    wlo, whi = (inl.min(), inl.max()) if len(inl) else (q1, q3)
    out = v[(v < q1 - 1.5 * iqr) | (v > q3 + 1.5 * iqr)]

    def x(t):
        return 2 + (float(t) - lo) / (hi - lo) * (w - 4)

    y = h / 2
    parts = [
        f'<svg class=box width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">',
        f"<title>median {fmt_time(med)}, IQR {fmt_time(q1)}–{fmt_time(q3)}, "
        f"{len(out)} outlier(s)</title>",
        f'<line x1="{x(wlo):.1f}" x2="{x(whi):.1f}" y1="{y}" y2="{y}" stroke="#555"/>',
        f'<rect x="{x(q1):.1f}" y="3" width="{max(x(q3) - x(q1), 1):.1f}" height="{h - 6}" '
        'fill="#cfe0f3" stroke="#1f77b4"/>',
        f'<line x1="{x(med):.1f}" x2="{x(med):.1f}" y1="2" y2="{h - 2}" stroke="#000" '
        'stroke-width="1.5"/>',
    ]
    parts += [f'<circle cx="{x(t):.1f}" cy="{y}" r="2.5" fill="#c0392b"/>' for t in out]
    return Raw("".join(parts) + "</svg>")


def run_step_stats(run: Mapping) -> dict | None:
    """Per-step time statistics of one run JSON (None for a failed run)."""
    st = run.get("step_time_s") or {}
    vals = [float(x) for x in st.get("all") or [] if _isnum(x)]
    if not vals:
        return None
    v = np.asarray(vals)
    q1, q3 = np.percentile(v, [25, 75])
    iqr = q3 - q1
    n_out = int(((v < q1 - 1.5 * iqr) | (v > q3 + 1.5 * iqr)).sum())
    cv = float(v.std(ddof=1) / v.mean()) if len(v) > 1 and v.mean() > 0 else math.nan
    return {
        "all": vals,
        "n": len(v),
        "min": float(v.min()),
        "p5": float(np.percentile(v, 5)),
        "median": float(np.median(v)),
        "p95": float(np.percentile(v, 95)),
        "max": float(v.max()),
        "cv": cv,
        "outliers": n_out,
    }


def step_distribution_html(metrics: pd.DataFrame, runs: Sequence[Mapping] | None) -> str:
    """Per run: min, p5, median, p95, max, CV, Tukey outliers and a box plot of step times."""
    ok = ok_runs(metrics)
    by_id = {}
    for run in runs or []:
        if isinstance(run, Mapping) and run.get("run_id"):
            by_id[str(run["run_id"])] = run
    if ok.empty:
        return "<p class=note>No successful runs.</p>"
    rows, classes = [], []
    n_out_total = 0
    for _key, g in ok.sort_values("run_id").groupby(GROUP, sort=True):
        stats = {rid: run_step_stats(by_id[rid]) if rid in by_id else None for rid in g["run_id"]}
        vals = [x for s in stats.values() if s for x in s["all"]]
        lo, hi = (min(vals), max(vals)) if vals else (math.nan, math.nan)
        for _, r in g.iterrows():
            s = stats.get(r["run_id"])
            if s:
                cells = [
                    s["n"],
                    fmt_time(s["min"]),
                    fmt_time(s["p5"]),
                    fmt_time(s["median"]),
                    fmt_time(s["p95"]),
                    fmt_time(s["max"]),
                    fmt_pct(s["cv"]),
                    s["outliers"],
                    _box_svg(s["all"], lo, hi),
                ]
                cv = s["cv"]
                n_out_total += s["outliers"]
            else:  # no run JSON given: the ledger's summary
                cells = [
                    "–",
                    "–",
                    fmt_time(r["step_p5_s"]),
                    fmt_time(r["step_median_s"]),
                    fmt_time(r["step_p95_s"]),
                    "–",
                    fmt_pct(r["step_cv"]),
                    "–",
                    "",
                ]
                cv = r["step_cv"]
            noisy = _isnum(cv) and cv > NOISY_CV
            rows.append([r["run_id"], *cells, Raw("<span class=bad>noisy</span>") if noisy else ""])
            classes.append("noisy" if noisy else None)
    intro = (
        "<p>Every timed step of every ok run. Box: quartiles; bar: median; whiskers: the "
        "steps within 1.5 × IQR; red dots: outlier steps beyond that (Tukey). Runs of one "
        f"configuration share a scale, so repeats can be compared by eye. {n_out_total} "
        f"outlier step(s) in all; runs with a step-time CV above {fmt_pct(NOISY_CV, 0)} are "
        "flagged noisy.</p>"
    )
    return intro + table(
        [
            "run",
            "steps",
            "min",
            "p5",
            "median",
            "p95",
            "max",
            "CV",
            "outliers",
            "distribution (shared scale per configuration)",
            "noise",
        ],
        rows,
        num_cols=range(1, 9),
        row_classes=classes,
    )


# ---- memory footprint


def _device_capacity(env: str, info: Mapping) -> tuple[float, str]:
    """(bytes, what) of the memory a run of ``env`` must fit in."""
    gpus = [g for g in info.get("gpus") or [] if isinstance(g, Mapping)]
    if str(info.get("device")) == "cuda" and gpus and _isnum(gpus[0].get("memory_bytes")):
        return float(gpus[0]["memory_bytes"]), f"GPU memory ({gpus[0].get('name')})"
    if _isnum(info.get("ram_bytes")):
        return float(info["ram_bytes"]), "RAM"
    return math.nan, "unknown"


def _fit_largest_batch(batches: Sequence[float], peaks: Sequence[float], capacity: float):
    """Largest batch under ``capacity`` on the line peak = a + b·batch (None if not growing)."""
    pairs = [(float(b), float(p)) for b, p in zip(batches, peaks, strict=True) if _isnum(p)]
    if len({b for b, _ in pairs}) < 2 or not _isnum(capacity):
        return None
    slope, icpt = np.polyfit([b for b, _ in pairs], [p for _, p in pairs], 1)
    if slope <= 0:
        return None
    return max(0, int((capacity - icpt) // slope))


def _estimated_peak(c: Mapping, precision: str) -> float:
    by = (c.get("by_precision") or {}).get(precision) or {}
    v = by.get("peak_memory_bytes") if isinstance(by, Mapping) else None
    v = v if _isnum(v) else c.get("peak_memory_bytes")
    return float(v) if _isnum(v) else math.nan


def memory_footprint_html(
    config: Mapping | None, metrics: pd.DataFrame, cx: Mapping, env_infos: Mapping
) -> str:
    """Estimated and measured peak memory per point against the device's, and the largest batch."""
    m = prepare_metrics(metrics)
    keys = m.dropna(subset=["batch_size"]).groupby(GROUP, sort=True) if len(m) else []
    rows, classes, fits = [], [], {}
    for (env, model, prec, b), g in keys:
        info = env_infos.get(env) or {}
        cap, what = _device_capacity(env, info)
        c = cx.get((model, int(b))) or {}
        est = _estimated_peak(c, prec) if c else math.nan
        dev = info.get("device")
        if not dev and g["device"].notna().any():
            dev = g["device"].dropna().iloc[0]
        dev = str(dev or "")
        ok = g[g["status"] == "ok"]
        if dev == "cuda":
            meas, meas_what = ok["peak_device_memory_bytes"].max(), "peak device memory"
        else:
            meas, meas_what = ok["max_rss_bytes"].max(), "max RSS (process)"
        n_oom = int((g["status"] == "oom").sum())
        status = (
            Raw("<span class=bad>OOM</span>")
            if n_oom and not len(ok)
            else Raw(f"<span class=bad>{n_oom} OOM</span>")
            if n_oom
            else "fits"
            if len(ok)
            else "failed"
        )
        rows.append(
            [
                env,
                model,
                prec,
                int(b),
                fmt_bytes(est),
                f"{fmt_bytes(meas)} ({meas_what})" if _isnum(meas) else "–",
                f"{fmt_bytes(cap)} {what}" if _isnum(cap) else "–",
                fmt_pct(max(meas, est) / cap if _isnum(meas) else est / cap)
                if _isnum(cap)
                else "–",
                status,
            ]
        )
        classes.append("failed" if n_oom else None)
        f = fits.setdefault((env, model, prec), {"b": [], "est": [], "meas": [], "oom": []})
        f["b"].append(float(b))
        f["est"].append(est)
        f["meas"].append(float(meas) if _isnum(meas) else math.nan)
        if n_oom:
            f["oom"].append(int(b))
    if not rows:
        return "<p class=note>No runs yet.</p>"
    parts = [
        table(
            [
                "env",
                "model",
                "precision",
                "batch",
                "estimated peak (complexity)",
                "measured",
                "device memory",
                "share used",
                "status",
            ],
            rows,
            num_cols=[3, 4, 5, 6, 7],
            row_classes=classes,
        )
    ]
    items = []
    for (env, model, prec), f in fits.items():
        cap, what = _device_capacity(env, env_infos.get(env) or {})
        if not _isnum(cap):
            continue
        est_b = _fit_largest_batch(f["b"], f["est"], cap)
        meas_b = _fit_largest_batch(f["b"], f["meas"], cap)
        bits = []
        if est_b is not None:
            bits.append(f"≈ {est_b:,} by the estimate")
        if meas_b is not None:
            bits.append(f"≈ {meas_b:,} extrapolated from the measured peaks")
        if f["oom"]:
            bits.append(f"bs {min(f['oom'])} ran out of memory")
        if bits:
            items.append(
                f"<strong>{esc(env)} · {esc(model)} · {esc(prec)}</strong>: largest batch that "
                f"fits {esc(fmt_bytes(cap))} of {esc(what)}: {esc(_join(bits, 'and'))}."
            )
    parts.append(
        "<p>Estimated peak = parameters, gradients, optimizer state, saved activations and "
        "workspace (complexity stage). Measured: the peak device memory on GPUs; on CPUs the "
        "process's max RSS, which also holds the Python and PyTorch runtime (hundreds of MB). "
        "The largest batch that fits is a straight-line fit of peak memory against batch size "
        "(activations grow linearly with it), solved for the device's memory; treat it as an "
        "upper bound (fragmentation, other processes).</p>"
    )
    parts.append(
        _ul(items)
        if items
        else "<p class=note>One batch size per configuration: no line to extrapolate.</p>"
    )
    return "\n".join(parts)


# --------------------------------------------------------------------------- reproducibility


def model_flags(study: Mapping, model: str) -> list[str]:
    """Driver/complexity flags that build ``model``: a torchvision name or a user's factory
    (``study.model_specs``, as study_config.json holds it), its image size and classes."""
    spec = dict((study.get("model_specs") or {}).get(model) or {})
    flags = ["--arch", model]
    if spec.get("factory"):
        flags += ["--model-factory", str(spec["factory"])]
        if spec.get("kwargs"):
            flags += ["--model-kwargs", json.dumps(spec["kwargs"])]
    flags += ["--image-size", str(spec.get("image_size") or study.get("image_size", 224))]
    classes = spec.get("num_classes") or study.get("num_classes")
    if classes is not None:
        flags += ["--num-classes", str(classes)]
    return flags


def env_option_flags(envcfg: Mapping, study: Mapping) -> list[str]:
    """Driver flags of how an env runs the step: compile, channels-last, cuDNN, nproc."""
    flags = []
    if envcfg.get("compile"):
        flags += ["--compile", str(envcfg["compile"])]
    channels_last = envcfg.get("channels_last")
    if channels_last or (channels_last is None and study.get("channels_last")):
        flags.append("--channels-last")
    if envcfg.get("cudnn_benchmark") is not None:
        flags.append("--cudnn-benchmark" if envcfg["cudnn_benchmark"] else "--no-cudnn-benchmark")
    if int(envcfg.get("nproc") or 1) > 1:
        flags += ["--nproc", str(int(envcfg["nproc"]))]
    return flags


def run_command(config: Mapping, run: Mapping, env_infos: Mapping | None = None) -> str:
    """The ``run_train.py`` command line that reproduces one run of the config."""
    env_infos = env_infos or {}
    study = _study(config)
    env = str(run.get("env") or "")
    envcfg = _envs(config).get(env, {})
    device = str(envcfg.get("device") or "auto")
    info_dev = (env_infos.get(env) or {}).get("device")
    backend = info_dev if device == "auto" and info_dev else device
    args = [
        "python",
        "workflow/scripts/run_train.py",
        *model_flags(study, str(run["model"])),
        "--batch-size",
        str(int(run["batch_size"])),
        "--warmup-iters",
        str(study.get("warmup_iters", 3)),
        "--iters",
        str(study.get("iters", 10)),
        "--precision",
        str(run["precision"]),
        "--backend",
        backend,
    ]
    data = study.get("data", "synthetic")
    args += ["--synthetic"] if str(data) == "synthetic" else ["--data", str(data)]
    if study.get("workers") is not None:  # the train rule passes it, synthetic or not
        args += ["--workers", str(study["workers"])]
    args += env_option_flags(envcfg, study)
    threads = envcfg.get("threads")
    rid = str(run["run_id"])
    args += ["--env", env]
    if _isnum(threads):
        args += ["--expect-threads", str(int(threads))]
    args += ["--run-id", rid, "--out", f"results/{env}/runs/{rid}.json"]
    cmd = " ".join(shlex.quote(a) for a in args)
    if _isnum(threads):  # the job's threads: every process's (the driver splits them)
        cmd = f"OMP_NUM_THREADS={int(threads) * int(envcfg.get('nproc') or 1)} {cmd}"
    return cmd


_ENV_FIELDS = (
    ("host", "host"),
    ("OS", "os"),
    ("kernel", "kernel"),
    ("device", "device"),
    ("CPU", "cpu_model"),
    ("physical cores", "cpu_cores_physical"),
    ("logical cores", "cpu_cores_logical"),
    ("CPU ISA flags", "cpu_flags"),
    ("RAM", "ram_bytes"),
    ("Python", "python"),
    ("torch", "torch"),
    ("torchvision", "torchvision"),
    ("CUDA", "cuda"),
    ("cuDNN", "cudnn"),
    ("driver", "driver"),
    ("GPUs", "gpus"),
    ("container", "container"),
    ("cloud zone", "cloud_zone"),
    ("date", "date"),
)


def _env_value(key: str, v: Any) -> str:
    if v is None or (isinstance(v, (list, str)) and len(v) == 0):
        return "–"
    if key == "ram_bytes":
        return fmt_bytes(v)
    if key == "cpu_flags" and isinstance(v, list):
        return ", ".join(str(x) for x in v)
    if key == "gpus" and isinstance(v, list):
        return "; ".join(
            f"{g.get('name')} ({fmt_bytes(g.get('memory_bytes'))}, "
            f"sm {g.get('compute_capability')})"
            if isinstance(g, Mapping)
            else str(g)
            for g in v
        )
    return str(v)


def reproducibility_section(
    config: Mapping,
    env_infos: Mapping | Sequence | None,
    metrics: pd.DataFrame | None,
    expected_runs: Any = None,
    config_path: str | None = None,
) -> str:
    """env_info per env, and the exact commands that rebuild every number."""
    env_infos = _keyed(env_infos)
    m = prepare_metrics(metrics)
    envs = list(_envs(config))
    for e in list(env_infos) + [e for e in m["env"] if e]:
        if e not in envs:
            envs.append(e)
    parts = ["<h2>Machines</h2>"]
    if not env_infos:
        parts.append("<p class=warn>No env_info.json found.</p>")
    else:
        known = [e for e in envs if e in env_infos]
        rows = [
            [label] + [_env_value(key, env_infos[e].get(key)) for e in known]
            for label, key in _ENV_FIELDS
        ]
        parts.append(table(["field"] + known, rows))
    missing_info = [e for e in envs if e not in env_infos]
    if missing_info:
        parts.append(
            f"<p class=note>No env_info for {esc(_join(missing_info))}: not measured on this "
            "machine yet.</p>"
        )

    threads = [
        int(env_matrix(config, e)["threads"])
        for e in envs
        if _isnum(env_matrix(config, e)["threads"])
    ]
    cores = str(max(threads)) if threads else "all"
    cfg = f" --configfile {shlex.quote(config_path)}" if config_path else ""
    parts.append("<h2>Whole study</h2>")
    parts.append(
        "<p>From the repository root, with the conda envs of <code>envs/</code> "
        "(<code>--sdm conda</code>) or an environment that has them installed. "
        "Timed runs are serialized per machine by the workflow, so any "
        "<code>--cores</code> value keeps them one at a time; it should cover the "
        "largest <code>threads</code> of an env.</p>"
    )
    parts.append(
        _pre(
            [
                f"snakemake --cores {cores}{cfg}",
                f"snakemake --report results/report.html{cfg}",
            ]
        )
    )
    expected = expected_run_table(config, expected_runs, m)
    parts.append("<h2>Each run</h2>")
    parts.append(
        "<p>Each timed run is one process; this reproduces it outside Snakemake, on the "
        "machine of its env (threads from <code>OMP_NUM_THREADS</code>).</p>"
    )
    cmds = []
    for e in expected:
        if all(e.get(k) is not None for k in ("env", "model", "precision", "batch_size")):
            cmds.append(run_command(config, e, env_infos))
    # runs in the ledger that are outside the expected matrix
    exp_ids = {e["run_id"] for e in expected}
    for _, r in m.iterrows():
        if r["run_id"] and r["run_id"] not in exp_ids and r["model"] and _isnum(r["batch_size"]):
            cmds.append(run_command(config, r.to_dict(), env_infos))
    parts.append(_pre(cmds) if cmds else "<p class=note>No runs configured.</p>")
    parts.append("<h2>Model complexity</h2>")
    study = _study(config)
    cx_cmds = []
    seen = set()
    for e in envs:
        mx = env_matrix(config, e)
        for model in mx["models"]:
            for b in mx["batch_sizes"]:
                if (model, b) in seen:
                    continue
                seen.add((model, b))
                cx_cmds.append(
                    " ".join(
                        shlex.quote(a)
                        for a in [
                            "python",
                            "workflow/scripts/complexity.py",
                            *model_flags(study, str(model)),
                            "--batch-size",
                            str(b),
                            "--out",
                            f"results/complexity/{model}_bs{b}.json",
                        ]
                    )
                )
    parts.append(_pre(cx_cmds) if cx_cmds else "<p class=note>No models configured.</p>")
    return page("Reproducibility", "\n".join(parts))


# --------------------------------------------------------------------------- all


def all_sections(
    config: Mapping,
    metrics: pd.DataFrame | None,
    points: pd.DataFrame | None,
    complexity: Any = None,
    ceilings: Mapping | Sequence | None = None,
    env_infos: Mapping | Sequence | None = None,
    expected_runs: Any = None,
    config_path: str | None = None,
    runs: Sequence[Mapping] | None = None,
) -> dict[str, str]:
    """``{filename: html}`` for the six report sections (``runs``: run JSONs, optional)."""
    return {
        "design.html": design_section(
            config, env_infos, metrics, points, complexity, ceilings, expected_runs
        ),
        "complexity.html": complexity_section(complexity),
        "measurement.html": measurement_section(config, env_infos, metrics, runs),
        "roofline.html": roofline_section(ceilings, points, config),
        "analysis.html": analysis_section(
            config, metrics, points, env_infos, complexity, ceilings, expected_runs, runs
        ),
        "reproducibility.html": reproducibility_section(
            config, env_infos, metrics, expected_runs, config_path
        ),
    }
