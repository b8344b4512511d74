"""A short GPU allocation spent in priority order, and nothing lost when it is cut.

A *plan* (YAML) lists groups of Snakemake targets, most valuable first. Each group runs
as one ``snakemake`` under a deadline (the budget left minus a reserve for packing); at
the deadline Snakemake's process group gets SIGINT (Snakemake stops its jobs and removes
their incomplete outputs), SIGTERM after a grace, SIGKILL last. After every group what
exists of ``results/{env}/`` (and of the plan's file targets outside it, such as
``results/predictions.csv``) is packed atomically into one archive, and the lease's
record (``lease.json``) says what ran, for how long, what it left, and the sha256 of each
file target made.

The study matrix (envs, points, repeats) comes in as a :class:`Matrix` that the caller
builds from the study package (scripts/gpu_lease.py): this module stays in the base layer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from dnnroofline.errors import InputError, suggest
from dnnroofline.io import atomic_path, write_json_atomic

PLACEHOLDERS = ("env", "point", "run")
GROUP_KEYS = ("name", "targets", "estimate_s")
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
RULE_NAME = re.compile(r"[A-Za-z_]\w*")
#: Seconds kept back from the budget for the last pack (and snakemake's own stop).
RESERVE_S = 20.0
#: Seconds between SIGINT and SIGTERM, and between SIGTERM and SIGKILL.
GRACE_S = 5.0
ARCHIVE = "results.tar.gz"
RECORD = "lease.json"
LOG = "lease.log"


@dataclass(frozen=True)
class Group:
    name: str
    targets: tuple[str, ...]
    estimate_s: float | None = None


@dataclass(frozen=True)
class Matrix:
    """The measured envs, each env's points (config keys) and the run indices."""

    envs: tuple[str, ...]
    points: dict[str, tuple[str, ...]] = field(default_factory=dict)
    runs: tuple[int, ...] = ()


# ---------------------------------------------------------------- the plan


def parse_plan(data: Any, path: str) -> list[Group]:
    """The plan's groups, in order; a bad plan is an InputError naming file, group, key."""
    if not isinstance(data, list) or not data:
        raise InputError(f"{path}: a plan is a non-empty list of groups, not {data!r}")
    groups, names = [], set()
    for index, entry in enumerate(data, 1):
        where = f"{path}: group {index}"
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            where = f"{path}: group {index} ({entry['name']!r})"
        groups.append(_parse_group(entry, where))
        if groups[-1].name in names:
            raise InputError(f"{where}: name {groups[-1].name!r} is used by an earlier group")
        names.add(groups[-1].name)
    return groups


def _parse_group(entry: Any, where: str) -> Group:
    if not isinstance(entry, dict):
        raise InputError(f"{where}: a group is a mapping with {GROUP_KEYS}, not {entry!r}")
    unknown = [key for key in entry if key not in GROUP_KEYS]
    if unknown:
        hint = suggest(str(unknown[0]), GROUP_KEYS)
        raise InputError(f"{where}: unknown key {unknown[0]!r}{hint} (a group has {GROUP_KEYS})")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{where}: key 'name' must be a non-empty string, not {name!r}")
    targets = entry.get("targets")
    if not isinstance(targets, list) or not targets:
        raise InputError(f"{where}: key 'targets' must be a non-empty list, not {targets!r}")
    for target in targets:
        if not isinstance(target, str) or not target.strip():
            raise InputError(f"{where}: key 'targets': {target!r} is not a target string")
        for found in PLACEHOLDER.findall(target):
            if found not in PLACEHOLDERS:
                raise InputError(
                    f"{where}: key 'targets': {target!r} has placeholder {{{found}}}"
                    f"{suggest(found, PLACEHOLDERS)} (known: "
                    + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
                    + ")"
                )
    estimate = entry.get("estimate_s")
    if estimate is not None and (
        isinstance(estimate, bool) or not isinstance(estimate, int | float) or estimate < 0
    ):
        raise InputError(f"{where}: key 'estimate_s' must be seconds >= 0, not {estimate!r}")
    return Group(name, tuple(targets), None if estimate is None else float(estimate))


def load_plan(path: str | os.PathLike) -> list[Group]:
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise InputError(f"{path}: cannot read the plan: {err}") from None
    return parse_plan(data, str(path))


def expand(target: str, matrix: Matrix) -> list[str]:
    """A target with its placeholders filled in: ``{env}`` over the measured envs,
    ``{point}`` over each env's points (all envs' where ``{env}`` is absent too),
    ``{run}`` over the run indices; the matrix's order, point before repeat."""
    used = set(PLACEHOLDER.findall(target))
    envs: Iterable[str | None] = matrix.envs if used & {"env", "point"} else [None]
    out = []
    for env in envs:
        points = matrix.points.get(env, ()) if "point" in used else [None]
        for point in points:
            for run in matrix.runs if "run" in used else [None]:
                values = {"env": env, "point": point, "run": run}
                out.append(PLACEHOLDER.sub(lambda m, v=values: str(v[m.group(1)]), target))
    return out


def expand_group(group: Group, matrix: Matrix) -> list[str]:
    """Every target of the group, expanded, each once, in order."""
    return list(dict.fromkeys(t for target in group.targets for t in expand(target, matrix)))


# ---------------------------------------------------------------- one group


def start_verdict(left_s: float, reserve_s: float, estimate_s: float | None) -> str | None:
    """Why a group may not start with ``left_s`` of the budget left (None: it may)."""
    usable = left_s - reserve_s
    if usable <= 0:
        return "no time left"
    if estimate_s is not None and usable < estimate_s:
        return f"estimate {estimate_s:.0f} s > {usable:.0f} s left before the reserve"
    return None


def snakemake_command(
    snakemake: Sequence[str],
    configs: Sequence[str],
    targets: Sequence[str],
    cores: str = "all",
) -> list[str]:
    """One group's command: finished measurements are kept (mtime triggers only), an
    interrupted job is redone, and a failed target does not stop the others."""
    cmd = [*snakemake, "--cores", str(cores)]
    if configs:
        cmd += ["--configfile", *configs, "--replace-workflow-config"]
    cmd += ["--rerun-triggers", "mtime", "--rerun-incomplete", "--keep-going"]
    return cmd + list(targets)


def stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGINT to the child's process group, SIGTERM after ``grace_s``, SIGKILL last."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace_s if sig != signal.SIGKILL else 30)
            return
        except subprocess.TimeoutExpired:
            continue


def run_until(
    cmd: Sequence[str],
    deadline_s: float,
    log: TextIO,
    *,
    cwd: str | os.PathLike | None = None,
    env: dict | None = None,
    grace_s: float = GRACE_S,
) -> tuple[int | None, str | None]:
    """Run ``cmd`` in its own process group, its output into ``log``, for at most
    ``deadline_s``: (exit code, None) when it ended, (its code or None, why) when cut."""
    proc = subprocess.Popen(
        list(cmd), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        return proc.wait(timeout=max(deadline_s, 0.0)), None
    except subprocess.TimeoutExpired:
        stop_group(proc, grace_s)
        return proc.returncode, f"deadline: cut after {deadline_s:.0f} s"
    except KeyboardInterrupt:
        stop_group(proc, grace_s)
        return proc.returncode, "interrupted"


def targets_done(targets: Sequence[str], workdir: Path, ok: bool) -> int:
    """How many targets exist: a file target where its file is there, a rule name
    (no file of that name) where its snakemake ended well."""
    return sum(1 for t in targets if (workdir / t).exists() or (ok and RULE_NAME.fullmatch(t)))


# ---------------------------------------------------------------- packing


def file_targets(groups: Iterable[tuple[Group, list[str]]], folders: Iterable[str]) -> list[str]:
    """The plan's file targets outside ``folders`` (``results/predictions.csv``, say): the
    archive carries them too, so a group that makes a study-wide file loses nothing."""
    inside = tuple(f"{folder.rstrip('/')}/" for folder in folders)
    expanded = (t for _, targets in groups for t in targets)
    return list(dict.fromkeys(t for t in expanded if "/" in t and not t.startswith(inside)))


def pack(archive: Path, workdir: Path, folders: Iterable[str], files: Iterable[str] = ()) -> int:
    """The folders and files (relative to ``workdir``; those missing skipped) into
    ``archive`` (tar.gz, file times kept), written to a temporary file and renamed: a
    kill mid-pack leaves the archive before. Returns the number of files packed."""
    count = 0
    with atomic_path(archive) as tmp, tarfile.open(tmp, "w:gz") as tar:
        paths = [
            p for f in folders if (workdir / f).is_dir() for p in sorted((workdir / f).rglob("*"))
        ]
        for path in paths + [workdir / f for f in files]:
            if path.is_file() and not path.is_symlink():
                tar.add(path, arcname=str(path.relative_to(workdir)), recursive=False)
                count += 1
    return count


def digests(targets: Iterable[str], workdir: Path) -> dict[str, str]:
    """``{file target: sha256}`` of the group's file targets that exist: what a later
    commit of one (a prediction, say) can be checked against, byte for byte."""
    return {
        t: hashlib.sha256((workdir / t).read_bytes()).hexdigest()
        for t in targets
        if (workdir / t).is_file()
    }


def take_out(out: Path, target: str, dest: Path) -> str:
    """Copy the file target ``target`` out of lease folder ``out``'s archive to ``dest``,
    refused unless its bytes are the ones ``lease.json`` recorded when its group made it
    (a prediction committed from the archive is then the one the lease made). An existing
    ``dest`` is only ever rewritten with the same bytes: a committed prediction is never
    replaced. Returns the sha256."""
    record_path, archive = Path(out) / RECORD, Path(out) / ARCHIVE
    try:
        rows = json.loads(record_path.read_text())["groups"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(f"{record_path}: not a lease record ({err})") from None
    recorded = {t: (row["name"], sha) for row in rows for t, sha in row.get("sha256", {}).items()}
    if target not in recorded:
        raise InputError(
            f"{record_path}: no group made {target!r} "
            f"(made: {', '.join(recorded) or 'no file target'})"
        )
    group, want = recorded[target]
    try:
        with tarfile.open(archive, "r:gz") as tar:
            member = tar.extractfile(target)
            data = member.read() if member else b""  # not a regular file: no match below
    except (OSError, tarfile.TarError, KeyError) as err:
        raise InputError(f"{archive}: {target} cannot be read ({err})") from None
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise InputError(
            f"{archive}: {target} is not what group {group!r} made "
            f"(sha256 {got[:12]}, lease.json {want[:12]})"
        )
    dest = Path(dest)
    if dest.exists() and dest.read_bytes() != data:
        raise InputError(f"{dest} exists with other contents: a prediction is never replaced")
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)
    return want


# ---------------------------------------------------------------- the lease


@dataclass
class Lease:
    """What one lease needs: the expanded groups, the budget and where things go."""

    groups: list[tuple[Group, list[str]]]
    budget_s: float
    out: Path
    workdir: Path
    folders: list[str]
    command: Callable[[list[str]], list[str]]
    record: dict[str, Any]
    reserve_s: float = RESERVE_S
    grace_s: float = GRACE_S
    env: dict | None = None
    clock: Callable[[], float] = time.monotonic
    say: Callable[[str], None] = print


def run_lease(lease: Lease) -> list[dict[str, Any]]:
    """Run the groups in order within the budget, packing after each; the rows of
    lease.json's ``groups``."""
    lease.out.mkdir(parents=True, exist_ok=True)
    start = lease.clock()
    rows = [_row(group, targets) for group, targets in lease.groups]
    record = {**lease.record, "budget_s": lease.budget_s, "reserve_s": lease.reserve_s}
    record.update(start=_now(), end=None, groups=rows)
    stopped = None  # why later groups do not start
    extra_files = file_targets(lease.groups, lease.folders)
    for (group, targets), row in zip(lease.groups, rows, strict=True):
        left = lease.budget_s - (lease.clock() - start)
        reason = stopped or start_verdict(left, lease.reserve_s, group.estimate_s)
        if reason:
            row.update(status="skipped", reason=reason)
            continue
        row.update(status="running", start=_now())
        write_json_atomic(lease.out / RECORD, record)
        lease.say(f"lease: {group.name}: {len(targets)} targets, {left - lease.reserve_s:.0f} s")
        began = lease.clock()
        with open(lease.out / LOG, "a") as log:
            log.write(f"\n==== {group.name} ({_now()}) ====\n")
            log.flush()
            code, cut = run_until(
                lease.command(targets),
                left - lease.reserve_s,
                log,
                cwd=lease.workdir,
                env=lease.env,
                grace_s=lease.grace_s,
            )
        row.update(wall_s=round(lease.clock() - began, 1), exit_code=code)
        row["targets_done"] = targets_done(targets, lease.workdir, code == 0 and not cut)
        row["sha256"] = digests(targets, lease.workdir)
        if cut:
            row.update(status="cut", reason=cut)
            stopped = "no time left" if cut.startswith("deadline") else cut
        else:
            row.update(status="done" if code == 0 else "failed")
            row["reason"] = None if code == 0 else f"snakemake exited {code}"
        record["archive_files"] = pack(
            lease.out / ARCHIVE, lease.workdir, lease.folders, extra_files
        )
        write_json_atomic(lease.out / RECORD, record)
    record["end"] = _now()
    write_json_atomic(lease.out / RECORD, record)
    return rows


def _row(group: Group, targets: list[str]) -> dict[str, Any]:
    return {
        "name": group.name,
        "targets": len(targets),
        "estimate_s": group.estimate_s,
        "start": None,
        "wall_s": None,
        "exit_code": None,
        "status": "pending",
        "reason": None,
        "targets_done": None,
        "sha256": {},
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def lease_ok(rows: Iterable[dict[str, Any]]) -> bool:
    """Every group that started finished (a group skipped before starting is no failure)."""
    return all(row["status"] in ("done", "skipped") for row in rows)


def table(rows: Iterable[dict[str, Any]]) -> str:
    """The lease at a glance: group, status, wall time, targets done/total."""
    lines = [("group", "status", "wall", "targets")]
    for row in rows:
        wall = "-" if row["wall_s"] is None else f"{row['wall_s']:.0f} s"
        done = "-" if row["targets_done"] is None else row["targets_done"]
        status = row["status"] + (f" ({row['reason']})" if row["reason"] else "")
        lines.append((row["name"], status, wall, f"{done}/{row['targets']}"))
    widths = [max(len(str(line[i])) for line in lines) for i in range(4)]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def dry_run(groups: Iterable[tuple[Group, list[str]]]) -> str:
    """The expanded groups and their estimates, for --dry-run."""
    out = []
    for group, targets in groups:
        estimate = "none" if group.estimate_s is None else f"{group.estimate_s:.0f} s"
        out.append(f"{group.name}: {len(targets)} targets, estimate {estimate}")
        out += [f"    {target}" for target in targets]
    return "\n".join(out)
