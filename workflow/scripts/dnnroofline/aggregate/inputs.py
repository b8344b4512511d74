"""The files a roofline point is placed with: keyed to the run groups, and checked
against the runs they describe.

Complexity JSONs are keyed by (model, batch), ceilings by env, parsed ncu and perf JSONs
by their ``{env}_{model}_{precision}_bs{batch}`` name matched against the known groups.
A file that describes another step or machine than the runs (roofs measured on other
threads, a FLOP count at another image size) is refused, naming it: placed together,
the two would give a wrong point with nothing to say so. Used by
:mod:`dnnroofline.aggregate.metrics` and the stages that read these files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from dnnroofline.errors import InputError


def _field(doc: object, key: str) -> object:
    return doc.get(key) if isinstance(doc, Mapping) else None


def ncu_stem(env: str, model: str, precision: str, batch_size: int) -> str:
    """File stem of a parsed ncu JSON: ``{env}_{model}_{precision}_bs{batch}``."""
    return f"{env}_{model}_{precision}_bs{int(batch_size)}"


def ceilings_path(env: str) -> str:
    """The contract path of an env's ceilings file (used in messages)."""
    return f"results/{env}/ceilings.json"


def key_complexity(docs: Iterable[tuple[str, Mapping]]) -> dict[tuple[str, int], Mapping]:
    """{(arch, batch_size): doc} from (source, complexity JSON) pairs."""
    out: dict[tuple[str, int], Mapping] = {}
    where_of: dict[tuple[str, int], str] = {}
    for where, doc in docs:
        arch, batch = _field(doc, "arch"), _field(doc, "batch_size")
        if not isinstance(arch, str) or isinstance(batch, bool) or not isinstance(batch, int):
            raise InputError(f"{where}: complexity JSON needs string 'arch' and int 'batch_size'")
        key = (arch, batch)
        if key in out:
            raise InputError(f"complexity for {key} given twice: {where_of[key]} and {where}")
        out[key], where_of[key] = doc, where
    return out


def key_ceilings(docs: Iterable[tuple[str, Mapping]]) -> tuple[dict[str, Mapping], dict[str, str]]:
    """({env: doc}, {env: source}) from (source, ceilings JSON) pairs."""
    out: dict[str, Mapping] = {}
    sources: dict[str, str] = {}
    for where, doc in docs:
        env = _field(doc, "env")
        if not isinstance(env, str) or not env:
            raise InputError(f"{where}: ceilings JSON needs a string 'env', got {env!r}")
        if env in out:
            raise InputError(f"ceilings for env {env!r} given twice: {sources[env]} and {where}")
        out[env], sources[env] = doc, where
    return out, sources


def match_ncu_stems(
    stems: Iterable[str], groups: Iterable[tuple[str, str, str, int]]
) -> tuple[dict[str, tuple[str, str, str, int]], list[str]]:
    """Map ncu file stems ``{env}_{model}_{precision}_bs{batch}`` to group keys.

    Names are matched against the known groups rather than split on ``_``
    (env and model names may contain underscores). Returns (matched, unmatched).
    """
    expected: dict[str, tuple[str, str, str, int]] = {}
    for key in groups:
        key = (key[0], key[1], key[2], int(key[3]))
        stem = ncu_stem(*key)
        if stem in expected and expected[stem] != key:
            raise InputError(f"ncu file name {stem!r} is ambiguous: {expected[stem]} and {key}")
        expected[stem] = key
    matched, unmatched = {}, []
    for stem in stems:
        if stem in expected:
            matched[stem] = expected[stem]
        else:
            unmatched.append(stem)
    return matched, unmatched


def check_roof_threads(
    metrics: pd.DataFrame,
    ceilings: Mapping[str, Mapping],
    ceilings_sources: Mapping[str, str] | None = None,
) -> None:
    """Refuse CPU runs on other threads than those the env's roofs were measured with.

    A CPU roof scales with its threads: runs on 2 threads placed under roofs measured on 1
    would show about twice their real efficiency. Threads are per process (one rank's).
    """
    if "threads" not in metrics.columns:
        return
    ok = metrics[(metrics["status"] == "ok") & metrics["threads"].notna()]
    for env, runs in ok.groupby("env", sort=True):
        doc = ceilings.get(env) or {}
        if doc.get("device") != "cpu" or doc.get("threads") is None:
            continue
        roof_threads = int(doc["threads"])
        other = runs[runs["threads"].astype(int) != roof_threads]
        if other.empty:
            continue
        where = (ceilings_sources or {}).get(env, ceilings_path(env))
        first = other.iloc[0]
        threads = ", ".join(str(t) for t in sorted(set(other["threads"].astype(int))))
        raise InputError(
            f"{where}: the roofs of env {env!r} were measured on {roof_threads} thread(s), "
            f"but {len(other)} ok run(s) ran on {threads} ({first['run_id']}, ...): those "
            "roofs are not theirs. Re-measure what is stale with the env's threads: "
            f"snakemake --cores <env threads> --forcerun {where} (the roofs) or "
            "--forcerun train (the runs)"
        )


def check_runs_match_complexity(
    metrics: pd.DataFrame, complexity: Mapping[tuple[str, int], Mapping]
) -> None:
    """Refuse ok runs of another step than the one their complexity file counts.

    A point's FLOPs come from ``results/complexity/{model}_bs{batch}.json`` and its time
    from the runs: runs copied from a study at 224 px, placed under a count at 128 px,
    would show about a third of their real FLOP/s. Image size and classes must agree.
    """
    keys = [k for k in ("image_size", "num_classes") if k in metrics.columns]
    for run in metrics[metrics["status"] == "ok"].to_dict("records"):
        doc = complexity.get((run["model"], int(run["batch_size"])))
        if doc is None:  # a missing count is refused where the point needs it
            continue
        for key in keys:
            ran, counted = run[key], doc.get(key)
            if pd.isna(ran) or counted is None or int(ran) == int(counted):
                continue
            raise InputError(
                f"results/{run['env']}/runs/{run['run_id']}.json ran {run['model']} with "
                f"{key} {int(ran)}, but results/complexity/{run['model']}_bs"
                f"{int(run['batch_size'])}.json counts {key} {counted}: the point's FLOPs "
                f"would be another step's. Give the model the runs' {key} (study.{key}, or "
                "its study.models entry) and run snakemake again"
            )
