"""The study's result files: what each rule reads and what ``snakemake`` (rule all) and
``snakemake measure`` make, as pure functions of the Study and the copied results found.

The paths are spelled by :mod:`dnnroofline.study.identity`; the rules (rules/*.smk) call
these lists through one :class:`Targets` built when the workflow is parsed. The report's
page names and the model's step variants belong to later stages, so the workflow passes
them in (``report_pages``, ``step_variant``), and this stage imports neither.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dnnroofline.study.config import Run, Study
from dnnroofline.study.copied import CopiedEnv
from dnnroofline.study.identity import (
    ceilings_path,
    complexity_path,
    config_file,
    env_file,
    inventory_path,
    run_path,
)
from dnnroofline.study.precisions import PRECISIONS

REPORT_DIR = "results/report_sections"
PLOTS_DIR = "results/plots"
#: The comparison's tables (config compare:), by output name of rule compare.
COMPARE_FILES = {
    name: f"results/{name}.csv"
    for name in (
        "compare",
        "compare_unmatched",
        "compare_fingerprints",
        "compare_ops",
        "compare_kernels",
        "compare_roofs",
    )
}
COMPARE_PLOT = f"{PLOTS_DIR}/compare_roofline"
#: The model's outputs: every point predicted, its check, the parity plot.
MODEL_FILES = [
    "results/predictions.csv",
    "results/prediction_check.csv",
    f"{PLOTS_DIR}/prediction_parity.svg",
]


def both_formats(stem: str) -> list[str]:
    """A static plot's two files: the PNG of the report and the SVG for papers."""
    return [f"{stem}.png", f"{stem}.svg"]


@dataclass(frozen=True)
class Targets:
    """The result files of one study on this machine.

    ``copied``: the checked copied envs (:func:`dnnroofline.study.copied.find_copied_envs`);
    ``report_pages``: the file names of the report's section pages, ``compare_page`` the
    comparison's (dnnroofline.report); ``step_variant(device, channels_last)`` and
    ``step_variants``, in order: the op inventories' step variants
    (dnnroofline.estimate.op_classes).
    """

    study: Study
    copied: tuple[CopiedEnv, ...]
    report_pages: tuple[str, ...]
    compare_page: str
    step_variant: Callable[[str, bool], str]
    step_variants: tuple[str, ...]

    # ---- the envs
    @property
    def measured(self) -> list[str]:
        return self.study.measure_envs

    def copied_envs(self) -> list[str]:
        """Envs not measured here whose (checked) results were copied into results/{env}/."""
        return [c.name for c in self.copied]

    def reported_envs(self) -> list[str]:
        return self.measured + self.copied_envs()

    def single_process_envs(self) -> list[str]:
        """Envs measured here that run the step in one process: one trace file."""
        return [e for e in self.measured if self.study.nproc(e) == 1]

    def data_parallel_envs(self) -> list[str]:
        """Envs measured here with nproc > 1: a folder of traces, one per rank."""
        return [e for e in self.measured if self.study.nproc(e) > 1]

    # ---- runs, roofs and fingerprints
    def run_files(self) -> list[str]:
        """Runs measured here, plus the copied runs whose id is in the study's matrix for
        their env (:meth:`copied_runs_outside` names the others)."""
        files = [run_path(r.env, r.run_id) for r in self.study.runs(self.measured)]
        for env in self.copied:
            wanted = [run_path(r.env, r.run_id) for r in self.study.runs([env.name])]
            files += [f for f in wanted if f in env.runs]
        return files

    def copied_runs_outside(self) -> dict[str, list[str]]:
        """Per copied env, its runs outside the study's matrix (left out of metrics.csv)."""
        out = {}
        for env in self.copied:
            wanted = {run_path(r.env, r.run_id) for r in self.study.runs([env.name])}
            extra = sorted(set(env.runs) - wanted)
            if extra:
                out[env.name] = extra
        return out

    def copied_runs_warnings(self) -> list[str]:
        """One warning per copied env with runs outside the matrix, naming the first five."""
        warnings = []
        for env, extra in self.copied_runs_outside().items():
            names = ", ".join(os.path.basename(f) for f in extra[:5])
            warnings.append(
                f"{len(extra)} copied run(s) of env {env!r} are outside this study's matrix "
                "and left out of metrics.csv (add their model/batch/precision/repeat to the "
                f"config to include them): {names}" + (" ..." if len(extra) > 5 else "")
            )
        return warnings

    def ceilings_files(self) -> list[str]:
        return [ceilings_path(env) for env in self.reported_envs()]

    def env_info_files(self) -> list[str]:
        return [env_file(env, "env_info.json") for env in self.reported_envs()]

    def efficiency_files(self) -> list[str]:
        """The op-class tables: made here for the envs measured here, read where a copied
        env has one (one without: its ceilings.json gives the tables)."""
        files = [env_file(env, "efficiency.json") for env in self.measured]
        return files + [env_file(c.name, "efficiency.json") for c in self.copied if c.efficiency]

    def complexity_files(self) -> list[str]:
        return [complexity_path(m, b) for m, b in self.study.complexity_keys()]

    # ---- ncu and perf
    def ncu_files(self) -> list[str]:
        """The parsed captures: of the CUDA envs measured here, and every copied one."""
        files = [_config_path(c, "ncu", ".json") for c in self.study.profiled_configs()]
        for env in self.copied:
            files += env.ncu
        return files

    def env_ncu_files(self, env: str) -> list[str]:
        """The ncu captures of one env (its interactive roofline draws their kernels)."""
        return [f for f in self.ncu_files() if f.startswith(env_file(env, "ncu/"))]

    def ncu_configs(self) -> list[Run]:
        """Every config with an ncu capture: CUDA envs measured here, and captures copied
        in from other machines (a copied capture of a config this study lists)."""
        configs = self.study.profiled_configs()
        for env in self.copied:
            by_path = {_config_path(c, "ncu", ".json"): c for c in self.study.configs([env.name])}
            configs += [by_path[f] for f in env.ncu if f in by_path]
        return configs

    def selftest_files(self) -> list[str]:
        """The counter self-test of each CUDA env measured here, and of copied envs that
        have one."""
        envs = self.study.cuda_envs_measured() + [c.name for c in self.copied if c.selftest]
        return [env_file(env, "ncu/selftest.json") for env in envs]

    def ncu_targets(self) -> list[str]:
        """Per config with a capture, its kernel and hierarchical rooflines; the page
        comparing ncu's counts with the analytic ones."""
        files = []
        for c in self.ncu_configs():
            for kind in ("kernels", "hierarchical"):
                files += both_formats(f"{PLOTS_DIR}/kernels/roofline_{kind}_{c.config_key}")
        return files + [f"{REPORT_DIR}/ncu_vs_analytic.html"]

    def perf_configs(self) -> list[Run]:
        """Configs with CPU counters (perf.enabled): those of the CPU envs measured here."""
        if not self.study.config["perf"]["enabled"]:
            return []
        return self.study.configs([e for e in self.measured if self.study.device(e) == "cpu"])

    def perf_files(self) -> list[str]:
        return [_config_path(c, "perf", ".json") for c in self.perf_configs()]

    # ---- traces
    @property
    def traces_enabled(self) -> bool:
        return bool(self.study.config["traces"]["enabled"])

    def trace_out(self, env: str, key: str) -> str:
        """A config's trace file: X.json, in a data-parallel env's folder X.ranks/, where
        rank i writes X.rank{i}.json."""
        if self.study.nproc(env) > 1:
            return config_file(env, "traces", key, f".ranks/{key}.json")
        return config_file(env, "traces", key, ".json")

    def trace_output(self, c: Run) -> str:
        """A config's trace output: its trace file, or a data-parallel env's folder."""
        return _config_path(c, "traces", ".ranks" if self.study.nproc(c.env) > 1 else ".json")

    def trace_configs(self) -> list[Run]:
        """Configs with a trace: every config measured here, and the traces copied in
        with another machine's results/{env}/traces/."""
        if not self.traces_enabled:
            return []
        configs = self.study.configs(self.measured)
        for env in self.copied:
            configs += [
                c
                for c in self.study.configs([env.name])
                if _config_path(c, "traces", ".ops.json") in env.trace_tables
            ]
        return configs

    def trace_tables(self) -> list[str]:
        return [_config_path(c, "traces", ".ops.json") for c in self.trace_configs()]

    def trace_files(self) -> list[str]:
        """Trace files of the configs measured here (copied ones are read, never made)."""
        if not self.traces_enabled:
            return []
        files = []
        for c in self.study.configs(self.measured):
            files += [self.trace_output(c)]
            files += [_config_path(c, "traces", suffix) for suffix in (".ops.json", ".ops.csv")]
        return files

    def trace_targets(self) -> list[str]:
        """The trace files, and the report section made of them."""
        if not self.traces_enabled:
            return []
        return self.trace_files() + [f"{REPORT_DIR}/traces.html"]

    # ---- the model's inputs: microbenchmarks and op inventories, never a timed run
    def env_step_variant(self, env: str) -> str:
        """The step variant of an env's op inventories: its device and channels_last."""
        return self.step_variant(self.study.device(env), self.study.channels_last(env))

    def predicted_points(self) -> list[tuple[str, str, int, str]]:
        """(model, precision, batch, step variant) of every point predicted: the study's
        and the what-ifs' (one on a datasheet GPU in the memory format of the env whose
        tables it borrows)."""
        points = {
            (c.model, c.precision, c.batch, self.env_step_variant(c.env))
            for c in self.study.configs()
        }
        for w in self.study.what_ifs:
            if w.gpu is None:
                step = self.env_step_variant(w.env)
            else:
                step = self.step_variant("cuda", self.study.channels_last(w.tables_env))
            points.add((w.model, w.precision, w.batch, step))
        return sorted(points)

    def inventory_steps(self) -> list[tuple[str, str]]:
        """Every (precision, step variant) some predicted point is in, in their orders:
        each complexity job writes the inventories of them all."""
        predicted = {(precision, step) for _, precision, _, step in self.predicted_points()}
        return [(p, s) for p in PRECISIONS for s in self.step_variants if (p, s) in predicted]

    def inventory_files(self) -> list[str]:
        """The op inventory of every point predicted, in the step variant of its env."""
        return sorted({inventory_path(*point) for point in self.predicted_points()})

    def predicted_complexity_files(self) -> list[str]:
        """The complexity JSON of every point predicted (what-ifs included)."""
        keys = {(model, batch) for model, _, batch, _ in self.predicted_points()}
        return [complexity_path(m, b) for m, b in sorted(keys)]

    # ---- what the report and the targets list
    def benchmark_files(self) -> list[str]:
        """Benchmark TSVs read by the report's "what the study itself cost".

        Not the TSVs of the timed runs (their run JSONs give that stage), env_info or perf:
        a finished job whose TSV is missing (results made before it had one) would re-run
        to write it, a measurement re-run for a report figure.
        """
        files = [
            f"results/benchmarks/complexity/{m}_bs{b}.tsv" for m, b in self.study.complexity_keys()
        ]
        files += [env_file(env, "benchmarks/ceilings.tsv") for env in self.measured]
        files += [
            env_file(env, "benchmarks/ncu/selftest.tsv") for env in self.study.cuda_envs_measured()
        ]
        files += [_config_path(c, "benchmarks/ncu", ".tsv") for c in self.study.profiled_configs()]
        if self.traces_enabled:
            configs = self.study.configs(self.measured)
            files += [_config_path(c, "benchmarks/traces", ".tsv") for c in configs]
        return files

    def plot_files(self) -> list[str]:
        """The static rooflines (per env and all), the energy roofline, the throughput plot,
        the interactive rooflines (self-contained HTML)."""
        files = []
        for name in [f"roofline_{env}" for env in self.reported_envs()] + [
            "roofline_all",
            "energy_roofline",
            "throughput",
        ]:
            files += both_formats(f"{PLOTS_DIR}/{name}")
        return files + [f"{PLOTS_DIR}/roofline_{e}.html" for e in self.reported_envs() + ["all"]]

    def compare_targets(self) -> list[str]:
        """The comparison's tables, its arrows plot and its report page: only with a
        compare: block."""
        if self.study.baseline is None:
            return []
        return (
            list(COMPARE_FILES.values())
            + both_formats(COMPARE_PLOT)
            + [f"{REPORT_DIR}/{self.compare_page}"]
        )

    def all_targets(self) -> list[str]:
        """What ``snakemake`` makes (rule all)."""
        return (
            ["results/metrics.csv", "results/roofline_points.csv"]
            + self.plot_files()
            + [f"{REPORT_DIR}/{page}" for page in self.report_pages]
            + self.efficiency_files()
            + MODEL_FILES
            + self.compare_targets()
            + self.ncu_targets()
            + self.perf_files()
            + self.trace_targets()
        )

    def measure_targets(self) -> list[str]:
        """Every measurement of the envs measured here, and nothing made from them: the
        fingerprint, roofs, op-class tables, timed runs, traces, the ncu self-test and
        captures, perf counts (``snakemake measure``)."""
        whole = ("env_info.json", "ceilings.json")
        files = [env_file(env, name) for env in self.measured for name in whole]
        files += [env_file(env, "efficiency.json") for env in self.measured]
        files += [run_path(r.env, r.run_id) for r in self.study.runs(self.measured)]
        files += [env_file(env, "ncu/selftest.json") for env in self.study.cuda_envs_measured()]
        files += [_config_path(c, "ncu", ".json") for c in self.study.profiled_configs()]
        return files + self.trace_files() + self.perf_files()


def _config_path(c: Run, folder: str, suffix: str) -> str:
    return config_file(c.env, folder, c.config_key, suffix)


# ---- the baseline of a comparison (config compare:): its files are inputs of the
# comparison alone, so a changed baseline re-runs the comparison and nothing else


def here_or_absolute(path: str | os.PathLike) -> str:
    """A baseline file as an input: relative to the working directory where it lies under
    it (a baseline kept in the checkout, as CI's baseline/results/), absolute elsewhere."""
    path = os.path.abspath(path)
    rel = os.path.relpath(path)
    return path if rel.startswith(os.pardir) else rel


def existing_paths(*found: str | os.PathLike | Iterable | None) -> list[str]:
    """The files among ``found`` that exist: each None (a file the baseline lacks), one
    path or a list of them."""
    out = []
    for item in found:
        if item is None:
            continue
        if isinstance(item, (str, os.PathLike)):
            if os.path.isfile(item):
                out.append(here_or_absolute(item))
        else:
            out += existing_paths(*item)
    return out


def baseline_inputs(baseline) -> list[str]:
    """Every file of the baseline (dnnroofline.study.baseline.Baseline) that the comparison
    reads: its ledgers and resolved config, and per env its runs, fingerprint, roofs,
    trace tables and ncu captures."""
    files = existing_paths(baseline.metrics(), baseline.roofline_points(), baseline.study_config())
    for env in baseline.envs:
        files += existing_paths(
            baseline.run_files(env),
            baseline.env_info(env),
            baseline.ceilings(env),
            baseline.trace_ops(env),
            baseline.ncu_files(env),
        )
    return sorted(set(files))
