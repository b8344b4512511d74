"""Where each env's jobs run on a Slurm cluster: the env's ``slurm`` block, checked
against the partitions ``sinfo`` lists, turned into the Slurm executor plugin's resources.

The checks are pure functions of ``sinfo``'s text and of the sbatch options the executor
plugin manages itself (its forbidden ``slurm_extra``); :func:`cluster_cpus`, which the
workflow calls when it is parsed, runs ``sinfo`` only on a Slurm run (config ``cluster:
slurm``). Every check here runs before any job is submitted. The rest reads what became
of the study's jobs: sacct's attempts that did not complete (results/cluster_attempts.csv)
and squeue's jobs of an earlier, killed snakemake (waited for or cancelled).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.study.config import suggest
from dnnroofline.study.cost import time_limit_min

# `sinfo -h -N -o SINFO_FORMAT`: one line per (node, partition).
SINFO_FORMAT = "%R|%c|%G|%f"
# The executor plugin's own GRES grammar (it refuses anything else at submission):
# name, name:count, name:type or name:type:count, with an optional size suffix.
GRES_RE = re.compile(r"^[a-zA-Z0-9_]+(:[a-zA-Z0-9_.]+)?(:\d+[KMGT]?)?$")
_COUNT_RE = re.compile(r"^(\d+)([KMGT]?)$")
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
# sbatch options that would let another job share a measurement's node.
SHARING_OPTIONS = re.compile(r"(^|\s)(--oversubscribe|-s|--share)(=|\s|$)")


@dataclass
class Partition:
    """What ``sinfo`` says about one partition's nodes."""

    name: str
    cpus: list[int] = field(default_factory=list)  # CPUs of each node
    gres: list[tuple[str, str | None, int]] = field(default_factory=list)  # (name, type, count)
    features: set[str] = field(default_factory=set)

    def describe_gres(self) -> str:
        offers = sorted({f"{n}:{t}:{c}" if t else f"{n}:{c}" for n, t, c in self.gres})
        return ", ".join(offers) if offers else "no GRES"


def is_slurm(config: Mapping) -> bool:
    """True when this run goes through Slurm: profiles/slurm sets ``cluster: slurm``."""
    return config.get("cluster") == "slurm"


def slurm_envs(config: Mapping) -> list[str]:
    """Envs with a ``slurm`` block, in config order."""
    return [env for env, spec in config["envs"].items() if spec.get("slurm")]


def ignored_blocks_warning(config: Mapping) -> str | None:
    """The warning for slurm blocks on a run that does not go through Slurm (None: none)."""
    envs = slurm_envs(config)
    if is_slurm(config) or not envs:
        return None
    keys = ", ".join(f"envs.{e}.slurm" for e in envs)
    return (
        f"{keys} ignored: this run does not go through Slurm (config cluster is not "
        "'slurm'), so every job runs here. Run the study on the cluster with "
        "`snakemake --workflow-profile profiles/slurm`."
    )


def _count(text: str) -> int | None:
    m = _COUNT_RE.match(text)
    return int(m.group(1)) * _SUFFIX[m.group(2)] if m else None


def parse_gres(text: str) -> tuple[str, str | None, int]:
    """One GRES item, ``name[:type][:count]``, as (name, type, count); count 1 if absent."""
    parts = text.split(":")
    name, kind, count = parts[0], None, 1
    if len(parts) == 2:
        n = _count(parts[1])
        kind, count = (None, n) if n is not None else (parts[1], 1)
    elif len(parts) >= 3:
        kind, count = parts[1], _count(parts[2]) or 0
    return name, kind, count


def parse_sinfo(text: str) -> dict[str, Partition]:
    """Partitions from ``sinfo -h -N -o SINFO_FORMAT`` output, by name."""
    parts: dict[str, Partition] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 4 or not fields[0]:
            continue
        name, cpus, gres, features = fields
        p = parts.setdefault(name, Partition(name))
        if cpus.rstrip("+").isdigit():
            p.cpus.append(int(cpus.rstrip("+")))
        # "gpu:a100:4(S:0-1),nvme:1": drop socket bindings, then split the items
        for item in re.sub(r"\([^)]*\)", "", gres).split(","):
            item = item.strip()
            if item and item != "(null)":
                p.gres.append(parse_gres(item))
        p.features |= {f.strip() for f in features.split(",") if f.strip() not in ("", "(null)")}
    return parts


def _check_gres(env: str, gres: str, part: Partition) -> None:
    key = f"envs.{env}.slurm.gres"
    if not GRES_RE.match(gres):
        raise InputError(
            f"config {key}: {gres!r} is not a GRES Slurm accepts here: write 'name', "
            "'name:count', 'name:type' or 'name:type:count' (e.g. 'gpu:1', 'gpu:a100:1')"
        )
    name, kind, count = parse_gres(gres)
    fits = [c for n, t, c in part.gres if n == name and (kind is None or t == kind) and c >= count]
    if not fits:
        raise InputError(
            f"config {key}: {gres!r}: no node of partition {part.name!r} has it "
            f"(sinfo lists {part.describe_gres()}); Slurm would refuse the job"
        )


def _check_constraint(env: str, constraint: str, part: Partition) -> None:
    # feature names of a Slurm constraint expression: "a100&ib", "[rack1|rack2]", "big*2"
    wanted = re.findall(r"(?<![*\w.-])[A-Za-z_][\w.-]*", constraint)
    unknown = [f for f in wanted if f not in part.features]
    if not wanted or unknown:
        have = ", ".join(sorted(part.features)) or "none"
        bad = repr(unknown[0]) if unknown else "no feature"
        raise InputError(
            f"config envs.{env}.slurm.constraint: {constraint!r}: {bad} is not a feature "
            f"of partition {part.name!r} (sinfo lists {have}); Slurm would refuse the job"
        )


def _check_extra(env: str, extra: str, forbidden: Mapping[str, str]) -> None:
    key = f"envs.{env}.slurm.extra"
    try:
        shlex.split(extra)
    except ValueError as err:
        raise InputError(
            f"config {key}: {extra!r} does not parse as sbatch options: {err}"
        ) from None
    for pattern, what in forbidden.items():
        if re.search(pattern, extra):
            raise InputError(
                f"config {key}: {extra!r} sets the {what}, which the Slurm executor sets "
                "itself: use slurm.partition, slurm.gres, slurm.constraint, the env's "
                "threads or the profile's resources instead"
            )
    if SHARING_OPTIONS.search(extra):
        raise InputError(
            f"config {key}: {extra!r} would let other jobs share a measurement's node; "
            "measurements hold their node alone (--exclusive)"
        )


def check_envs(
    config: Mapping, partitions: Mapping[str, Partition], forbidden: Mapping[str, str]
) -> None:
    """Refuse (InputError, naming key and value) a slurm block Slurm would reject.

    ``partitions`` is :func:`parse_sinfo` of this cluster; ``forbidden`` maps regexes of
    sbatch options the executor plugin manages to their names.
    """
    envs = slurm_envs(config)
    if not envs:
        raise InputError(
            "config envs: this run goes through Slurm (cluster: slurm) but no env has a "
            "slurm block, so no env would be measured: give each env that runs on the "
            "cluster its partition, e.g. envs.<env>.slurm: {partition: gpu}"
        )
    for env in envs:
        spec = config["envs"][env]
        slurm = spec["slurm"]
        if spec.get("device", "auto") == "auto":
            raise InputError(
                f"config envs.{env}.device: 'auto' on an env that runs through Slurm: the "
                "submitting host cannot detect its nodes' device; set device: cpu or cuda"
            )
        name = slurm.get("partition")
        part = partitions.get(name)
        if part is None:
            raise InputError(
                f"config envs.{env}.slurm.partition: unknown partition {name!r}"
                f"{suggest(str(name), partitions)}; sinfo lists "
                f"{', '.join(sorted(partitions)) or 'none'}"
            )
        if slurm.get("gres"):
            _check_gres(env, str(slurm["gres"]), part)
        elif spec["device"] == "cuda":
            raise InputError(
                f"config envs.{env}.slurm.gres: missing on a cuda env: without a GPU in "
                "its gres (e.g. 'gpu:1') a Slurm job sees no GPU; set it"
            )
        if slurm.get("constraint"):
            _check_constraint(env, str(slurm["constraint"]), part)
        if slurm.get("extra"):
            _check_extra(env, str(slurm["extra"]), forbidden)
        threads = spec.get("threads")
        if threads and part.cpus and threads > max(part.cpus):
            raise InputError(
                f"config envs.{env}.threads: {threads} is more than any node of partition "
                f"{name!r} has (at most {max(part.cpus)} CPUs); Slurm would refuse the job"
            )


def node_cpus(config: Mapping, partitions: Mapping[str, Partition]) -> dict[str, int | None]:
    """Per slurm env, the CPUs of its partition's smallest node (its default threads)."""
    out: dict[str, int | None] = {}
    for env in slurm_envs(config):
        part = partitions.get(config["envs"][env]["slurm"]["partition"])
        out[env] = min(part.cpus) if part and part.cpus else None
    return out


def job_resources(slurm: Mapping | None, measurement: bool) -> dict[str, str | None]:
    """The executor plugin's resources for a job of an env with this slurm block (None: the
    profile's default partition).

    A measurement gets ``--exclusive``: the node holds no other job while it runs, as the
    measurement slot keeps measurements apart on one machine (gres alone would reserve the
    GPU but share the node's CPUs, memory bandwidth and PCIe with other jobs). A None
    value leaves the resource unset (Snakemake drops it).
    """
    slurm = slurm or {}
    extra = " ".join(x for x in ("--exclusive" if measurement else "", slurm.get("extra")) if x)
    return {
        "slurm_partition": slurm.get("partition") or None,
        "gres": slurm.get("gres") or None,
        "constraint": slurm.get("constraint") or None,
        "slurm_extra": extra or None,
    }


def run_sinfo(timeout_s: float = 60) -> str:
    """``sinfo -h -N -o SINFO_FORMAT``'s output on this host (InputError: no sinfo, or it
    failed: the study runs on the cluster from one of its hosts)."""
    return slurm_output(["sinfo", "-h", "-N", "-o", SINFO_FORMAT], timeout_s)


def slurm_output(cmd: list[str], timeout_s: float, env: Mapping[str, str] | None = None) -> str:
    """A Slurm command's stdout; InputError naming the command where this host lacks it
    (the study runs on the cluster from one of its hosts) or it fails."""
    tool = cmd[0]
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, check=True, timeout=timeout_s, env=env
        )
    except FileNotFoundError:
        raise InputError(
            f"config cluster: slurm, but this host has no {tool}: run the study from a "
            "host of the Slurm cluster (a login node)"
        ) from None
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        detail = (getattr(err, "stderr", None) or str(err)).strip()
        raise InputError(f"config cluster: slurm, but {tool} failed: {detail}") from None
    return out.stdout


def executor_forbidden_options() -> Mapping[str, str]:
    """The sbatch options the executor plugin sets itself (refused in ``slurm.extra``)."""
    try:
        from snakemake_executor_plugin_slurm.validation import get_forbidden_slurm_options
    except ImportError:
        raise InputError(
            "config cluster: slurm needs Snakemake's Slurm executor plugin: "
            "pip install snakemake-executor-plugin-slurm"
        ) from None
    return get_forbidden_slurm_options()


def cluster_cpus(
    config: Mapping,
    sinfo: Callable[[], str] = run_sinfo,
    forbidden: Callable[[], Mapping[str, str]] = executor_forbidden_options,
) -> dict[str, int | None] | None:
    """The CPUs of each slurm env's nodes (:func:`node_cpus`) after its slurm block is
    checked against this cluster; None off Slurm, where nothing is run (no ``sinfo``).

    InputError names the problem: no sinfo, no executor plugin, or ("Invalid config: ...")
    a slurm block the cluster would refuse.
    """
    if not is_slurm(config):
        return None
    partitions = parse_sinfo(sinfo())
    managed = forbidden()
    try:
        check_envs(config, partitions, managed)
    except InputError as err:
        raise InputError(f"Invalid config: {err}") from None
    return node_cpus(config, partitions)


def env_resources(config: Mapping, exclusive: bool) -> dict[str, Callable[[Any], str | None]]:
    """A rule's resources on a Slurm run: per resource, a function of the job's wildcards
    giving the value for its env ``{menv}`` (:func:`job_resources`); an exclusive job (a
    measurement) holds its node alone. Empty off Slurm, where every job runs here."""
    if not is_slurm(config):
        return {}

    def resource(key: str) -> Callable[[Any], str | None]:
        def value(wildcards: Any) -> str | None:
            block = config["envs"][wildcards.menv].get("slurm")
            return job_resources(block, exclusive)[key]

        value.__name__ = key
        return value

    return {key: resource(key) for key in ("slurm_partition", "gres", "constraint", "slurm_extra")}


# `sacct -X -D -n -P -o SACCT_FORMAT` (with SLURM_TIME_FORMAT=%s): one line per job and
# run of it (-D: a requeued job's earlier runs too, each with the state it ended in).
SACCT_FORMAT = "JobID,Partition,State,Start,End,ElapsedRaw,TimelimitRaw,WorkDir%400,Comment%400"


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def parse_sacct(text: str) -> list[dict]:
    """Jobs from sacct's SACCT_FORMAT output: id, partition, state, start and end (Unix
    seconds; None while unknown), elapsed seconds, time limit (minutes), workdir, and the
    rule and wildcards that the executor plugin writes in each job's comment
    (``rule_{rule}_wildcards_{w}``)."""
    jobs = []
    for line in text.splitlines():
        fields = line.split("|", 8)
        if len(fields) != 9 or not fields[0].isdigit():
            continue
        job_id, part, state, start, end, elapsed, limit, workdir, comment = fields
        rule, _, wildcards = comment.removeprefix("rule_").partition("_wildcards_")
        jobs.append(
            {
                "id": int(job_id),
                "partition": part,
                "state": state.split()[0] if state else state,
                "start": _int(start),
                "end": _int(end),
                "elapsed": _int(elapsed),
                "time_limit": _int(limit),
                "workdir": workdir,
                "rule": rule,
                "wildcards": wildcards,
            }
        )
    return jobs


# sacct's states of a job (or a run of a requeued job) that did not complete: ended by
# Slurm (scancel, a lost node, its time limit, a requeue, ...) or by its own error
# (FAILED). COMPLETED, PENDING, RUNNING and the like are not failed attempts.
ENDED_STATES = frozenset(
    {"BOOT_FAIL", "CANCELLED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY"}
    | {"PREEMPTED", "REQUEUED", "TIMEOUT"}
)
#: results/cluster_attempts.csv's columns (docs/contracts.md)
ATTEMPT_COLUMNS = (
    "job_id",
    "rule",
    "wildcards",
    "state",
    "partition",
    "start",
    "end",
    "elapsed_s",
    "time_limit_min",
    "needed_min",
)
# how far back sacct looks for the study's jobs
SACCT_SINCE = "now-90days"


def _in(job: Mapping, here: str) -> bool:
    return bool(job["rule"]) and os.path.realpath(job["workdir"]) == here


def needed_min(job: Mapping, jobs: list[dict], workdir: str | os.PathLike) -> int | None:
    """The time limit (minutes) a job that hit its own (TIMEOUT) would need, by the cost
    model (dnnroofline.study.cost.time_limit_min): from the wall time of a later run of
    the same rule and wildcards that completed, else from how long it ran before it was
    killed (it needs more than that). None for a job of another state."""
    if job["state"] != "TIMEOUT":
        return None
    here = os.path.realpath(workdir)
    done = [
        j["elapsed"]
        for j in jobs
        if _in(j, here)
        and j["state"] == "COMPLETED"
        and (j["rule"], j["wildcards"]) == (job["rule"], job["wildcards"])
        and j["elapsed"] is not None
    ]
    return time_limit_min(max(done) if done else job["elapsed"] or 0)


def failed_attempts(jobs: list[dict], workdir: str | os.PathLike) -> list[dict]:
    """The study's Slurm jobs that did not complete: those of :func:`parse_sacct`'s
    ``jobs`` submitted by the executor (a rule in the comment) from ``workdir`` and
    ended in one of ENDED_STATES, by job id and start, as ATTEMPT_COLUMNS rows."""
    here = os.path.realpath(workdir)
    rows = []
    for job in sorted(jobs, key=lambda j: (j["id"], j["start"] or 0)):
        if not (_in(job, here) and job["state"] in ENDED_STATES):
            continue
        row = {key: job.get(key) for key in ATTEMPT_COLUMNS}
        row.update(
            job_id=job["id"],
            elapsed_s=job["elapsed"],
            time_limit_min=job["time_limit"],
            needed_min=needed_min(job, jobs, workdir),
        )
        rows.append(row)
    return rows


def run_sacct(since: str = SACCT_SINCE, timeout_s: float = 60) -> str:
    """This user's jobs since ``since`` as ``sacct -X -D -n -P -o SACCT_FORMAT`` prints
    them (times in Unix seconds); InputError when sacct is missing or fails (the executor
    plugin needs it too: Slurm's accounting must be on)."""
    cmd = ["sacct", "-X", "-D", "-n", "-P", "-S", since, "-o", SACCT_FORMAT]
    return slurm_output(cmd, timeout_s, env=dict(os.environ, SLURM_TIME_FORMAT="%s"))


def cluster_attempts(
    config: Mapping, workdir: str | os.PathLike, sacct: Callable[[], str] = run_sacct
) -> list[dict] | None:
    """The failed Slurm attempts of this folder's study (:func:`failed_attempts`) for
    results/cluster_attempts.csv; None off Slurm, where no sacct is run."""
    if not is_slurm(config):
        return None
    return failed_attempts(parse_sacct(sacct()), workdir)


def outlived_s(attempts: list[dict] | None, rule: str, wildcards: str) -> float:
    """The longest that an attempt of this job (rule and the executor's wildcards string)
    ran before its time limit killed it; 0 if none did."""
    timed_out = [
        a["elapsed_s"] or 0
        for a in attempts or ()
        if (a["rule"], a["wildcards"], a["state"]) == (rule, wildcards, "TIMEOUT")
    ]
    return float(max(timed_out, default=0))


# `squeue --me -h -o SQUEUE_FORMAT`: one line per job that Slurm holds.
SQUEUE_FORMAT = "%i|%T|%Z|%k"
# squeue's states of a job that may still run and write its outputs (squeue lists ended
# jobs too, for MinJobAge seconds)
ACTIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "PREEMPTED", "STOPPED"}
    | {"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT"}
)


def active_jobs(text: str, workdir: str | os.PathLike) -> list[dict]:
    """The executor's jobs (a rule in the comment) from ``workdir`` that squeue's
    SQUEUE_FORMAT ``text`` shows still active: id, state, rule and wildcards."""
    here = os.path.realpath(workdir)
    jobs = []
    for line in text.splitlines():
        fields = line.split("|", 3)
        if len(fields) != 4 or not fields[0].isdigit():
            continue
        job_id, state, wd, comment = fields
        rule, _, wildcards = comment.removeprefix("rule_").partition("_wildcards_")
        mine = comment.startswith("rule_") and os.path.realpath(wd) == here
        if mine and state in ACTIVE_STATES:
            jobs.append({"id": int(job_id), "state": state, "rule": rule, "wildcards": wildcards})
    return jobs


def folder_locked(workdir: str | os.PathLike) -> bool:
    """Whether Snakemake's lock of ``workdir`` is held (files in .snakemake/locks): by a
    study still running, whose jobs are its own, or by one killed before
    ``snakemake --unlock``; Snakemake refuses to run there either way."""
    locks = Path(workdir, ".snakemake", "locks")
    return locks.is_dir() and any(locks.iterdir())


def run_squeue(timeout_s: float = 60) -> str:
    """This user's jobs as ``squeue --me -h -o SQUEUE_FORMAT`` prints them."""
    return slurm_output(["squeue", "--me", "-h", "-o", SQUEUE_FORMAT], timeout_s)


def run_scancel(ids: list[int], timeout_s: float = 60) -> str:
    return slurm_output(["scancel", *map(str, ids)], timeout_s)


def settle_previous_jobs(
    config: Mapping,
    workdir: str | os.PathLike,
    log: Callable[[str], None],
    squeue: Callable[[], str] = run_squeue,
    scancel: Callable[[list[int]], Any] = run_scancel,
    sleep: Callable[[float], Any] = time.sleep,
    poll_s: float = 3.0,
    dry_run: bool = False,
) -> list[dict]:
    """Before the DAG is built: the jobs that an earlier snakemake of this folder left in
    Slurm (it was killed; its lock since removed with --unlock) are waited for or, with
    config ``previous_jobs: cancel``, cancelled, and then gone: what they finished is then
    on disk and is not measured again, and no point is submitted while its job runs.
    A dry run (``snakemake -n``) only lists them: it must neither block nor cancel.
    Returns those jobs; none off Slurm, or while the folder is locked."""
    if not is_slurm(config) or folder_locked(workdir):
        return []
    jobs = active_jobs(squeue(), workdir)
    if not jobs:
        return []
    ids = [j["id"] for j in jobs]
    listing = ", ".join(f"{j['id']} ({j['rule']} {j['wildcards']}, {j['state']})" for j in jobs)
    if dry_run:
        log(
            f"{len(jobs)} Slurm job(s) of an earlier snakemake here still run: {listing}. "
            "A real run waits for them (or cancels them, with config previous_jobs: cancel) "
            "before it plans: this dry run's plan may list their points"
        )
        return jobs
    if config.get("previous_jobs") == "cancel":  # the schema's default: wait
        log(f"Cancelling {len(jobs)} Slurm job(s) of an earlier snakemake here: {listing}")
        scancel(ids)
    else:
        log(
            f"Waiting for {len(jobs)} Slurm job(s) of an earlier snakemake here to end: "
            f"{listing}. What they finish is kept; to cancel them instead, set config "
            "previous_jobs: cancel (or scancel them)"
        )
    while any(j["id"] in ids for j in active_jobs(squeue(), workdir)):
        sleep(poll_s)
    return jobs


def executor_mismatch(executor: str, config: Mapping) -> str | None:
    """Why the executor that runs the jobs and config ``cluster`` disagree (None: they agree).

    Checked when the jobs start (the executor is known only then): a --config on the
    command line replaces the profile's, and would drop ``cluster: slurm`` silently.
    """
    if executor == "slurm" and not is_slurm(config):
        return (
            "the jobs go to Slurm (executor slurm), but config cluster is not 'slurm', so "
            "the envs' slurm blocks (partition, gres, exclusive nodes) are not applied. Run "
            "with --workflow-profile profiles/slurm; a --config on the command line replaces "
            "the profile's config, so add cluster=slurm to it"
        )
    if executor != "slurm" and is_slurm(config):
        return (
            f"config cluster is 'slurm', but the executor is {executor!r}: the jobs would "
            "run here, not on the envs' partitions. Run with --workflow-profile "
            "profiles/slurm, or drop cluster=slurm to run here"
        )
    return None
