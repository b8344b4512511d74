"""The files a roofline point is placed with: keyed to the run groups, and checked
against the runs they describe.

Complexity JSONs are keyed by (model, batch), ceilings by env, parsed ncu and perf JSONs
and trace tables by the run identity they hold (:func:`dnnroofline.study.identity.identity_of`),
never by their file name.
A file that describes another step or machine than the runs (roofs measured on other
threads, a FLOP count at another image size) is refused, naming it: placed together,
the two would give a wrong point with nothing to say so. Used by
:mod:`dnnroofline.aggregate.points` and the stages that read these files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from dnnroofline.errors import InputError
from dnnroofline.study.identity import (
    Identity,
    ceilings_path,
    complexity_path,
    identity_of,
    run_path,
)


def _field(doc: object, key: str) -> object:
    return doc.get(key) if isinstance(doc, Mapping) else None


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


def key_by_identity(
    docs: Iterable[tuple[str, Mapping]], groups: Iterable[tuple[str, str, str, int]]
) -> tuple[dict[Identity, tuple[str, Mapping]], list[str]]:
    """Key parsed ncu or perf JSONs, or trace tables, to the run groups they describe.

    The identity is read from each file's content. A file that failed (``status`` not
    ``ok``) and holds no identity has nothing to give a point and is passed over; one
    that is ok without it is refused, naming it. Returns ({group: (source, doc)}, the
    sources that match no group or were passed over).
    """
    known = {Identity(e, m, p, int(b)) for e, m, p, b in groups}
    matched: dict[Identity, tuple[str, Mapping]] = {}
    unmatched: list[str] = []
    for where, doc in docs:
        failed = isinstance(doc, Mapping) and doc.get("status") not in (None, "ok")
        try:
            key = identity_of(doc, where)
        except InputError:
            if failed:
                unmatched.append(where)
                continue
            raise
        if key not in known:
            unmatched.append(where)
            continue
        if key in matched:
            raise InputError(f"{key} is described twice: {matched[key][0]} and {where}")
        matched[key] = (where, doc)
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

    A point's FLOPs come from the config's complexity JSON and its time
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
            counted_in = complexity_path(run["model"], int(run["batch_size"]))
            raise InputError(
                f"{run_path(run['env'], run['run_id'])} ran {run['model']} with "
                f"{key} {int(ran)}, but {counted_in} counts {key} {counted}: the point's FLOPs "
                f"would be another step's. Give the model the runs' {key} (study.{key}, or "
                "its study.models entry) and run snakemake again"
            )
