#!/usr/bin/env python
"""Write the report's HTML sections from the study's results.

    python workflow/scripts/write_report_sections.py --config config/config.yaml \\
        --metrics results/metrics.csv --points results/roofline_points.csv \\
        --complexity results/complexity/*.json --ceilings results/*/ceilings.json \\
        --env-info results/*/env_info.json [--expected-runs runs.json] \\
        [--runs results/*/runs/*.json] [--lock requirements.lock] \\
        [--predictions results/predictions.csv] \\
        [--prediction-check results/prediction_check.csv] \\
        [--parity results/plots/prediction_parity.svg] \\
        [--energy-roofline results/plots/energy_roofline.svg] \\
        [--cluster-attempts results/cluster_attempts.csv] \\
        --outdir results/report_sections

Writes one page per report section (``dnnroofline.report.SECTIONS``, e.g. design.html)
into ``--outdir``, each atomically.
``--config`` is the study's YAML, or a JSON dump of the resolved config.
``--expected-runs`` is the study's matrix (results/study_matrix.json): a JSON list of
objects with ``env``, ``model``, ``precision``, ``batch_size`` and ``run``; without it
the runs in the ledger are the runs expected. ``--runs`` (the run JSONs) adds the
per-step time distribution of every run to the measurement section. ``--lock``
(the hashed lock file) makes the reproducibility section compare each env's
installed package versions (env_info.json ``packages``) with it. ``--predictions``,
``--prediction-check`` and ``--parity`` (the model's files) fill the model section;
without them it says there is nothing to show yet. ``--energy-roofline`` (the
energy roofline's SVG) is embedded in the energy section. ``--cluster-attempts`` (a study on
Slurm) lists its jobs that did not complete in the analysis section.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
import yaml

from dnnroofline.errors import InputError
from dnnroofline.io import write_text_atomic
from dnnroofline.lockfile import parse_lock
from dnnroofline.report import SECTION_FILES
from dnnroofline.report.sections import all_sections
from dnnroofline.study.cost import read_benchmark


def _load_config(path: str) -> dict:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(f"--config: cannot read {path}: {exc}") from exc
    try:
        cfg = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"--config: {path} is not valid YAML/JSON: {exc}") from exc
    if not isinstance(cfg, dict):
        raise InputError(f"--config: {path} must hold a mapping with 'envs' and 'study'")
    return cfg


def _load_json(path: str, what: str):
    try:
        with open(path) as fh:
            return json.load(fh)
    except OSError as exc:
        raise InputError(f"{what}: cannot read {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{what}: {path} line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg})"
        ) from exc


def _load_csv(path: str, what: str) -> pd.DataFrame:
    if not Path(path).is_file():
        raise InputError(f"{what}: no such file: {path}")
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except pd.errors.ParserError as exc:
        raise InputError(f"{what}: {path} is not a valid CSV: {exc}") from exc


def _read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise InputError(f"{what}: cannot read {path}: {exc}") from exc


def _by_env(paths: list[str], what: str) -> dict[str, dict]:
    """``{env: JSON}``; the env is the JSON's ``env`` key, else the parent folder name."""
    out: dict[str, dict] = {}
    for p in paths:
        obj = _load_json(p, what)
        if not isinstance(obj, dict):
            raise InputError(f"{what}: {p} must hold a JSON object")
        env = obj.get("env") or Path(p).resolve().parent.name
        out[str(env)] = obj
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--config", required=True, help="study config: YAML, or a JSON dump")
    ap.add_argument("--metrics", required=True, help="results/metrics.csv")
    ap.add_argument("--points", required=True, help="results/roofline_points.csv")
    ap.add_argument("--complexity", nargs="*", default=[], help="results/complexity/*.json")
    ap.add_argument("--ceilings", nargs="*", default=[], help="results/*/ceilings.json")
    ap.add_argument("--env-info", nargs="*", default=[], help="results/*/env_info.json")
    ap.add_argument("--expected-runs", help="the study matrix: JSON list of runs (optional)")
    ap.add_argument("--runs", nargs="*", default=[], help="results/*/runs/*.json (optional)")
    ap.add_argument(
        "--benchmarks", nargs="*", default=[], help="Snakemake benchmark TSVs (optional)"
    )
    ap.add_argument("--lock", help="requirements.lock: compare installed versions with it")
    ap.add_argument("--predictions", help="results/predictions.csv (the model section)")
    ap.add_argument("--prediction-check", help="results/prediction_check.csv")
    ap.add_argument("--parity", help="results/plots/prediction_parity.svg")
    ap.add_argument("--energy-roofline", help="results/plots/energy_roofline.svg")
    ap.add_argument(
        "--cluster-attempts", help="results/cluster_attempts.csv: Slurm jobs that did not complete"
    )
    ap.add_argument("--outdir", required=True, help="folder for the section pages")
    args = ap.parse_args(argv)

    try:
        config = _load_config(args.config)
        metrics = _load_csv(args.metrics, "--metrics")
        points = _load_csv(args.points, "--points")
        complexity = [_load_json(p, "--complexity") for p in args.complexity]
        ceilings = _by_env(args.ceilings, "--ceilings")
        env_infos = _by_env(args.env_info, "--env-info")
        runs = [_load_json(p, "--runs") for p in args.runs]
        benchmarks = [read_benchmark(p) for p in args.benchmarks]
        predictions = _load_csv(args.predictions, "--predictions") if args.predictions else None
        check = (
            _load_csv(args.prediction_check, "--prediction-check")
            if args.prediction_check
            else None
        )
        parity = _read_text(args.parity, "--parity") if args.parity else None
        energy_svg = (
            _read_text(args.energy_roofline, "--energy-roofline") if args.energy_roofline else None
        )
        attempts = (
            _load_csv(args.cluster_attempts, "--cluster-attempts")
            if args.cluster_attempts
            else None
        )
        lock = None
        if args.lock:
            try:
                lock_text = Path(args.lock).read_text()
            except OSError as exc:
                raise InputError(f"--lock: cannot read {args.lock}: {exc}") from exc
            lock = parse_lock(lock_text, args.lock)
        expected = None
        if args.expected_runs:
            expected = _load_json(args.expected_runs, "--expected-runs")
            if not isinstance(expected, list):
                raise InputError(
                    f"--expected-runs: {args.expected_runs} must hold a JSON list of runs"
                )
    except InputError as exc:
        print(f"write_report_sections: error: {exc}", file=sys.stderr)
        return 2

    sections = all_sections(
        config,
        metrics,
        points,
        complexity=complexity,
        ceilings=ceilings,
        env_infos=env_infos,
        expected_runs=expected,
        config_path=None if args.config.endswith(".json") else args.config,
        runs=[r for r in runs if isinstance(r, dict)],
        benchmarks=benchmarks,
        lock=lock,
        predictions=predictions,
        prediction_check=check,
        parity_svg=parity,
        cluster_attempts=attempts,
        energy_svg=energy_svg,
    )
    outdir = Path(args.outdir)
    for name in SECTION_FILES:
        write_text_atomic(outdir / name, sections[name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
