"""examples/h100/: the H100 study kept in the repository (issue 9), re-drawn here with
the current code as its README says (its results copied in, its config, no GPU).

The copied results/h100/ are read as they are: nothing of the H100 is re-run or
rewritten, its five ncu-profiled points take ncu's AI (every precision's counters passed
the self-test there), the one config the lease did not reach (resnet50 fp32) is listed
as missing, and roofline_all and the report hold them. (A CPU env measured beside copied
GPU results: tests/test_merge_gpu_results.py.)
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
import yaml
from workflow_helpers import job_counts, read_csv, snakemake, snapshot, text_of, write_config

pytestmark = pytest.mark.workflow

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h100"
CAPTURED = {
    ("resnet50", "amp", "256"),
    ("resnet50", "bf16", "256"),
    ("resnet18", "fp32", "128"),
    ("resnet18", "amp", "128"),
    ("resnet18", "bf16", "128"),
}


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("h100_merge")
    write_config(workdir, (EXAMPLE / "config.yaml").read_text())
    copied = workdir / "results" / "h100"
    shutil.copytree(EXAMPLE / "results" / "h100", copied)
    before = snapshot(sorted(p for p in copied.rglob("*") if p.is_file()))
    run = snakemake(workdir, "--cores", "2")
    report = snakemake(workdir, "--report", "results/report.html")
    after = snapshot(sorted(p for p in copied.rglob("*") if p.is_file()))
    return {"workdir": workdir, "run": run, "report": report, "before": before, "after": after}


def test_the_h100_results_are_read_never_rerun_or_rewritten(merged):
    counts = job_counts(merged["run"].stdout + merged["run"].stderr)
    assert counts["complexity"] == 2 and counts["roofline_points"] == 1
    measurements = {"env_info", "ceilings", "efficiency", "train", "trace", "ncu", "ncu_selftest"}
    assert not measurements & set(counts), counts  # nothing of the H100 is measured here
    assert merged["after"] == merged["before"]
    log = merged["run"].stdout + merged["run"].stderr
    assert "outside this study's matrix" not in log  # every copied run is in the matrix


def test_every_h100_capture_is_a_point_with_ncus_ai(merged):
    rows = read_csv(merged["workdir"] / "results" / "roofline_points.csv")
    h100 = {(r["model"], r["precision"], r["batch_size"]): r for r in rows if r["env"] == "h100"}
    assert set(h100) == CAPTURED  # resnet50 fp32: no runs, so no point
    for (model, precision, batch), point in h100.items():
        parsed = json.loads(
            (EXAMPLE / "results/h100/ncu" / f"h100_{model}_{precision}_bs{batch}.json").read_text()
        )
        assert point["ai_source"] == "ncu", point
        ai = parsed["totals"]["flop"]["total"] / parsed["totals"]["bytes"]["dram"]
        assert math.isclose(float(point["ai"]), ai, rel_tol=1e-9)
        assert point["above_roof"] == "False"
    # the figures of the committed files: the runs' median images/s, the measured roofs
    roofs = json.loads((EXAMPLE / "results/h100/ceilings.json").read_text())["roofs"]
    measured = [r for r in roofs if r["source"] == "measured"]
    amp = h100[("resnet50", "amp", "256")]
    runs = sorted((EXAMPLE / "results/h100/runs").glob("h100_resnet50_amp_bs256_run*.json"))
    images_per_s = [json.loads(run.read_text())["images_per_s"] for run in runs]
    assert len(runs) == 3
    assert float(amp["images_per_s"]) == pytest.approx(statistics.median(images_per_s), 1e-9)
    bandwidth = max(r["value"] for r in measured if r["kind"] == "memory")  # the triad's
    assert amp["bound"] == "memory" and float(amp["peak_bandwidth"]) == pytest.approx(bandwidth)
    fp32 = h100[("resnet18", "fp32", "128")]
    (best_gemm,) = [r["value"] for r in measured if r["precision"] == "fp32"]
    assert float(fp32["peak_flops"]) == pytest.approx(best_gemm)
    assert {r["env"] for r in rows} == {"h100"}


def test_roofline_all_and_the_report_hold_the_h100_study(merged):
    results = merged["workdir"] / "results"
    svg = (results / "plots" / "roofline_all.svg").read_text()
    for model, precision, batch in CAPTURED:
        assert f'id="point-h100-{model}-{precision}-bs{batch}"' in svg
    kernels = results / "plots" / "kernels"
    assert len(list(kernels.glob("roofline_kernels_h100_*.png"))) == len(CAPTURED)
    sections = results / "report_sections"
    analysis = text_of(sections / "analysis.html")
    # resnet50 fp32 has no runs (the lease ended): the matrix less the committed runs
    study = yaml.safe_load((EXAMPLE / "config.yaml").read_text())["study"]
    expected = study["runs"] * len(study["models"]) * len(study["precisions"])
    absent = expected - len(list((EXAMPLE / "results/h100/runs").glob("*.json")))
    assert f"{absent} of {expected} expected runs are absent" in analysis
    assert "h100_resnet50_fp32_bs256_run3" in analysis
    ncu = text_of(sections / "ncu_vs_analytic.html")
    assert "fp32 : counters trusted" in ncu and "bf16 : counters trusted" in ncu
    assert (results / "report.html").stat().st_size > 1_000_000


def test_a_gpu_only_config_replaces_the_default_one_in_every_job(tmp_path):
    # Snakemake runs a run: job in a new process that reads the Snakefile again without
    # --replace-workflow-config: the default config's `local` env came back, and the
    # example's amp was refused on it. No rule is a run: block now.
    write_config(tmp_path, (ROOT / "config" / "config.yaml").read_text())
    example = ["--configfile", str(EXAMPLE / "config.yaml"), "--replace-workflow-config"]
    snakemake(tmp_path, "--cores", "1", *example, "results/study_config.json")
    resolved = json.loads((tmp_path / "results" / "study_config.json").read_text())
    assert list(resolved["envs"]) == ["h100"]
    matrix = json.loads((tmp_path / "results" / "study_matrix.json").read_text())
    assert len(matrix) == 3 * 3 * 2 and not any(r["measured_here"] for r in matrix)
