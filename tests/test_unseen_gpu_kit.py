"""Issue 40's GPU lease, prepared before a GPU is lent (config/examples/unseen_gpu/):
the study and its plans must hold on either GPU kind, with no GPU here to try them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from dnnroofline.study.config import Study
from dnnroofline.study.schema import checked_config
from dnnroofline.tools import lease

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "config" / "examples" / "unseen_gpu"
GPUS = ("h100", "h200")
_SPEC = importlib.util.spec_from_file_location("gpu_lease", ROOT / "scripts" / "gpu_lease.py")
gpu_lease = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gpu_lease)
#: The budget of a lent machine, and what the H200 session spent outside its three
#: leases: 900 s less their 359 + 263 + 99 s of wall time (examples/h200/lease/call*.json).
DEVICE_S, OUTSIDE_LEASES_S = 900, 179


def study_on(gpu: str) -> Study:
    """The kit's study on a CUDA machine of that kind, nothing copied in."""
    files = [KIT / "study.yaml", KIT / f"on_{gpu}.yaml"]
    config: dict = {}
    for path in files:
        update_config(config, yaml.safe_load(path.read_text()))
    checked_config(config, ROOT / "config" / "schema.yaml", [str(f) for f in files])
    return Study(
        config, machine_device="cuda", cpu_flags=[], gpu_count=1, path_exists=lambda p: False
    )


def committed_points(gpu: str) -> set[tuple[str, str, int]]:
    """(model, precision, batch) of every run committed in examples/<gpu>/."""
    pattern = re.compile(rf"{gpu}_(\w+?)_(fp32|tf32|amp|bf16)_bs(\d+)_run\d+\.json")
    runs = (ROOT / "examples" / gpu / "results" / gpu / "runs").glob("*.json")
    return {(m[1], m[2], int(m[3])) for p in runs if (m := pattern.fullmatch(p.name))}


@pytest.mark.parametrize("gpu", GPUS)
def test_the_study_measures_this_gpus_env_and_predicts_every_committed_point(gpu):
    study = study_on(gpu)
    env = f"{gpu}_sweep"
    assert study.measure_envs == [env]
    assert len(study.configs([env])) == 16  # 4 models x amp, bf16 x batch 128, 256
    # the models have never run on a GPU here
    models = {c.model for c in study.configs([env])}
    assert models.isdisjoint({m for g in GPUS for m, _, _ in committed_points(g)})
    # every point of both GPU examples predicted from this env's own tables
    for example in GPUS:
        what_ifs = {(w.model, w.precision, w.batch) for w in study.what_ifs if
                    (w.env == env) == (example == gpu)}  # fmt: skip
        assert what_ifs == committed_points(example), example
    assert {w.tables_env for w in study.what_ifs} == {env}


@pytest.mark.parametrize("gpu", GPUS)
def test_the_plans_expand_to_the_studys_files_and_fit_the_device_time(gpu):
    study = study_on(gpu)
    matrix = gpu_lease.matrix_of(study)
    runs = {
        f"results/{r.env}/runs/{r.config_key}_run{r.run}.json"
        for r in study.runs(study.measure_envs)
    }
    predict = lease.load_plan(KIT / "lease_predict.yaml")
    measure = lease.load_plan(KIT / "lease_measure.yaml")
    first = [t for g in predict for t in lease.expand_group(g, matrix)]
    assert "results/predictions.csv" in first and not set(first) & runs  # nothing timed
    timed = [lease.expand_group(g, matrix) for g in measure]
    assert all(set(group) <= runs for group in timed)
    assert sorted(t for group in timed for t in group) == sorted(runs)  # each run once
    # the first two groups: the 8 points at batch 128, twice each (the minimum)
    batch_128 = {t.rsplit("_run", 1)[0] for group in timed[:2] for t in group}
    assert len(batch_128) == 8 and all(p.endswith("_bs128") for p in batch_128)
    spent = sum(g.estimate_s for g in predict) + sum(g.estimate_s for g in measure[:2])
    assert OUTSIDE_LEASES_S + spent <= DEVICE_S + 30, spent  # tight: README.md says so


def test_every_gpu_lease_call_in_the_readme_parses_and_names_the_kits_files():
    """The README's calls are run by hand inside a 30 s idle window: a flag that the
    script does not take, or a kit file that is not there, would cost the machine."""
    text = (KIT / "README.md").read_text().replace("\\\n", " ")
    calls = re.findall(r"python scripts/gpu_lease\.py ([^&`\n]*)", text)
    assert len(calls) == 2, calls  # call 1, and the take-out of its prediction
    for call in calls:
        args = gpu_lease.parse_args(call.split())
        for path in [args.plan, *args.configfile]:
            if path:
                assert (ROOT / path).is_file(), path
    take_out = gpu_lease.parse_args(calls[1].split()).take_out
    assert take_out[0] == "results/predictions.csv"
    plan = lease.load_plan(KIT / "lease_predict.yaml")
    assert take_out[0] in [t for group in plan for t in group.targets]
