"""The study matrix: config -> envs, run ids and targets, checked before any job runs.

Pure logic: the Snakefile passes in what it learnt about the machine (the
device it has, the model names torchvision knows, whether a data folder exists).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dnnroofline.ceilings import cpu_bf16_reason
from dnnroofline.errors import InputError

# Precisions each backend can train in: the one table that config validation and
# the driver both use. fp32 means TF32 off; tf32 and amp (fp16 autocast +
# GradScaler) need NVIDIA tensor cores; bf16 autocast runs on CPU and CUDA. MPS
# autocast is not validated by this driver yet, so MPS trains in fp32 only.
SUPPORTED_PRECISIONS: dict[str, tuple[str, ...]] = {
    "cpu": ("fp32", "bf16"),
    "cuda": ("fp32", "tf32", "amp", "bf16"),
    "mps": ("fp32",),
}
UNSUPPORTED_REASON = {
    ("cpu", "tf32"): "TF32 is an NVIDIA tensor-core mode",
    ("cpu", "amp"): "amp is fp16 autocast with GradScaler, which this driver runs on CUDA only",
    ("mps", "tf32"): "TF32 is an NVIDIA tensor-core mode",
    ("mps", "amp"): "fp16 autocast with GradScaler on MPS is not supported by this driver",
    ("mps", "bf16"): "bf16 autocast on MPS is not supported by this driver",
}
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
        return f"{self.env}_{self.model}_{self.precision}_bs{self.batch}"

    @property
    def run_id(self) -> str:
        return f"{self.config_key}_run{self.run}"


def detect_cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str] | None:
    """This CPU's flags from ``/proc/cpuinfo`` (no torch import); None where unreadable."""
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].split()
    except OSError:
        return None
    return None


def detect_device() -> str:
    """The best device this machine has, without importing torch (DAG building stays fast).

    cuda when the NVIDIA driver is loaded, mps on Apple silicon, else cpu. The jobs
    themselves check again with torch and refuse a machine that does not match.
    """
    if Path("/proc/driver/nvidia/version").exists() or os.environ.get("DNNROOFLINE_FAKE_CUDA"):
        return "cuda"
    if sys.platform == "darwin" and os.uname().machine == "arm64":
        return "mps"
    return "cpu"


def suggest(value: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(value, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


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
    ):
        self.config = config
        self.machine_device = machine_device
        self._cpu_flags = cpu_flags  # this machine's CPU flags (None: unknown)
        self.study = config["study"]
        self.envs: dict[str, dict] = config["envs"]
        self._cpu_count = cpu_count or os.cpu_count() or 1
        self._check_env_names()
        self._check_models(known_models)
        self._check_data(path_exists)
        self.measure_envs = self._pick_measure_envs()
        for env in self.envs:
            self._check_precisions(env)
        self._check_unambiguous()

    # ---- per-env settings -------------------------------------------------
    def device(self, env: str) -> str:
        """The env's device; ``auto`` is this machine's device for envs measured here."""
        declared = self.envs[env]["device"]
        return self.machine_device if declared == "auto" else declared

    def threads(self, env: str) -> int:
        return int(self.envs[env].get("threads") or self._cpu_count)

    def precisions(self, env: str) -> list[str]:
        return list(self.envs[env].get("precisions") or self.study["precisions"])

    def batch_sizes(self, env: str) -> list[int]:
        return list(self.envs[env].get("batch_sizes") or self.study["batch_sizes"])

    @property
    def models(self) -> list[str]:
        return list(self.study["models"])

    @property
    def data(self) -> str:
        return self.study.get("data", "synthetic")

    # ---- the matrix -------------------------------------------------------
    def runs(self, envs: Iterable[str] | None = None) -> list[Run]:
        out = []
        for env in self.envs if envs is None else envs:
            for model in self.models:
                for precision in self.precisions(env):
                    for batch in self.batch_sizes(env):
                        for n in range(1, int(self.study.get("runs", 3)) + 1):
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
        for model in self.models:
            if model not in known:
                raise InputError(
                    f"config study.models: unknown model {model!r}{suggest(model, known)}; "
                    "any torchvision classification model name is allowed"
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
        return [
            e for e, spec in self.envs.items() if spec["device"] in ("auto", self.machine_device)
        ]

    def _check_precisions(self, env: str) -> None:
        device = self.device(env)
        for precision in self.precisions(env):
            supported = list(SUPPORTED_PRECISIONS[device])
            reason = None
            if precision not in supported:
                reason = UNSUPPORTED_REASON.get((device, precision), "not supported")
            elif (device, precision) == ("cpu", "bf16") and env in self.measure_envs:
                # native bf16 needs AVX512_BF16 or AMX (flags None: unknown, not refused)
                reason = cpu_bf16_reason(self._cpu_flags) if self._cpu_flags is not None else None
                if reason:
                    supported.remove("bf16")
            if reason:
                where = "precisions" if self.envs[env].get("precisions") else "study.precisions"
                raise InputError(
                    f"config {where}: precision {precision!r} is not supported on env {env!r} "
                    f"(device {device}): {reason}. Supported on {device}"
                    f"{' here' if len(supported) < len(SUPPORTED_PRECISIONS[device]) else ''}: "
                    f"{', '.join(supported)}"
                )

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


def schema_error_message(error: object) -> str:
    """One line for a jsonschema ValidationError: the config key path, the bad value and
    what the schema wants, with close names for a misspelt key."""
    parts = [str(p) for p in getattr(error, "absolute_path", [])]
    path = ""
    for p in parts:
        path += f"[{p}]" if p.isdigit() else (f".{p}" if path else p)
    where = f"config {path}" if path else "config"
    validator = getattr(error, "validator", None)
    instance = getattr(error, "instance", None)
    schema = getattr(error, "schema", None) or {}
    message = str(getattr(error, "message", error))
    if validator == "additionalProperties" and isinstance(instance, dict):
        allowed = list((schema.get("properties") or {}).keys())
        extra = [k for k in instance if k not in allowed]
        hints = [f"{k!r}{suggest(str(k), allowed)}" for k in extra]
        return (
            f"{where}: unknown key {', '.join(hints)}; allowed keys: {', '.join(allowed)} "
            "(see config/schema.yaml)"
        )
    if validator == "propertyNames":
        return f"{where}: {message} (names: letters, digits, '_' and '-'; see config/schema.yaml)"
    if validator == "required":
        return f"{where}: {message} (see config/schema.yaml)"
    value = f" {instance!r}" if not isinstance(instance, (dict, list)) else ""
    desc = schema.get("description") if isinstance(schema, dict) else None
    return (
        f"{where}: bad value{value}: {message}"
        + (f" ({desc})" if desc else "")
        + " (see config/schema.yaml)"
    )


def alternation(names: Iterable[str]) -> str:
    """A regex matching exactly one of the names (longest first)."""
    names = sorted(set(names), key=len, reverse=True)
    return "|".join(re.escape(n) for n in names) if names else "(?!)"
