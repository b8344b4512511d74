"""The model's predictions, from the study's files: ``results/predictions.csv``.

:func:`prediction_rows`: every point of the study and every what-if, predicted from the
op inventories, complexity JSONs, ceilings, op-class tables and env infos. It takes no
metrics and no runs: no point can predict itself from its own measurements. The check
against the runs is the other half, kept apart on purpose:
:mod:`dnnroofline.aggregate.check`.

No file I/O: the entry script (``predict.py``) reads and writes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dnnroofline.aggregate.perfmodel_files import (
    Point,
    find_inventory,
    format_shares,
    peak_memory,
)
from dnnroofline.errors import InputError
from dnnroofline.estimate.op_classes import step_variant
from dnnroofline.estimate.roofline import parse_roofs, roof_precisions
from dnnroofline.perfmodel import energy as en
from dnnroofline.perfmodel import op_class_tables as oct_
from dnnroofline.perfmodel import predict as pr
from dnnroofline.study import datasheet
from dnnroofline.study.what_if import StudyEnv, WhatIf, check_predict

PREDICTION_COLUMNS = [
    "env",
    "model",
    "precision",
    "batch",
    "kind",
    "env_source",
    "method",
    "predicted_step_s",
    "predicted_images_per_s",
    "predicted_device_s",
    "predicted_host_s",
    "predicted_busy_share",
    "predicted_joules_per_image",
    "interval_low_images_per_s",
    "interval_high_images_per_s",
    "interval_level",
    "bound",
    "top_classes",
    "class_shares",
    "predicted_peak_memory_bytes",
    "device_memory_bytes",
    "fits",
    "notes",
]


@dataclass(frozen=True)
class EnvFiles:
    """One study env's files as the model reads them (``efficiency`` None: derived from
    the ceilings, for an env measured before the sweep, like examples/h100)."""

    env: str
    ceilings: Mapping
    efficiency: Mapping | None = None
    env_info: Mapping | None = None
    where: str = ""  # the ceilings file
    efficiency_where: str = ""  # the efficiency file
    channels_last: bool | None = None  # the env's option, where the config gives it

    @property
    def variant(self) -> str:
        """The step variant of the env's op inventories (its device and memory format)."""
        device = self.ceilings.get("device") or (self.env_info or {}).get("device") or "cpu"
        layout = self.channels_last
        if layout is None:
            layout = bool((self.efficiency or {}).get("channels_last"))
        return step_variant(str(device), layout)


# --------------------------------------------------------------------------- machines


def env_tables_doc(files: EnvFiles) -> tuple[Mapping, str]:
    """(efficiency doc, where from) of an env: its sweep, else derived from its ceilings."""
    if files.efficiency is not None:
        where = files.efficiency_where or "efficiency.json"
        return files.efficiency, f"op-class tables of env {files.env} ({where}, sweep)"
    where = files.where or "ceilings.json"
    return oct_.tables_from_ceilings(files.ceilings, where), (
        f"op-class tables of env {files.env} derived from its ceilings.json ({where}, no sweep)"
    )


def machine_of(doc: Mapping, where: str) -> pr.Machine:
    """The model's view of one efficiency doc (``results/{env}/efficiency.json``): its
    roofs, the host's costs and the efficiency fits."""
    tables = oct_.load_tables(doc, where)
    return pr.Machine(
        device=str(doc.get("device") or ""),
        compute=dict(tables.roofs["compute"]),
        memory=tables.roofs["memory"],
        tables=tables,
        host=pr.HostCosts.from_dispatch(tables.dispatch),
        source=where,
    )


def datasheet_row_of(files: EnvFiles) -> datasheet.GpuPeaks | None:
    """The datasheet GPU of a CUDA env: its env info's GPU name, else its ceilings' row."""
    gpus = (files.env_info or {}).get("gpus") or []
    row = datasheet.lookup_gpu(gpus[0].get("name")) if gpus else None
    if row is None:
        keys = {
            r.get("datasheet_row")
            for r in files.ceilings.get("roofs") or []
            if isinstance(r, Mapping)
        }
        rows = [datasheet.gpu_by_key(k) for k in keys if k]
        row = next((r for r in rows if r is not None), None)
    return row


def device_memory_bytes(files: EnvFiles) -> int | None:
    """The env's device memory: its GPU's (CUDA) or its RAM (CPU), from its env info."""
    info = files.env_info or {}
    if info.get("device") == "cuda" or files.ceilings.get("device") == "cuda":
        gpus = info.get("gpus") or []
        value = gpus[0].get("memory_bytes") if gpus else None
        if value is None and (row := datasheet_row_of(files)) is not None:
            value = row.memory_bytes
    else:
        value = info.get("ram_bytes")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def study_env_of(files: EnvFiles) -> StudyEnv:
    """What the ``predict:`` check needs of an env, read from its files: its device, its
    GPU's architecture and the precisions it has compute roofs for."""
    device = str(files.ceilings.get("device") or (files.env_info or {}).get("device") or "")
    row = datasheet_row_of(files) if device == "cuda" else None
    where = files.where or f"ceilings of env {files.env}"
    return StudyEnv(
        device=device,
        architecture=row.architecture if row else None,
        roof_precisions=roof_precisions(parse_roofs(dict(files.ceilings), where)),
    )


def resolve_what_ifs(entries: object, envs: Mapping[str, EnvFiles]) -> list[WhatIf]:
    """The config's ``predict:`` entries, checked and resolved against the envs' files
    (:func:`dnnroofline.study.what_if.check_predict`: the config check's own rules)."""
    return check_predict(entries, {e: study_env_of(f) for e, f in envs.items()}, [])


# --------------------------------------------------------------------------- predictions


def _unpredicted_row(point: Point, why: str) -> dict:
    """A measured point's row without figures, the reason in its notes."""
    row = _point_row(point, "measured", "study")
    row.update(method="model", notes=f"no prediction: {why}")
    return {c: row.get(c, math.nan) for c in PREDICTION_COLUMNS}


def _point_row(point: Point, kind: str, env_source: str) -> dict:
    env, model, precision, batch = point
    return {
        "env": env,
        "model": model,
        "precision": precision,
        "batch": int(batch),
        "kind": kind,
        "env_source": env_source,
    }


def predict_point(
    point: Point,
    inventory: Mapping,
    machine: pr.Machine,
    *,
    complexity: Mapping | None,
    device_memory: int | None,
    kind: str = "measured",
    env_source: str = "study",
    where: str = "op inventory",
    energy: tuple[en.EnergyCosts | None, str] = (None, "no energy costs given"),
) -> dict:
    """One row of predictions.csv: the model's prediction of one point, its joules per
    image from ``energy`` (the env's costs, or None and why not). A model that cannot
    train at this size (its inventory's status ``error``) gets a row without figures, its
    reason in the notes, as its runs record theirs."""
    row = _point_row(point, kind, env_source)
    if isinstance(inventory, Mapping) and inventory.get("status") == "error":
        row.update(method="model", notes=f"no prediction: {where}: {inventory.get('message')}")
        return {c: row.get(c, math.nan) for c in PREDICTION_COLUMNS}
    p = pr.predict_step(inventory, machine, point[2], where)
    batch = int(point[3])
    peak = peak_memory(complexity, point[2])
    low, high = p.interval if p.interval else (math.nan, math.nan)
    costs, no_costs = energy
    joules, energy_note = math.nan, f"no energy prediction: {no_costs}"
    if costs is not None:
        step_j = en.step_energy(pr.inventory_ops(inventory, where), costs, point[2], p.step_s)
        joules, energy_note = step_j.joules / batch, step_j.shares_text()
    row.update(
        method="model",
        predicted_step_s=p.step_s,
        predicted_images_per_s=p.images_per_s,
        predicted_device_s=p.device_s,
        predicted_host_s=math.nan if p.host_s is None else p.host_s,
        predicted_busy_share=p.busy_share,
        predicted_joules_per_image=joules,
        interval_low_images_per_s=batch / high if p.interval else math.nan,
        interval_high_images_per_s=batch / low if p.interval else math.nan,
        interval_level=pr.INTERVAL_LEVEL if p.interval else math.nan,
        bound=p.bound,
        top_classes=pr.format_top_classes(p.top_classes),
        class_shares=format_shares(p.class_shares),
        predicted_peak_memory_bytes=peak,
        device_memory_bytes=device_memory,
        fits=None if peak is None or device_memory is None else peak <= device_memory,
        notes="; ".join([machine.source, *p.notes, energy_note]),
    )
    return row


def _inventory(
    inventories: Mapping, model: str, precision: str, batch: int, variant: str
) -> tuple[str, Mapping]:
    found = find_inventory(inventories, model, precision, batch, variant)
    if found is None:
        raise InputError(
            f"no op inventory for {model} {precision} batch {batch} as a {variant} step "
            f"(results/complexity/{model}_{precision}_bs{batch}_{variant}_ops.json)"
        )
    return found


def _what_if_machine(w: WhatIf, envs: Mapping[str, EnvFiles]) -> tuple[pr.Machine, int | None]:
    files = envs.get(w.tables_env)
    if files is None:
        raise InputError(f"what-if {w.env} {w.model}: no files of env {w.tables_env!r} to borrow")
    doc, source = env_tables_doc(files)
    if w.gpu is None:
        return machine_of(doc, source), device_memory_bytes(files)
    target = datasheet.gpu_by_key(w.gpu)
    own = datasheet_row_of(files)
    if target is None or own is None:
        missing = w.gpu if target is None else f"the GPU of env {w.tables_env}"
        raise InputError(f"what-if {w.env} {w.model}: no datasheet row for {missing}")
    scaled = oct_.scaled_for_gpu(doc, own, target)
    where = f"{source}, scaled by datasheet peaks {own.key} -> {target.key}"
    return machine_of(scaled, where), target.memory_bytes


def _what_if_energy(
    w: WhatIf, costs: Mapping[str, tuple[en.EnergyCosts | None, str]]
) -> tuple[en.EnergyCosts | None, str]:
    """A what-if's energy costs: its env's own; none for another GPU (its costs are
    measured on that GPU, never scaled from this one's)."""
    if w.gpu is not None:
        return None, f"the energy costs of {w.gpu} are not measured here"
    return costs.get(w.tables_env, (None, f"no ceilings of env {w.tables_env}"))


def prediction_rows(
    points: Iterable[Point],
    what_ifs: Iterable[WhatIf],
    inventories: Mapping[tuple[str, str, int, str], tuple[str, Mapping]],
    complexity: Mapping[tuple[str, int], tuple[str, Mapping]],
    envs: Mapping[str, EnvFiles],
) -> list[dict]:
    """Every row of predictions.csv: the study's points, then the what-ifs. No metrics in."""
    machines: dict[str, tuple[pr.Machine, int | None]] = {}
    costs = {
        e: en.costs_from_ceilings(f.ceilings, f.where or f"ceilings of env {e}")
        for e, f in envs.items()
    }
    rows = []
    for point in dict.fromkeys(tuple(p) for p in points):
        env, model, precision, batch = point
        if env not in envs:  # measured elsewhere, its results not copied in yet
            rows.append(_unpredicted_row(point, f"env {env} has no ceilings.json here"))
            continue
        try:  # an env copied in with too few benchmarks for its tables: said, not fatal
            if env not in machines:
                doc, source = env_tables_doc(envs[env])
                machines[env] = (machine_of(doc, source), device_memory_bytes(envs[env]))
            variant = envs[env].variant
            where, inventory = _inventory(inventories, model, precision, batch, variant)
            comp = complexity.get((model, int(batch)), (None, None))[1]
            machine, memory = machines[env]
            rows.append(
                predict_point(
                    point,
                    inventory,
                    machine,
                    complexity=comp,
                    device_memory=memory,
                    where=where,
                    energy=costs[env],
                )
            )
        except InputError as exc:
            rows.append(_unpredicted_row(point, str(exc)))
    for w in what_ifs:
        machine, memory = _what_if_machine(w, envs)
        borrowed = envs[w.tables_env].variant
        variant = step_variant("cuda", borrowed.endswith("_cl")) if w.gpu else borrowed
        where, inventory = _inventory(inventories, w.model, w.precision, w.batch, variant)
        comp = complexity.get((w.model, int(w.batch)), (None, None))[1]
        point = (w.env, w.model, w.precision, int(w.batch))
        rows.append(
            predict_point(
                point,
                inventory,
                machine,
                complexity=comp,
                device_memory=memory,
                kind="what_if",
                env_source=w.env_source,
                where=where,
                energy=_what_if_energy(w, costs),
            )
        )
    return rows
