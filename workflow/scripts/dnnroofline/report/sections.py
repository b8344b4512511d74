"""The report's pages built from the study's inputs: one builder per entry of
:data:`dnnroofline.report.SECTIONS`, and :func:`all_sections` that runs them all.

Pure logic: no file I/O, no Snakemake. ``write_report_sections.py`` reads the
files and writes what :func:`all_sections` returns.

Inputs (see docs/contracts.md):

- ``config``: the study config (``envs``, ``study``), as loaded from YAML.
- ``metrics``: ``results/metrics.csv`` as a DataFrame, one row per run.
- ``points``: ``results/roofline_points.csv`` as a DataFrame.
- ``complexity``: the complexity JSONs (a list of dicts, or a dict of them).
- ``ceilings``: ``{env: ceilings JSON}`` (or a list of dicts with ``env``).
- ``env_infos``: ``{env: env_info JSON}`` (or a list of dicts with ``env``).
- ``expected_runs``: optional, the study's matrix (``results/study_matrix.json``): one
  dict per run with ``env``, ``model``, ``precision``, ``batch_size`` and ``run``.
  Without it the runs in the ledger are the runs expected.
- ``runs``: optional run JSONs (``step_time_s.all``): the per-run step-time
  distribution of the measurement section. Without them it uses metrics.csv.
- ``benchmarks``: optional Snakemake benchmark records (``study_cost.read_benchmark``):
  what the study itself cost, in the reproducibility section.
- ``predictions`` and ``prediction_check``: optional, ``results/predictions.csv`` and
  ``results/prediction_check.csv`` as DataFrames, and ``parity_svg``, the parity plot's
  SVG text: the model section (docs/model.md).
- ``energy_svg``: optional, the energy roofline's SVG text (results/plots/
  energy_roofline.svg): the energy section, with the runs' and ceilings' ``energy``.

``config["report"]["baseline_env"]`` names the env that speedups are computed
against; by default the first configured env with successful runs.

Failed runs never enter throughput or roofline tables: they are listed as failures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from dnnroofline.report import SECTION_NAMES, section_file
from dnnroofline.report.analysis import analysis_section
from dnnroofline.report.complexity import complexity_section
from dnnroofline.report.design import design_section
from dnnroofline.report.energy import energy_section
from dnnroofline.report.measurement import measurement_section
from dnnroofline.report.perfmodel import perfmodel_section
from dnnroofline.report.reproducibility import reproducibility_section
from dnnroofline.report.roofline import roofline_section

#: ``{section name: page builder}``: a function of the inputs (a dict with the keys
#: above, plus ``config_path``) that returns the page.
BUILDERS: dict[str, Callable[[dict], str]] = {
    "design": lambda i: design_section(
        i["config"],
        i["env_infos"],
        i["metrics"],
        i["points"],
        i["complexity"],
        i["ceilings"],
        i["expected_runs"],
    ),
    "complexity": lambda i: complexity_section(i["complexity"]),
    "measurement": lambda i: measurement_section(
        i["config"], i["env_infos"], i["metrics"], i["runs"]
    ),
    "roofline": lambda i: roofline_section(i["ceilings"], i["points"], i["config"]),
    "analysis": lambda i: analysis_section(
        i["config"],
        i["metrics"],
        i["points"],
        i["env_infos"],
        i["complexity"],
        i["ceilings"],
        i["expected_runs"],
        i["runs"],
        i["cluster_attempts"],
    ),
    "reproducibility": lambda i: reproducibility_section(
        i["config"],
        i["env_infos"],
        i["metrics"],
        i["expected_runs"],
        i["config_path"],
        i["runs"],
        i["benchmarks"],
        i["lock"],
    ),
    "model": lambda i: perfmodel_section(i["predictions"], i["prediction_check"], i["parity_svg"]),
    "energy": lambda i: energy_section(
        i["metrics"], i["ceilings"], i["runs"], i["prediction_check"], i["energy_svg"]
    ),
}


def all_sections(
    config: Mapping,
    metrics: pd.DataFrame | None,
    points: pd.DataFrame | None,
    complexity: Any = None,
    ceilings: Mapping | Sequence | None = None,
    env_infos: Mapping | Sequence | None = None,
    expected_runs: Any = None,
    config_path: str | None = None,
    runs: Sequence[Mapping] | None = None,
    benchmarks: Sequence[Mapping] | None = None,
    lock: Mapping[str, str] | None = None,
    predictions: pd.DataFrame | None = None,
    prediction_check: pd.DataFrame | None = None,
    parity_svg: str | None = None,
    cluster_attempts: pd.DataFrame | None = None,
    energy_svg: str | None = None,
) -> dict[str, str]:
    """``{filename: html}`` for the report sections (``runs``: run JSONs, optional;
    ``benchmarks``: Snakemake benchmark records, optional; ``lock``: requirements.lock's
    pins, optional; ``predictions``, ``prediction_check`` and ``parity_svg``: the model's
    files, optional; ``cluster_attempts``: results/cluster_attempts.csv, on Slurm;
    ``energy_svg``: the energy roofline, optional)."""
    inputs = {
        "config": config,
        "metrics": metrics,
        "points": points,
        "complexity": complexity,
        "ceilings": ceilings,
        "env_infos": env_infos,
        "expected_runs": expected_runs,
        "config_path": config_path,
        "runs": runs,
        "benchmarks": benchmarks,
        "lock": lock,
        "predictions": predictions,
        "prediction_check": prediction_check,
        "parity_svg": parity_svg,
        "cluster_attempts": cluster_attempts,
        "energy_svg": energy_svg,
    }
    return {section_file(name): BUILDERS[name](inputs) for name in SECTION_NAMES}
