"""Before and after, what else changed and where (issue 37): the machines' and the
studies' settings (fingerprints), the traced ops, the ncu kernels and the roofs.

Pure: documents in (env_info.json, study_config.json, ``*.ops.json``, parsed ncu JSON,
ceilings.json as dicts), rows out. The points are :mod:`dnnroofline.aggregate.compare`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from dnnroofline.errors import InputError
from dnnroofline.study.identity import Identity, identity_of

FINGERPRINT_COLUMNS = ["env", "baseline_env", "key", "baseline", "current"]
OP_COLUMNS = [
    "env",
    "model",
    "precision",
    "batch",
    "name",
    "baseline_per_step_s",
    "per_step_s",
    "change_ms",
    "change_pct",
    "only_in",
    "note",
]
KERNEL_COLUMNS = [
    "env",
    "model",
    "precision",
    "batch",
    "name",
    "baseline_time_s",
    "time_s",
    "change_ms",
    "change_pct",
    "baseline_calls",
    "calls",
    "only_in",
]
ROOF_COLUMNS = [
    "env",
    "baseline_env",
    "kind",
    "precision",
    "source",
    "benchmark",
    "baseline_value",
    "value",
    "change_pct",
    "note",
]
NO_DIFFERENCE = "no difference"
UNKNOWN = "unknown"
#: The kernels kept per point in compare_kernels.csv (by the larger time of the two), after
#: the row of all kernels.
TOP_KERNELS = 20
ALL_KERNELS = "(all kernels)"

# env_info.json keys compared as they are (fingerprint rows name them so).
_ENV_INFO_KEYS = (
    "torch",
    "torchvision",
    "cuda",
    "cudnn",
    "driver",
    "python",
    "cpu_model",
    "cpu_cores_physical",
    "cpu_cores_logical",
    "cpu_max_clock_hz",
    "host",
    "os",
    "kernel",
    "container",
)
_STUDY_KEYS = ("warmup_iters", "iters", "image_size", "data", "workers")
_ENV_KEYS = ("threads", "channels_last", "compile", "cudnn_benchmark", "nproc", "environment")
#: An env setting a study from before its key ran without.
_ENV_ABSENT = {"environment": "none"}


# --------------------------------------------------------------------------- fingerprints


def _fmt(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt(v) for v in value) or "none"
    if isinstance(value, Mapping):  # an env's environment variables
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    return str(value)


def _get(doc: Mapping | None, key: str) -> str:
    if not isinstance(doc, Mapping) or key not in doc:
        return UNKNOWN
    return _fmt(doc[key])


def _gpu_names(info: Mapping | None) -> str:
    if not isinstance(info, Mapping) or "gpus" not in info:
        return UNKNOWN
    return ", ".join(str(g.get("name")) for g in info.get("gpus") or []) or "none"


def _flags_rows(b_info: Mapping | None, c_info: Mapping | None) -> list[tuple[str, str, str]]:
    """CPU flags removed (baseline column) and added (current column)."""
    b, c = (i.get("cpu_flags") if isinstance(i, Mapping) else None for i in (b_info, c_info))
    if b is None or c is None:
        return [] if b is None and c is None else [("cpu_flags", _fmt(b), _fmt(c))]
    removed, added = sorted(set(b) - set(c)), sorted(set(c) - set(b))
    if not removed and not added:
        return []
    return [
        (
            "cpu_flags",
            f"removed: {', '.join(removed) or 'none'}",
            f"added: {', '.join(added) or 'none'}",
        )
    ]


def _env_setting(config: Mapping | None, env: str, key: str) -> str:
    """An env's setting in a resolved study config (the env's own, else the study's)."""
    if not isinstance(config, Mapping):
        return UNKNOWN
    block = (config.get("envs") or {}).get(env)
    if isinstance(block, Mapping) and key in block:
        return _fmt(block[key])
    study = config.get("study") or {}
    if key in study:
        return _fmt(study[key])
    return _ENV_ABSENT.get(key, UNKNOWN) if isinstance(block, Mapping) else UNKNOWN


def _study_setting(config: Mapping | None, key: str) -> str:
    if not isinstance(config, Mapping):
        return UNKNOWN
    return _get(config.get("study"), key)


def _pair_rows(
    pair: tuple[str, str], infos: tuple, configs: tuple, clocks: tuple
) -> list[tuple[str, str, str]]:
    """(key, baseline, current) of one env pair, every key (differing or not)."""
    env, old = pair
    b_info, c_info = infos
    rows = [(k, _get(b_info, k), _get(c_info, k)) for k in _ENV_INFO_KEYS]
    rows.append(("gpu", _gpu_names(b_info), _gpu_names(c_info)))
    rows += _flags_rows(b_info, c_info)
    b_clk, c_clk = clocks
    for key in sorted(set(b_clk) | set(c_clk)):
        rows.append((key, _get(b_clk, key), _get(c_clk, key)))
    b_cfg, c_cfg = configs
    rows += [(k, _env_setting(b_cfg, old, k), _env_setting(c_cfg, env, k)) for k in _ENV_KEYS]
    rows += [(k, _study_setting(b_cfg, k), _study_setting(c_cfg, k)) for k in _STUDY_KEYS]
    return rows


def fingerprint_diff(
    baseline_env_info: Mapping[str, Mapping],
    current_env_info: Mapping[str, Mapping],
    baseline_config: Mapping | None,
    current_config: Mapping | None,
    env_map: Mapping[str, str] | None = None,
    *,
    baseline_clocks: Mapping[str, Mapping] | None = None,
    current_clocks: Mapping[str, Mapping] | None = None,
) -> list[dict]:
    """Rows of :data:`FINGERPRINT_COLUMNS`: per env of this study that the baseline has
    (through ``env_map``, {new: old}), each key whose value differs, or one row with key
    ``no difference`` (empty values) when none does.

    Env infos are ``{env: env_info.json}``; configs the resolved ``study_config.json``
    (None: its settings are ``unknown``); clocks ``{env: {key: value}}`` from the runs
    (:func:`dnnroofline.aggregate.compare_files.run_clocks`). A side without the env's
    env_info.json gives one ``env_info.json`` row saying which.
    """
    env_map = dict(env_map or {})
    b_envs = set(baseline_env_info) | set((baseline_config or {}).get("envs") or {})
    c_envs = set(current_env_info) | set((current_config or {}).get("envs") or {})
    out = []
    for env in sorted(c_envs):
        old = env_map.get(env, env)
        if old not in b_envs:
            continue
        b_info, c_info = baseline_env_info.get(old), current_env_info.get(env)
        rows = []
        if b_info is None or c_info is None:
            # no machine to compare: say which side lacks it, compare the settings
            rows.append(("env_info.json", _present(b_info), _present(c_info)))
            b_info = c_info = None
        clocks = ((baseline_clocks or {}).get(old) or {}, (current_clocks or {}).get(env) or {})
        configs = (baseline_config, current_config)
        rows += [
            r for r in _pair_rows((env, old), (b_info, c_info), configs, clocks) if r[1] != r[2]
        ]
        rows = rows or [(NO_DIFFERENCE, "", "")]
        out += [dict(zip(FINGERPRINT_COLUMNS, (env, old, *r), strict=True)) for r in rows]
    return out


def _present(doc: Mapping | None) -> str:
    return "recorded" if doc is not None else "missing"


# --------------------------------------------------------------------------- pairing


def _identity(doc: Mapping, where: str) -> Identity | None:
    try:
        return identity_of(doc, where)
    except InputError:
        return None


def pair_by_point(
    baseline_docs: Iterable[Mapping], current_docs: Iterable[Mapping], env_map: Mapping | None
) -> list[tuple[Identity, Mapping, Mapping]]:
    """(current identity, baseline doc, current doc) of each point both have a document of
    (identity read from the document: ``env`` and ``config``, or ``driver_run``). Documents
    that do not say which run they are are left out."""
    env_map = dict(env_map or {})
    base = {}
    for i, doc in enumerate(baseline_docs):
        ident = _identity(doc, f"baseline document #{i}")
        if ident is not None:
            base[ident] = doc
    out = []
    for i, doc in enumerate(current_docs):
        ident = _identity(doc, f"document #{i}")
        if ident is None:
            continue
        old = Identity(env_map.get(ident.env, ident.env), *ident[1:])
        if old in base:
            out.append((ident, base[old], doc))
    return sorted(out, key=lambda t: tuple(t[0]))


def _change(base: float, cur: float) -> tuple[float, float]:
    """(change in ms, change in %); % is NaN from 0."""
    pct = 100.0 * (cur / base - 1.0) if base > 0 else math.nan
    return 1e3 * (cur - base), pct


def _point_cols(ident: Identity) -> dict:
    return {"env": ident.env, "model": ident.model, "precision": ident.precision} | {
        "batch": int(ident.batch)
    }


# --------------------------------------------------------------------------- ops


def _op_times(doc: Mapping) -> tuple[dict[str, float], str | None, int]:
    """({op name: per-step seconds}, basis, top) of a trace's ops table."""
    table = doc.get("table") if isinstance(doc, Mapping) else None
    if not isinstance(table, Mapping):
        return {}, None, 0
    times: dict[str, float] = {}
    for row in table.get("ops") or []:
        value = row.get("per_step_s")
        if isinstance(value, (int, float)):
            times[str(row.get("name"))] = times.get(str(row.get("name")), 0.0) + float(value)
    return times, table.get("basis"), int(table.get("top") or len(times))


def op_diff(baseline_ops_json: Mapping, current_ops_json: Mapping) -> list[dict]:
    """Rows of :data:`OP_COLUMNS` for one point: the two traces' top ops aligned by name,
    per-step seconds each (traced under the profiler: for where, not how fast), largest
    change first. An op in one top table only is flagged ``only_in`` (it may still have
    run in the other, below its top)."""
    ident = identity_of(current_ops_json, "current trace table")
    b_ops, b_basis, b_top = _op_times(baseline_ops_json)
    c_ops, c_basis, c_top = _op_times(current_ops_json)
    if not b_ops or not c_ops:
        return []
    basis_note = (
        "" if b_basis == c_basis else f"ranked by {b_basis} in the baseline, {c_basis} here"
    )
    rows = []
    for name in set(b_ops) | set(c_ops):
        b, c = b_ops.get(name), c_ops.get(name)
        only, note = "", basis_note
        if c is None:
            only, note = "baseline", f"not among the current trace's top {c_top} ops"
        elif b is None:
            only, note = "current", f"not among the baseline trace's top {b_top} ops"
        change_ms, pct = _change(b or 0.0, c or 0.0)
        rows.append(
            _point_cols(ident)
            | {"name": name, "baseline_per_step_s": b, "per_step_s": c}
            | {"change_ms": change_ms, "change_pct": pct, "only_in": only, "note": note}
        )
    return sorted(rows, key=lambda r: (-abs(r["change_ms"]), r["name"]))


def op_diffs(
    baseline_docs: Iterable[Mapping], current_docs: Iterable[Mapping], env_map: Mapping | None
) -> list[dict]:
    """:func:`op_diff` of every point both studies traced."""
    return [
        row
        for _, b, c in pair_by_point(baseline_docs, current_docs, env_map)
        for row in op_diff(b, c)
    ]


# --------------------------------------------------------------------------- kernels


def _kernel_times(doc: Mapping) -> dict[str, tuple[float, int]]:
    """{kernel name: (summed time_s, calls)} of a parsed ncu capture."""
    out: dict[str, tuple[float, int]] = {}
    for k in doc.get("kernels") or [] if isinstance(doc, Mapping) else []:
        t = k.get("time_s")
        if not isinstance(t, (int, float)):
            continue
        name = str(k.get("name"))
        time, calls = out.get(name, (0.0, 0))
        out[name] = (time + float(t), calls + 1)
    return out


def kernel_diff(
    baseline_ncu: Mapping, current_ncu: Mapping, *, top: int = TOP_KERNELS
) -> list[dict]:
    """Rows of :data:`KERNEL_COLUMNS` for one point both studies captured with ncu: first
    all kernels summed, then the ``top`` kernel names by the larger of their two summed
    times, largest change first. ncu's kernel times (replayed kernels): for where."""
    ident = identity_of(current_ncu, "current ncu capture")
    b, c = _kernel_times(baseline_ncu), _kernel_times(current_ncu)
    if not b or not c:
        return []
    names = sorted(set(b) | set(c), key=lambda n: -max(b.get(n, (0.0,))[0], c.get(n, (0.0,))[0]))
    rows = [_kernel_row(ident, ALL_KERNELS, _total(b), _total(c))]
    kept = [_kernel_row(ident, n, b.get(n), c.get(n)) for n in names[:top]]
    return rows + sorted(kept, key=lambda r: (-abs(r["change_ms"]), r["name"]))


def _total(times: Mapping[str, tuple[float, int]]) -> tuple[float, int]:
    return sum(t for t, _ in times.values()), sum(n for _, n in times.values())


def _kernel_row(ident: Identity, name: str, b: tuple | None, c: tuple | None) -> dict:
    change_ms, pct = _change(b[0] if b else 0.0, c[0] if c else 0.0)
    only = "baseline" if c is None else "current" if b is None else ""
    return _point_cols(ident) | {
        "name": name,
        "baseline_time_s": b[0] if b else None,
        "time_s": c[0] if c else None,
        "change_ms": change_ms,
        "change_pct": pct,
        "baseline_calls": b[1] if b else 0,
        "calls": c[1] if c else 0,
        "only_in": only,
    }


def kernel_diffs(
    baseline_docs: Iterable[Mapping], current_docs: Iterable[Mapping], env_map: Mapping | None
) -> list[dict]:
    """:func:`kernel_diff` of every point both studies captured."""
    pairs = pair_by_point(baseline_docs, current_docs, env_map)
    return [row for _, b, c in pairs for row in kernel_diff(b, c)]


# --------------------------------------------------------------------------- roofs


def _roof_key(roof: Mapping) -> tuple[str, str, str, str]:
    return (
        str(roof.get("kind")),
        _fmt(roof.get("precision")) if roof.get("precision") is not None else "",
        str(roof.get("source")),
        str(roof.get("benchmark") or ""),
    )


def _roofs(doc: Mapping | None) -> dict[tuple, float]:
    """{(kind, precision, source, benchmark): value}; the best of repeated keys."""
    out: dict[tuple, float] = {}
    for roof in (doc or {}).get("roofs") or []:
        value = roof.get("value")
        if isinstance(value, (int, float)) and math.isfinite(value):
            key = _roof_key(roof)
            out[key] = max(out.get(key, -math.inf), float(value))
    return out


def roof_diff(
    baseline_ceilings: Mapping, current_ceilings: Mapping, *, rel_tol: float = 1e-9
) -> list[dict]:
    """Rows of :data:`ROOF_COLUMNS`: each roof (kind, precision, source; a memory roof's
    benchmark) whose value moved, with its change, or that one side lacks."""
    env = str(current_ceilings.get("env") or "")
    old = str(baseline_ceilings.get("env") or "")
    b, c = _roofs(baseline_ceilings), _roofs(current_ceilings)
    rows = []
    for key in sorted(set(b) | set(c)):
        bv, cv = b.get(key), c.get(key)
        if bv is not None and cv is not None and math.isclose(bv, cv, rel_tol=rel_tol):
            continue
        note = (
            "only in the baseline"
            if cv is None
            else "only in the current study"
            if bv is None
            else ""
        )
        pct = 100.0 * (cv / bv - 1.0) if bv and cv is not None else math.nan
        rows.append(
            dict(zip(ROOF_COLUMNS[:6], (env, old, *key), strict=True))
            | {"baseline_value": bv, "value": cv, "change_pct": pct, "note": note}
        )
    return rows


def roof_diffs(
    baseline_by_env: Mapping[str, Mapping],
    current_by_env: Mapping[str, Mapping],
    env_map: Mapping[str, str] | None,
) -> list[dict]:
    """:func:`roof_diff` of every env of this study whose baseline env has ceilings."""
    env_map = dict(env_map or {})
    out = []
    for env in sorted(current_by_env):
        old = env_map.get(env, env)
        if old in baseline_by_env:
            cur = dict(current_by_env[env], env=env)
            out += roof_diff(dict(baseline_by_env[old], env=old), cur)
    return out
