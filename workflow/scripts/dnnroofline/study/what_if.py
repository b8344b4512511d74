"""The config's ``predict:`` block: points the model predicts without measuring them.

Each entry is {env, model, precision, batch}. ``env`` is an env of the study, or a GPU
of the datasheet table (``datasheet.GPU_PEAKS[].key``, e.g. ``h200_sxm``): a datasheet
GPU has no measurements of its own, so it borrows the op-class tables of a measured
CUDA env of the same architecture, scaled by the two GPUs' datasheet peaks, and says so.

Pure logic: :class:`dnnroofline.study.config.Study` passes in what it knows of its envs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dnnroofline.errors import InputError, suggest
from dnnroofline.study import datasheet, precisions

KEYS = ("env", "model", "precision", "batch")


@dataclass(frozen=True)
class WhatIf:
    """One point of the ``predict:`` block, resolved."""

    env: str  # a study env, or a datasheet GPU key
    model: str
    precision: str
    batch: int
    tables_env: str  # the study env whose roofs and op-class tables it uses
    gpu: str | None = None  # the datasheet GPU key, for a datasheet env

    @property
    def env_source(self) -> str:
        """Where the prediction's roofs and tables come from, in words."""
        if self.gpu is None:
            return "study"
        return f"datasheet {self.gpu}: tables of env {self.tables_env}, scaled by peaks"

    def record(self) -> dict[str, Any]:
        """The point as the predictions rule passes it on (JSON-ready)."""
        return {
            "env": self.env,
            "model": self.model,
            "precision": self.precision,
            "batch": self.batch,
            "tables_env": self.tables_env,
            "gpu": self.gpu,
            "env_source": self.env_source,
        }


@dataclass(frozen=True)
class StudyEnv:
    """What the check needs of a study env: its device, its GPU's architecture (None:
    not known from the config) and the precisions whose roofs it measures."""

    device: str
    architecture: str | None
    roof_precisions: tuple[str, ...]
    cpu_flags: tuple[str, ...] | None = None  # this CPU's, where the env runs here
    # measured here, or its results copied in: something to predict from
    has_results: bool = True


def check_predict(
    entries: Any,
    envs: Mapping[str, StudyEnv],
    study_models: Iterable[str],
    known_models: Iterable[str] | None = None,
) -> list[WhatIf]:
    """The ``predict:`` entries, checked and resolved; InputError naming
    ``config predict[i].<key>`` and the value at the first bad one.

    ``known_models`` are torchvision's classifier names (None: not checked, as on a
    cluster node that re-reads a config checked already).
    """
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise InputError(f"config predict: {entries!r} is not a list of points")
    models = list(study_models)
    known = None if known_models is None else set(known_models) | set(models)
    points = [_entry(i, e, envs, models, known) for i, e in enumerate(entries)]
    seen: dict[tuple, int] = {}
    for i, w in enumerate(points):
        first = seen.setdefault((w.env, w.model, w.precision, w.batch), i)
        if first != i:
            raise InputError(f"config predict[{i}]: the same point as predict[{first}]; drop one")
    return points


def _entry(
    i: int, entry: Any, envs: Mapping[str, StudyEnv], models: list, known: set | None
) -> WhatIf:
    where = f"config predict[{i}]"
    if not isinstance(entry, Mapping):
        raise InputError(f"{where}: {entry!r} is not a mapping {{{', '.join(KEYS)}}}")
    extra = [k for k in entry if k not in KEYS]
    if extra:
        raise InputError(f"{where}: unknown key {extra[0]!r}; the keys are {', '.join(KEYS)}")
    missing = [k for k in KEYS if k not in entry]
    if missing:
        raise InputError(f"{where}.{missing[0]}: missing (each point has {', '.join(KEYS)})")
    env, model, batch = entry["env"], entry["model"], entry["batch"]
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(f"{where}.batch: {batch!r} is not a batch size (an integer >= 1)")
    if known is not None and model not in known:
        raise InputError(
            f"{where}.model: unknown model {model!r}{suggest(str(model), known)}; a model "
            "of the study or any torchvision classification model"
        )
    precision = precisions.require_known(entry["precision"], f"{where}.precision")
    if env in envs:
        _check_study_env(where, env, envs[env], precision)
        if not envs[env].has_results:
            raise InputError(
                f"{where}.env: env {env!r} is not measured here (measure_envs) and no "
                f"results of it were copied in (results/{env}/env_info.json and "
                "ceilings.json): there is nothing to predict it from"
            )
        return WhatIf(env, str(model), precision, batch, tables_env=env)
    gpu = datasheet.gpu_by_key(str(env))
    if gpu is None:
        choices = [*envs, *(g.key for g in datasheet.GPU_PEAKS)]
        raise InputError(
            f"{where}.env: {env!r} is neither an env of the study ({', '.join(envs)}) nor "
            f"a datasheet GPU{suggest(str(env), choices)} (keys: "
            f"{', '.join(g.key for g in datasheet.GPU_PEAKS)})"
        )
    borrowed = borrowed_env(where, gpu, precision, envs)
    return WhatIf(env, str(model), precision, batch, tables_env=borrowed, gpu=gpu.key)


def _check_study_env(where: str, env: str, spec: StudyEnv, precision: str) -> None:
    reason = precisions.unsupported_reason(spec.device, precision, cpu_flags=spec.cpu_flags)
    if reason:
        raise InputError(
            f"{where}.precision: {precision!r} is not supported on env {env!r} "
            f"(device {spec.device}): {reason}"
        )
    if precision not in spec.roof_precisions:
        raise InputError(
            f"{where}.precision: {precision!r}: env {env!r} measures no {precision} roof or "
            f"op-class table (it measures {', '.join(spec.roof_precisions)}); add "
            f"{precision} to ceilings.precisions"
        )


def borrowed_env(
    where: str, gpu: datasheet.GpuPeaks, precision: str, envs: Mapping[str, StudyEnv]
) -> str:
    """The study env whose tables a datasheet GPU borrows: the first CUDA env of the
    GPU's architecture that measures ``precision`` and has results (measured here or
    copied in: a study may declare GPUs it does not measure on this machine);
    InputError naming the entry if none."""
    if gpu.flops(precision) is None:
        raise InputError(
            f"{where}.precision: {precision!r} on {gpu.name} (env {gpu.key!r}): its "
            "datasheet gives no such path"
        )
    same = [e for e, s in envs.items() if s.device == "cuda" and s.architecture == gpu.architecture]
    usable = [e for e in same if precision in envs[e].roof_precisions]
    with_results = [e for e in usable if envs[e].has_results]
    if with_results:
        return with_results[0]
    if usable:
        raise InputError(
            f"{where}.env: {gpu.key!r} borrows the tables of a measured {gpu.architecture} "
            f"env, but none of {', '.join(repr(e) for e in usable)} is measured here "
            "(measure_envs) or copied in (results/<env>/env_info.json and ceilings.json)"
        )
    if same:
        raise InputError(
            f"{where}.env: {gpu.key!r} borrows the tables of a measured {gpu.architecture} "
            f"env, but {', '.join(repr(e) for e in same)} measure no {precision} roof; add "
            f"{precision} to ceilings.precisions"
        )
    unknown = [e for e, s in envs.items() if s.device == "cuda" and s.architecture is None]
    hint = (
        f"; set envs.<env>.gpu_name (e.g. H100) on {', '.join(repr(e) for e in unknown)} "
        "so its architecture is known"
        if unknown
        else ""
    )
    raise InputError(
        f"{where}.env: {gpu.key!r} ({gpu.name}, {gpu.architecture}) needs a measured CUDA "
        f"env of the {gpu.architecture} architecture to borrow op-class tables from, and "
        f"the study has none{hint}"
    )


def study_envs(
    envs: Iterable[str],
    device: Callable[[str], str],
    gpu_name: Callable[[str], str | None],
    roof_precisions: Callable[[str], list[str]],
    cpu_flags: Callable[[str], Iterable[str] | None],
    has_results: Callable[[str], bool],
) -> dict[str, StudyEnv]:
    """Each study env as the check sees it, from the Study's per-env accessors."""
    out = {}
    for env in envs:
        flags = cpu_flags(env)
        out[env] = StudyEnv(
            device=device(env),
            architecture=datasheet.architecture_of(gpu_name(env)),
            roof_precisions=tuple(roof_precisions(env)),
            cpu_flags=None if flags is None else tuple(flags),
            has_results=has_results(env),
        )
    return out
