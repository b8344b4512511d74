"""The config's defaults come from config/schema.yaml alone (dnnroofline.study.defaults):
the accessor, the filling of a config that did not pass through the Snakefile, and the
command-line defaults of the scripts run by hand. tests/test_rules.py refuses a default
restated anywhere else."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from dnnroofline.study import defaults
from dnnroofline.study.config import Study

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "config" / "schema.yaml"
# the schema's own text, read apart from the accessor under test
STUDY_KEYS = yaml.safe_load(SCHEMA.read_text())["properties"]["study"]["properties"]


def bare_config() -> dict:
    return {
        "envs": {"local": {"device": "cpu", "threads": 1}},
        "study": {"models": ["resnet18"], "precisions": ["fp32"], "batch_sizes": [2]},
    }


def test_default_reads_the_schema_and_names_a_key_it_lacks():
    assert defaults.default("study.warmup_iters") == STUDY_KEYS["warmup_iters"]["default"]
    assert defaults.default("study.iters") == STUDY_KEYS["iters"]["default"]
    assert defaults.default("envs.*.nproc") == 1
    assert defaults.default("perf.executable") == "perf"
    with pytest.raises(KeyError, match="'study.models' no default"):
        defaults.default("study.models")
    with pytest.raises(KeyError, match="no config key 'study.warmup'"):
        defaults.default("study.warmup")
    # a caller changing what it got leaves the schema's default as it is
    defaults.default("ceilings")["quick"] = True
    assert defaults.default("ceilings") == {}


def test_value_is_the_given_one_else_the_schemas():
    assert defaults.value({"iters": 25}, "study.iters") == 25
    assert defaults.value({"iters": None}, "study.iters") == STUDY_KEYS["iters"]["default"]
    assert defaults.value({}, "study.runs") == STUDY_KEYS["runs"]["default"]
    assert defaults.value(None, "envs.*.compile") is False


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"perf": {"enabled": True}, "traces": {"steps": 5}},
        {"envs": {"gpu": {"device": "cuda", "slurm": {"partition": "p"}, "nproc": 2}}},
    ],
    ids=["bare", "blocks-in-part", "env-with-slurm"],
)
def test_filling_matches_the_snakefiles(extra):
    """Snakemake's validate(set_default=True), as the Snakefile runs it, and
    fill_defaults give the same config: a Study built from a bare dict runs as the
    workflow would."""
    config = bare_config()
    for key, block in extra.items():
        config[key] = {**config.get(key, {}), **block}
    by_snakemake = copy.deepcopy(config)
    validate(by_snakemake, str(SCHEMA), set_default=True)
    assert defaults.fill_defaults(config) == by_snakemake


def test_a_study_from_a_bare_config_takes_the_schemas_defaults():
    study = Study(bare_config(), machine_device="cpu", known_models=["resnet18"], cpu_flags=[])
    assert len(study.runs()) == STUDY_KEYS["runs"]["default"]
    assert study.image_size("resnet18") == STUDY_KEYS["image_size"]["default"]
    assert study.nproc("local") == 1 and study.compile_mode("local") is None
    assert study.config["study"]["warmup_iters"] == STUDY_KEYS["warmup_iters"]["default"]


def test_the_run_driver_defaults_are_the_schemas_from_any_folder(tmp_path):
    """run_train.py's flags left out are the study's defaults (they were 5 and 20 warm-up
    and timed steps where the schema said 3 and 10), also run from another folder."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from dnnroofline.measure.train_config import arg_parser\n"
        "a = arg_parser().parse_args(['--arch', 'x', '--batch-size', '2', '--out', 'o'])\n"
        "print(a.warmup_iters, a.iters, a.image_size, a.num_classes, a.workers, a.nproc)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "workflow" / "scripts")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    want = [STUDY_KEYS[k]["default"] for k in ("warmup_iters", "iters", "image_size")]
    want += [STUDY_KEYS[k]["default"] for k in ("num_classes", "workers")] + [1]
    assert [int(v) for v in out] == want
