"""The study matrix: config -> envs, run ids and targets, checked before any job runs.

Pure logic: the Snakefile passes in what it learnt about the machine (the
device it has, the model names torchvision knows, whether a data folder exists).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dnnroofline.errors import InputError, suggest
from dnnroofline.study import environment, identity, precisions, what_if
from dnnroofline.study.copied import WHOLE_ENV_FILES
from dnnroofline.study.defaults import fill_defaults

# torch.compile modes an env may ask for (``compile: false`` runs eagerly).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
# Modes that record CUDA graphs: on CUDA the first call compiles and runs, the second
# records the graphs, and only the third replays them.
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
# Folders of results/ that hold no env: an env of that name would share them.
RESERVED_ENV_NAMES = ("complexity", "logs", "plots", "report_sections")


@dataclass(frozen=True)
class Run:
    env: str
    model: str
    precision: str
    batch: int
    run: int

    @property
    def config_key(self) -> str:
        return identity.config_key(self.env, self.model, self.precision, self.batch)

    @property
    def run_id(self) -> str:
        return identity.run_id(self.env, self.model, self.precision, self.batch, self.run)

    def record(self) -> dict[str, Any]:
        """The run as results/study_matrix.json lists it: its id and its identity."""
        return {
            "run_id": self.run_id,
            "env": self.env,
            "model": self.model,
            "precision": self.precision,
            "batch_size": self.batch,
            "run": self.run,
        }


def warmup_shortfall(warmup_iters: int, compile_mode: str | None) -> str | None:
    """Why ``warmup_iters`` untimed steps are too few (None when they are enough): the
    first step pays for cuDNN autotuning, allocator growth, lazy initialisation and
    compilation, and a CUDA-graph compile mode records its graphs on the second."""
    if compile_mode in CUDA_GRAPH_MODES and warmup_iters < 2:
        return (
            f"compile mode {compile_mode!r} compiles on the first step and records its CUDA "
            "graphs on the second, which would be timed; use 2 or more"
        )
    if warmup_iters < 1:
        return (
            "the first step (cuDNN autotuning, allocator growth, lazy initialisation"
            + (", compilation" if compile_mode else "")
            + ") would be timed; use 1 or more"
        )
    return None


#: Replaces the CPU's flags wherever the project reads them (detect_cpu_flags).
CPU_FLAGS_ENV = "DNNROOFLINE_CPU_FLAGS"
#: The value of CPU_FLAGS_ENV for a CPU without any flag.
NO_CPU_FLAGS = "none"


def cpu_flags_override() -> list[str] | None:
    """The flags ``DNNROOFLINE_CPU_FLAGS`` gives, lower-cased; None where it is unset.

    A comma-separated list of flags as ``/proc/cpuinfo`` spells them (``avx2,fma,
    avx512f``), or ``none`` for a CPU without any; anything else is refused, naming it."""
    value = os.environ.get(CPU_FLAGS_ENV)
    if value is None:
        return None
    if value.strip().lower() == NO_CPU_FLAGS:
        return []
    flags = [f.strip().lower() for f in value.split(",")]
    bad = [f for f in flags if not re.fullmatch(r"[a-z0-9_]+", f)]
    if bad:
        raise InputError(
            f"{CPU_FLAGS_ENV}={value!r}: {bad[0]!r} is no CPU flag; give a comma-separated "
            f"list such as 'avx2,fma,avx512_bf16', {NO_CPU_FLAGS!r} for a CPU without any, "
            "or unset it for this CPU's own flags"
        )
    return flags


def detect_cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str] | None:
    """This CPU's flags (no torch import): ``DNNROOFLINE_CPU_FLAGS`` where it is set
    (:func:`cpu_flags_override`), else ``/proc/cpuinfo``'s; None where unreadable.

    The one place the project reads the CPU's flags: the study's precision checks, the
    driver's, and the ceilings' and op-class sweep's (through ``envinfo.cpu_info``)."""
    override = cpu_flags_override()
    if override is not None:
        return override
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].split()
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class ModelSpec:
    """A model of the study: a torchvision name, or a user's ``module:callable`` factory."""

    name: str
    factory: str | None = None  # "module:callable"; None for a torchvision name
    image_size: int | None = None  # overrides study.image_size
    num_classes: int | None = None  # overrides study.num_classes
    kwargs: tuple[tuple[str, Any], ...] = ()
    batch_sizes: tuple[int, ...] = ()  # overrides study.batch_sizes (an env's override both)

    @classmethod
    def from_entry(cls, entry: Any) -> ModelSpec:
        if isinstance(entry, str):
            return cls(entry)
        kwargs = entry.get("kwargs") or {}
        return cls(
            name=str(entry["name"]),
            factory=str(entry["factory"]) if entry.get("factory") else None,
            image_size=entry.get("image_size"),
            num_classes=entry.get("num_classes"),
            kwargs=tuple(sorted(kwargs.items())),
            batch_sizes=tuple(int(b) for b in entry.get("batch_sizes") or ()),
        )

    def describe(self) -> str:
        return f"{self.name!r} (factory {self.factory})" if self.factory else repr(self.name)


def detect_gpu_count(root: str = "/proc/driver/nvidia/gpus") -> int | None:
    """NVIDIA GPUs the driver lists (no torch import); None where there is no driver."""
    try:
        return len(os.listdir(root))
    except OSError:
        return None


def device_from_drivers() -> str:
    """The best device this machine has, without importing torch (DAG building stays fast).

    cuda when the NVIDIA driver is loaded, mps on Apple silicon, else cpu. The jobs
    themselves check again with torch and refuse a machine that does not match.
    """
    if Path("/proc/driver/nvidia/version").exists():
        return "cuda"
    if sys.platform == "darwin" and os.uname().machine == "arm64":
        return "mps"
    return "cpu"


class Study:
    """The validated, expanded study of one config on one machine."""

    def __init__(
        self,
        config: dict,
        *,
        machine_device: str,
        known_models: Iterable[str] | None = None,
        path_exists: Callable[[str], bool] = os.path.exists,
        cpu_count: int | None = None,
        cpu_flags: Iterable[str] | None = None,
        cluster_cpus: dict[str, int | None] | None = None,
        gpu_count: int | None = None,
    ):
        # the schema's defaults, which the Snakefile has filled in already, filled in here
        # for a config that did not pass through it (a test's dict, a script's)
        self.config = fill_defaults(config)
        # envs whose jobs run on Slurm nodes (None: not a Slurm run), with the CPUs of
        # their partition's smallest node: this host's device and CPU are not theirs
        self.cluster_cpus = cluster_cpus
        self._gpu_count = gpu_count  # NVIDIA GPUs on this machine (None: unknown)
        self.machine_device = machine_device
        self._cpu_flags = cpu_flags  # this machine's CPU flags (None: unknown)
        self.study = config["study"]
        self.envs: dict[str, dict] = config["envs"]
        self._cpu_count = cpu_count or os.cpu_count() or 1
        self.model_specs = {
            spec.name: spec for spec in map(ModelSpec.from_entry, self.study["models"])
        }
        self._check_env_names()
        self._check_precision_names()
        self._check_models(known_models)
        self._check_data(path_exists)
        self._path_exists = path_exists
        self.measure_envs = self._pick_measure_envs()
        for env in self.envs:
            self._check_precisions(env)
            self._check_options(env)
        self._check_unambiguous()
        self._check_ncu_batch_sizes()
        # the points the model predicts without measuring them (config predict:)
        self.what_ifs = what_if.check_predict(
            config.get("predict"), self._what_if_envs(), self.models, known_models
        )
        # the earlier study this one is compared with (config compare:), None without one
        self.baseline = self._check_compare()

    @classmethod
    def here(cls, config: dict, **facts: Any) -> Study:
        """The study on this machine: its device, CPU flags and GPU count detected (the
        other facts, such as ``known_models``, as given)."""
        return cls(
            config,
            machine_device=device_from_drivers(),
            cpu_flags=detect_cpu_flags(),
            gpu_count=detect_gpu_count(),
            **facts,
        )

    # ---- per-env settings -------------------------------------------------
    def device(self, env: str) -> str:
        """The env's device; ``auto`` is this machine's device for envs measured here."""
        declared = self.envs[env]["device"]
        return self.machine_device if declared == "auto" else declared

    def threads(self, env: str) -> int:
        """CPU threads per process: ``threads``, else the cores of the machine (this one,
        or the smallest node of the env's Slurm partition) shared by the env's processes."""
        declared = self.envs[env].get("threads")
        if declared:
            return int(declared)
        cores = (self.cluster_cpus or {}).get(env) or self._cpu_count
        return max(1, cores // self.nproc(env))

    def nproc(self, env: str) -> int:
        """Data-parallel processes of the env's step (DistributedDataParallel when > 1)."""
        return int(self.envs[env]["nproc"])

    def job_threads(self, env: str) -> int:
        """The cores a job of the env holds: every process's threads (Snakemake ``threads:``)."""
        return self.nproc(env) * self.threads(env)

    def cores_shortfall(self, envs: Iterable[str], cores: int) -> str | None:
        """Why ``--cores cores`` cannot run the measurements of ``envs``, or None.

        Snakemake gives a job at most ``--cores`` threads, and a measurement given fewer
        than its env declares is refused (its numbers would belong to another config).
        """
        short = {e: self.job_threads(e) for e in sorted(set(envs)) if self.job_threads(e) > cores}
        if not short:
            return None

        def held(env: str, n: int) -> str:
            if self.nproc(env) > 1:
                return f"env {env!r}: {n} ({self.nproc(env)} processes x {self.threads(env)})"
            unset = "" if self.envs[env].get("threads") else ", threads unset: all the cores"
            return f"env {env!r}: {n}{unset}"

        what = "; ".join(held(e, n) for e, n in short.items())
        return (
            f"--cores {cores} is fewer than the threads a measurement holds ({what}): "
            f"its jobs would be refused. Run with --cores {max(short.values())} (or --cores "
            "all), or set the env's threads lower"
        )

    def compile_mode(self, env: str) -> str | None:
        """The env's torch.compile mode, None when it runs eagerly."""
        mode = self.envs[env]["compile"]
        return None if mode is False or mode is None else str(mode)

    def channels_last(self, env: str) -> bool:
        value = self.envs[env].get("channels_last")
        return bool(self.study["channels_last"] if value is None else value)

    def cudnn_benchmark(self, env: str) -> bool | None:
        """The env's cuDNN autotuning, None when it leaves the driver's default."""
        value = self.envs[env].get("cudnn_benchmark")
        return None if value is None else bool(value)

    def option_flags(self, env: str) -> list[str]:
        """Driver flags for how the env runs the step (not what it computes)."""
        flags = []
        mode = self.compile_mode(env)
        if mode:
            flags.append(f"--compile {mode}")
        if self.channels_last(env):
            flags.append("--channels-last")
        bench = self.cudnn_benchmark(env)
        if bench is not None:
            flags.append("--cudnn-benchmark" if bench else "--no-cudnn-benchmark")
        if self.nproc(env) > 1:
            flags.append(f"--nproc {self.nproc(env)}")
        return flags + environment.flags(self.environment(env))

    def environment(self, env: str) -> dict[str, str]:
        """The variables every measurement of the env runs with (envs.<env>.environment)."""
        return environment.from_config(env, self.envs[env])

    def options(self, env: str) -> dict[str, Any]:
        """The env's resolved run options, as the report and study_config.json show them."""
        return {
            "compile": self.compile_mode(env) or False,
            "channels_last": self.channels_last(env),
            "cudnn_benchmark": self.cudnn_benchmark(env),
            "nproc": self.nproc(env),
            "environment": self.environment(env),
        }

    def model_spec(self, model: str) -> ModelSpec:
        """A study model's spec; a model only the ``predict:`` block names is torchvision's."""
        return self.model_specs.get(model) or ModelSpec(model)

    def model_args(self, model: str) -> list[str]:
        """Driver/complexity flags that build the model: name, factory, input size, classes."""
        spec = self.model_spec(model)
        flags = [f"--arch {model}"]
        if spec.factory:
            flags.append(f"--model-factory {spec.factory}")
            if spec.kwargs:
                import json

                flags.append(f"--model-kwargs '{json.dumps(dict(spec.kwargs))}'")
        flags.append(f"--image-size {self.image_size(model)}")
        flags.append(f"--num-classes {self.num_classes(model)}")
        return flags

    def image_size(self, model: str) -> int:
        return int(self.model_spec(model).image_size or self.study["image_size"])

    def num_classes(self, model: str) -> int:
        return int(self.model_spec(model).num_classes or self.study["num_classes"])

    def custom_models(self) -> list[ModelSpec]:
        return [s for s in self.model_specs.values() if s.factory]

    def precisions(self, env: str) -> list[str]:
        return list(self.envs[env].get("precisions") or self.study["precisions"])

    def roof_precisions(self, env: str) -> list[str]:
        """The precisions whose roofs (and ncu self-test) the env measures: its own, then
        those of ``ceilings.precisions`` that its device runs."""
        extra = (self.config.get("ceilings") or {}).get("precisions") or []
        supported = precisions.supported(self.device(env))
        return list(dict.fromkeys([*self.precisions(env), *(p for p in extra if p in supported)]))

    def batch_sizes(self, env: str, model: str | None = None) -> list[int]:
        """The batch sizes the env runs (the model) at: the env's ``batch_sizes``, else the
        model's, else the study's. An env's limit is its machine's memory, so it wins."""
        spec = self.model_specs.get(model) if model else None
        return list(
            self.envs[env].get("batch_sizes")
            or (spec.batch_sizes if spec else ())
            or self.study["batch_sizes"]
        )

    @property
    def models(self) -> list[str]:
        return list(self.model_specs)

    @property
    def what_if_models(self) -> list[str]:
        """Models the ``predict:`` block names that the study does not run."""
        return list(dict.fromkeys(w.model for w in self.what_ifs if w.model not in self.models))

    @property
    def data(self) -> str:
        return self.study["data"]

    # ---- the matrix -------------------------------------------------------
    def runs(self, envs: Iterable[str] | None = None) -> list[Run]:
        out = []
        for env in self.envs if envs is None else envs:
            for model in self.models:
                for precision in self.precisions(env):
                    for batch in self.batch_sizes(env, model):
                        for n in range(1, int(self.study["runs"]) + 1):
                            out.append(Run(env, model, precision, batch, n))
        return out

    def configs(self, envs: Iterable[str] | None = None) -> list[Run]:
        """One Run (with run=0) per (env, model, precision, batch)."""
        seen = {}
        for r in self.runs(envs):
            seen.setdefault(r.config_key, Run(r.env, r.model, r.precision, r.batch, 0))
        return list(seen.values())

    def complexity_keys(self) -> list[tuple[str, int]]:
        keys = {(r.model, r.batch) for r in self.configs()}
        return sorted(keys)

    def profiled_configs(self) -> list[Run]:
        """The configs Nsight Compute profiles here: those of the one-process CUDA envs
        measured here, at ``ncu.batch_sizes`` where given (the others keep the analytic
        AI). Not a data-parallel env: a replayed all-reduce kernel waits for ranks that
        do not replay it, so kernel replay would hang until the ncu timeout."""
        chosen = self.ncu_batch_sizes
        envs = [e for e in self.cuda_envs_measured() if self.nproc(e) == 1]
        return [c for c in self.configs(envs) if chosen is None or c.batch in chosen]

    @property
    def ncu_batch_sizes(self) -> list[int] | None:
        chosen = (self.config.get("ncu") or {}).get("batch_sizes")
        return None if chosen is None else [int(b) for b in chosen]

    def cuda_envs_measured(self) -> list[str]:
        return [e for e in self.measure_envs if self.device(e) == "cuda"]

    # ---- checks -----------------------------------------------------------
    def _check_env_names(self) -> None:
        """Each env owns results/{env}/: no env may share a folder with another or
        with the study-wide folders, also on case-insensitive file systems (macOS)."""
        seen: dict[str, str] = {}
        for env in self.envs:
            if env.lower() in RESERVED_ENV_NAMES:
                raise InputError(
                    f"config envs.{env}: the env name {env!r} is reserved: results/{env}/ "
                    f"holds the study's own files ({', '.join(RESERVED_ENV_NAMES)} are "
                    "reserved); rename the env"
                )
            other = seen.setdefault(env.lower(), env)
            if other != env:
                raise InputError(
                    f"config envs: env names {other!r} and {env!r} differ only in case, so "
                    f"results/{other}/ and results/{env}/ are one folder on case-insensitive "
                    "file systems; rename one"
                )

    def _check_models(self, known_models: Iterable[str] | None) -> None:
        if known_models is None:
            return
        known = set(known_models)
        names = [ModelSpec.from_entry(e).name for e in self.study["models"]]
        for name in names:
            if names.count(name) > 1:
                raise InputError(
                    f"config study.models: model name {name!r} is given twice; "
                    "each entry needs its own name (the {model} of run ids)"
                )
        for spec in self.model_specs.values():
            if spec.kwargs and not spec.factory:
                raise InputError(
                    f"config study.models: model {spec.name!r} has kwargs but no factory; "
                    "kwargs go to a factory (module:callable), torchvision models take none"
                )
        for model in (s.name for s in self.model_specs.values() if not s.factory):
            if model not in known:
                raise InputError(
                    f"config study.models: unknown model {model!r}{suggest(model, known)}; "
                    "any torchvision classification model name is allowed"
                )

    def _check_ncu_batch_sizes(self) -> None:
        if self.ncu_batch_sizes is None:
            return  # every config is profiled: nothing to check, no matrix to walk
        study_batches = sorted(
            {b for env in self.envs for m in self.models for b in self.batch_sizes(env, m)}
        )
        for batch in self.ncu_batch_sizes:
            if batch not in study_batches:
                raise InputError(
                    f"config ncu.batch_sizes: {batch} is not a batch size of the study "
                    f"({', '.join(map(str, study_batches))}), so nothing would be profiled "
                    "at it"
                )

    def _check_data(self, path_exists: Callable[[str], bool]) -> None:
        data = self.data
        if data != "synthetic" and not path_exists(os.path.join(data, "train")):
            raise InputError(
                f"config study.data: {data!r} is not 'synthetic' and has no train/ folder "
                f"({os.path.join(data, 'train')!r} does not exist)"
            )

    def _pick_measure_envs(self) -> list[str]:
        chosen = self.config.get("measure_envs")
        if chosen is not None:
            for env in chosen:
                if env not in self.envs:
                    raise InputError(
                        f"config measure_envs: {env!r} is not an env in envs"
                        f"{suggest(env, self.envs)}"
                    )
            return list(chosen)
        if self.cluster_cpus is not None:  # on Slurm, each env with a partition
            return list(self.cluster_cpus)
        return [
            e for e, spec in self.envs.items() if spec["device"] in ("auto", self.machine_device)
        ]

    def _check_precision_names(self) -> None:
        """Every precision the config names is one of the study's (the schema leaves the
        names to dnnroofline.study.precisions, their one home)."""
        lists = [("study.precisions", self.study["precisions"])]
        lists += [(f"envs.{e}.precisions", spec.get("precisions")) for e, spec in self.envs.items()]
        lists.append(("ceilings.precisions", (self.config.get("ceilings") or {}).get("precisions")))
        for key, names in lists:
            for i, name in enumerate(names or []):
                precisions.require_known(name, f"config {key}[{i}]")

    def _check_precisions(self, env: str) -> None:
        device = self.device(env)
        # native bf16 on this CPU needs AVX512_BF16 or AMX (flags None: unknown, not refused)
        flags = self._cpu_flags if self._measured_on_this_cpu(env) else None
        supported = precisions.supported(device, cpu_flags=flags)
        for precision in self.precisions(env):
            reason = precisions.unsupported_reason(device, precision, cpu_flags=flags)
            if reason:
                own = self.envs[env].get("precisions")
                where = f"envs.{env}.precisions" if own else "study.precisions"
                here = " here" if supported != precisions.supported(device) else ""
                raise InputError(
                    f"config {where}: precision {precision!r} is not supported on env "
                    f"{env!r} (device {device}): {reason}. Supported on {device}{here}: "
                    f"{', '.join(supported)}"
                )

    def _what_if_envs(self) -> dict[str, what_if.StudyEnv]:
        """The study's envs as the ``predict:`` check sees them."""
        return what_if.study_envs(
            self.envs,
            device=self.device,
            gpu_name=lambda env: self.envs[env].get("gpu_name"),
            roof_precisions=self.roof_precisions,
            cpu_flags=lambda env: self._cpu_flags if self._measured_on_this_cpu(env) else None,
            has_results=self._has_results,
        )

    def _has_results(self, env: str) -> bool:
        """Measured here, or its results copied in (what the Snakefile reads as copied)."""
        return env in self.measure_envs or all(
            self._path_exists(identity.env_file(env, name)) for name in WHOLE_ENV_FILES
        )

    def _measured_on_this_cpu(self, env: str) -> bool:
        return env in self.measure_envs and env not in (self.cluster_cpus or {})

    def _check_options(self, env: str) -> None:
        device = self.device(env)
        mode = self.envs[env]["compile"]
        if mode not in (False, None, *COMPILE_MODES):
            raise InputError(
                f"config envs.{env}.compile: {mode!r} is not a compile mode "
                f"(false, {', '.join(COMPILE_MODES)})"
            )
        warmups = [("study.warmup_iters", int(self.study["warmup_iters"]))]
        perf = self.config["perf"]
        if perf.get("enabled") and device == "cpu":  # perf runs the driver on CPU envs
            warmups.append(("perf.warmup_iters", int(perf["warmup_iters"])))
        for key, warmup in warmups:
            short = warmup_shortfall(warmup, self.compile_mode(env))
            if short:
                raise InputError(f"config {key}: {warmup} for env {env!r}: {short}")
        if self.cudnn_benchmark(env) and device != "cuda":
            raise InputError(
                f"config envs.{env}.cudnn_benchmark: true on device {device}: cuDNN "
                "autotuning is a CUDA option; drop it or set device: cuda"
            )
        self._check_nproc(env, device)
        self.environment(env)

    def _check_nproc(self, env: str, device: str) -> None:
        nproc = self.envs[env].get("nproc")
        if nproc is None:
            return
        if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
            raise InputError(
                f"config envs.{env}.nproc: {nproc!r} is not a process count (an integer >= 1)"
            )
        if nproc > 1 and device == "mps":
            raise InputError(
                f"config envs.{env}.nproc: {nproc} on device mps: data-parallel training "
                "needs one device per process (cuda with NCCL, cpu with gloo); an Apple GPU "
                "is one device. Use nproc: 1 or device: cpu"
            )
        if nproc == 1 or env not in self.measure_envs:
            return  # another machine's cores and GPUs are checked there
        threads = self.envs[env].get("threads")
        if (threads or 1) * nproc > self._cpu_count:
            per = (
                f"{nproc} processes x {threads} thread{'s' if threads != 1 else ''} = "
                f"{nproc * threads} threads"
                if threads
                else f"{nproc} processes of at least 1 thread"
            )
            raise InputError(
                f"config envs.{env}.nproc: {per} exceed this machine's {self._cpu_count} "
                "cores; lower nproc or threads (threads are per process)"
            )
        if device == "cuda" and self._gpu_count is not None and nproc > self._gpu_count:
            raise InputError(
                f"config envs.{env}.nproc: {nproc} processes on device cuda, but this machine "
                f"has {self._gpu_count} GPU(s): DistributedDataParallel runs one GPU per process"
            )

    def _check_compare(self) -> Any:
        """The baseline of the ``compare:`` block (dnnroofline.study.baseline.Baseline),
        None without one. A baseline folder that is missing or holds no study, an ``envs``
        map naming an env that neither study has, or a baseline with no point of this
        study's matrix, is refused (InputError naming the key and the path)."""
        spec = self.config.get("compare")
        if not spec:
            return None
        from dnnroofline.study.baseline import (
            check_common_points,
            check_env_map,
            resolve_baseline,
        )

        baseline = resolve_baseline(spec, where="compare")
        env_map = check_env_map(spec, list(self.envs), baseline)
        points = {(r.env, r.model, r.precision, r.batch) for r in self.configs()}
        check_common_points(points, baseline, env_map)
        return baseline

    def _check_unambiguous(self) -> None:
        """Every run id and complexity key must parse back one way only."""
        seen: dict[str, Run] = {}
        for r in self.runs():
            other = seen.setdefault(r.run_id, r)
            if other != r:
                raise InputError(
                    f"config: run id {r.run_id!r} is ambiguous: env {r.env!r} + model "
                    f"{r.model!r} and env {other.env!r} + model {other.model!r} give the "
                    "same id; rename an env or model"
                )


def duplicate_yaml_keys(root: Any) -> list[tuple[str, int, int]]:
    """Keys given twice in one YAML mapping: (dotted key path, first line, repeat line).

    ``root`` is a composed YAML node (``yaml.compose(text)``; nodes are read by their
    ``id``, ``value`` and ``start_mark``, so this module needs no YAML library). YAML
    loaders keep only the last of duplicate keys, so ``envs`` listing ``local`` twice
    would silently drop one env.
    """
    out: list[tuple[str, int, int]] = []

    def walk(node: Any, path: str) -> None:
        kind = getattr(node, "id", None)
        if kind == "mapping":
            first: dict[str, int] = {}
            for key_node, value_node in node.value:
                key = str(key_node.value)
                line = key_node.start_mark.line + 1
                sub = f"{path}.{key}" if path else key
                if key in first:
                    out.append((sub, first[key], line))
                else:
                    first[key] = line
                walk(value_node, sub)
        elif kind == "sequence":
            for i, item in enumerate(node.value):
                walk(item, f"{path}[{i}]")

    walk(root, "")
    return out


def check_config_files(paths: Iterable[str | os.PathLike], compose: Callable[[str], Any]) -> None:
    """Refuse config files with a key given twice (InputError naming file, line and key).

    ``compose`` is ``yaml.compose``; text it cannot parse is left to the config loader.
    """
    for path in paths:
        try:
            root = compose(Path(path).read_text())
        except Exception:  # noqa: BLE001 - unreadable or not YAML: Snakemake reports it
            continue
        dups = duplicate_yaml_keys(root)
        if dups:
            key, first, line = dups[0]
            raise InputError(
                f"{path} line {line}: key {key!r} is given twice (first at line {first}); "
                "YAML keeps only the last one, so the first would be silently dropped. "
                "Rename or remove one"
            )


def alternation(names: Iterable[str]) -> str:
    """A regex matching exactly one of the names (longest first)."""
    names = sorted(set(names), key=len, reverse=True)
    return "|".join(re.escape(n) for n in names) if names else "(?!)"
