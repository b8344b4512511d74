"""The baseline of a comparison: an earlier, finished study's results folder (issue 37).

The config's ``compare`` block names it::

    compare:
      baseline: ../old-clone        # a folder holding results/, or that results/ itself
      label: torch 2.13             # optional; else the study folder's name
      envs: {local: old_machine}    # optional: this study's env -> the baseline's env

:func:`resolve_baseline` finds the folder and refuses one that holds no study, or one
whose files this version cannot read (a run JSON of a newer ``schema_version``, a
metrics.csv without the columns the comparison needs), naming the key and the file.
:class:`Baseline` then lists the baseline's files. Nothing here writes: the baseline is
read, never written.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dnnroofline.errors import InputError

#: The run JSON schema this version writes and reads (``schema_version`` of a run).
RUN_SCHEMA_VERSION = 1
#: metrics.csv columns a comparison reads; later columns may be missing from an older file.
NEEDED_METRICS_COLUMNS = (
    "env",
    "model",
    "precision",
    "batch_size",
    "run",
    "status",
    "images_per_s",
    "step_median_s",
)


@dataclass(frozen=True)
class Baseline:
    """A finished study's results folder, read only.

    ``root`` is the results folder (``{root}/{env}/runs/*.json``), ``label`` what the
    comparison calls it, ``envs`` the envs it has timed runs of (a folder with
    ``runs/*.json``, or rows in its metrics.csv).
    """

    root: Path
    label: str
    envs: tuple[str, ...]

    def _ledger(self, name: str) -> Path:
        """``root/name``; where only the folder above holds it (``examples/h100``: the
        ledgers beside ``results/``), that file."""
        here = self.root / name
        beside = self.root.parent / name
        if not here.is_file() and self.root.name == "results" and beside.is_file():
            return beside
        return here

    def metrics(self) -> Path:
        """``root / "metrics.csv"`` (or the one beside ``results/``, as in examples/h100)."""
        return self._ledger("metrics.csv")

    def run_files(self, env: str) -> list[Path]:
        return sorted((self.root / env / "runs").glob("*.json"))

    def env_info(self, env: str) -> Path | None:
        path = self.root / env / "env_info.json"
        return path if path.is_file() else None

    def ceilings(self, env: str) -> Path | None:
        path = self.root / env / "ceilings.json"
        return path if path.is_file() else None

    def trace_ops(self, env: str) -> list[Path]:
        return sorted((self.root / env / "traces").glob("*.ops.json"))

    def ncu_files(self, env: str) -> list[Path]:
        """The parsed ncu captures (``ncu/*.json``; not the self-test's ``selftest.json``)."""
        folder = self.root / env / "ncu"
        return sorted(p for p in folder.glob("*.json") if p.name != "selftest.json")

    def roofline_points(self) -> Path | None:
        path = self._ledger("roofline_points.csv")
        return path if path.is_file() else None

    def study_config(self) -> Path | None:
        path = self._ledger("study_config.json")
        return path if path.is_file() else None


def check_run_schema(doc: object, where: str) -> None:
    """Refuse a run JSON written by a newer version (``schema_version`` above
    :data:`RUN_SCHEMA_VERSION`); one without the key predates it and is read."""
    version = doc.get("schema_version") if isinstance(doc, Mapping) else None
    if version is None:
        return
    if isinstance(version, bool) or not isinstance(version, int):
        raise InputError(f"{where}: schema_version must be an integer, got {version!r}")
    if version > RUN_SCHEMA_VERSION:
        raise InputError(
            f"{where}: run JSON schema_version {version} is newer than this version reads "
            f"({RUN_SCHEMA_VERSION}); compare with the version of dnn-roofline that wrote it"
        )


def metrics_header(path: Path, where: str) -> list[str]:
    """metrics.csv's columns; refuses a file without :data:`NEEDED_METRICS_COLUMNS`
    (an older file lacking later columns, such as ``rss_before_model_bytes``, is read)."""
    try:
        with open(path, newline="") as fh:
            header = next(csv.reader(fh), [])
    except OSError as exc:
        raise InputError(f"{where}: {path}: cannot read: {exc.strerror or exc}") from exc
    missing = [c for c in NEEDED_METRICS_COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"{where}: {path}: metrics.csv lacks the column(s) {', '.join(missing)} that a "
            "comparison needs (a file of another tool, or of a version that did not write them)"
        )
    return header


def metrics_envs(path: Path) -> set[str]:
    """The env names in a metrics.csv's ``env`` column."""
    with open(path, newline="") as fh:
        return {row["env"] for row in csv.DictReader(fh) if row.get("env")}


def metrics_points(path: Path) -> set[tuple[str, str, str, int]]:
    """The (env, model, precision, batch) points of a metrics.csv's rows."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = set()
    for row in rows:
        try:
            out.add((row["env"], row["model"], row["precision"], int(float(row["batch_size"]))))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def check_common_points(
    points: Iterable[tuple[str, str, str, int]],
    baseline: Baseline,
    env_map: Mapping[str, str],
    *,
    where: str = "compare",
) -> None:
    """Refuse a comparison with nothing to compare: no (env, model, precision, batch) of
    this study's matrix (``points``) is in the baseline's metrics.csv, its envs taken
    through ``env_map``. The message names both sides' envs and, where no env name is
    shared and none is mapped, the ``envs`` key that maps them. A baseline without a
    metrics.csv (runs only) is not checked here: the comparison lists its points."""
    metrics = baseline.metrics()
    if not metrics.is_file():
        return
    theirs = metrics_points(metrics)
    ours = {(env_map.get(e, e), m, p, int(b)) for e, m, p, b in points}
    if ours & theirs:
        return
    current_envs = sorted({e for e, *_ in points})
    hint = (
        f"; an env renamed since is mapped with {where}.envs: "
        f"{{{current_envs[0]}: {baseline.envs[0]}}}"
        if not env_map
        and current_envs
        and baseline.envs
        and not set(current_envs) & set(baseline.envs)
        else ""
    )
    raise InputError(
        f"{where}.baseline {baseline.root}: no (env, model, precision, batch) point in common "
        f"with this study (its envs: {', '.join(current_envs) or 'none'}; the baseline's: "
        f"{', '.join(baseline.envs) or 'none'}){hint}"
    )


def _results_root(folder: Path) -> Path:
    """The results folder of a study folder: ``folder/results`` where it holds one."""
    return folder / "results" if (folder / "results").is_dir() else folder


def _study_name(folder: Path, root: Path) -> str:
    if root != folder:
        return folder.name
    return root.parent.name if root.name == "results" and root.parent.name else root.name


def _check_runs(root: Path, envs: Iterable[str], where: str) -> None:
    for env in envs:
        for path in sorted((root / env / "runs").glob("*.json")):
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise InputError(f"{where}: {path}: cannot read this run JSON: {exc}") from exc
            check_run_schema(doc, f"{where}: {path}")


def resolve_baseline(spec: Mapping, *, where: str = "compare", cwd: Path | None = None) -> Baseline:
    """The baseline that ``spec`` (the config's ``compare`` block) names.

    ``spec["baseline"]``: a finished study's folder (holding ``results/``) or its
    ``results/`` itself; a relative path is taken from ``cwd`` (default: the current
    directory). Raises InputError naming ``{where}.baseline`` and the path for a missing
    folder, a folder without a study (no metrics.csv and no ``*/runs/*.json``), a run JSON
    of a newer schema, or a metrics.csv without the columns a comparison reads.
    """
    if not isinstance(spec, Mapping):
        raise InputError(f"{where}: must be a mapping with 'baseline', got {spec!r}")
    raw = spec.get("baseline")
    if not isinstance(raw, (str, Path)) or not str(raw).strip():
        raise InputError(f"{where}.baseline: must name a finished study's folder, got {raw!r}")
    folder = Path(raw).expanduser()
    if not folder.is_absolute():
        folder = (cwd or Path.cwd()) / folder
    shown = str(raw) if str(raw) == str(folder) else f"{raw} ({folder})"
    if not folder.is_dir():
        raise InputError(f"{where}.baseline {shown}: no such folder")
    root = _results_root(folder)
    run_envs = {p.parent.parent.name for p in root.glob("*/runs/*.json")}
    label = spec.get("label")
    if label is not None and (not isinstance(label, str) or not label.strip()):
        raise InputError(f"{where}.label: must be a non-empty string, got {label!r}")
    base = Baseline(root=root, label=label or _study_name(folder, root), envs=())
    metrics = base.metrics()
    if not metrics.is_file() and not run_envs:
        raise InputError(
            f"{where}.baseline {shown}: holds no study: no metrics.csv and no "
            f"*/runs/*.json in {root} (name a finished study's folder or its results/)"
        )
    envs = set(run_envs)
    if metrics.is_file():
        metrics_header(metrics, f"{where}.baseline")
        envs |= metrics_envs(metrics)
    _check_runs(root, sorted(run_envs), f"{where}.baseline")
    return Baseline(root=root, label=base.label, envs=tuple(sorted(envs)))


def check_env_map(
    spec: Mapping, current_envs: Iterable[str], baseline: Baseline, *, where: str = "compare"
) -> dict[str, str]:
    """``spec["envs"]`` ({this study's env: the baseline's env}) checked: each key an env of
    this study, each value an env of the baseline; refused by name otherwise."""
    env_map = spec.get("envs") or {}
    if not isinstance(env_map, Mapping):
        raise InputError(
            f"{where}.envs: must map this study's envs to the baseline's, got {env_map!r}"
        )
    current = sorted(set(current_envs))
    out = {}
    for new, old in env_map.items():
        if new not in current:
            raise InputError(
                f"{where}.envs: {new!r} is not an env of this study (its envs: "
                f"{', '.join(current) or 'none'})"
            )
        if not isinstance(old, str) or old not in baseline.envs:
            raise InputError(
                f"{where}.envs.{new}: {old!r} is not an env of the baseline {baseline.label!r} "
                f"({baseline.root}; its envs: {', '.join(baseline.envs) or 'none'})"
            )
        out[str(new)] = old
    return out
