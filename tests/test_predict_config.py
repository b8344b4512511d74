"""The config's predict: block (issue 28, item 4): what-if points checked before any job,
a bad entry refused with its key and value named, a datasheet GPU borrowing the tables of
a measured env of its architecture."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from dnnroofline.errors import InputError
from dnnroofline.study import datasheet
from dnnroofline.study.config import Study
from dnnroofline.study.schema import check_integers

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "config" / "schema.yaml"
KNOWN = ["resnet18", "resnet50", "mobilenet_v2", "vgg16"]
GOOD = {"env": "local", "model": "resnet50", "precision": "fp32", "batch": 32}


def make_config(predict=None, **envs):
    config = {
        "envs": envs or {"local": {"device": "cpu", "threads": 2}},
        "study": {"models": ["resnet18"], "precisions": ["fp32"], "batch_sizes": [8]},
    }
    if predict is not None:
        config["predict"] = predict
    return config


def copied_in(*envs):
    """``path_exists`` of a working directory holding the copied results of ``envs``."""
    return lambda path: any(path.startswith(f"results/{env}/") for env in envs)


H100_COPIED = copied_in("h100")


def make_study(config, known_models=KNOWN, path_exists=H100_COPIED):
    """The study on this CPU machine, the ``h100`` env's results copied in."""
    return Study(
        config,
        machine_device="cpu",
        known_models=known_models,
        cpu_flags=[],
        path_exists=path_exists,
    )


def gpu_envs():
    return {
        "local": {"device": "cpu", "threads": 2},
        "h100": {"device": "cuda", "gpu_name": "H100", "precisions": ["fp32", "bf16"]},
    }


@pytest.mark.parametrize(
    ("key", "value", "wanted"),
    [
        ("env", "h200", "is neither an env of the study"),
        ("model", "resnet5", "unknown model"),
        ("precision", "fp16", "unknown precision"),
        ("precision", "amp", "is not supported on env 'local'"),
        ("batch", 0, "is not a batch size"),
        ("batch", "32", "is not a batch size"),
        ("batch", True, "is not a batch size"),
    ],
)
def test_a_bad_entry_is_refused_naming_its_key_and_value(key, value, wanted):
    entry = dict(GOOD, **{key: value})
    with pytest.raises(InputError) as err:
        make_study(make_config([GOOD, entry]))
    message = str(err.value)
    assert f"config predict[1].{key}" in message
    assert repr(value) in message
    assert wanted in message


def test_a_point_given_twice_is_refused():
    with pytest.raises(InputError, match=r"config predict\[2\]: the same point as predict\[0\]"):
        make_study(make_config([GOOD, dict(GOOD, batch=64), dict(GOOD)]))


def test_a_misspelt_env_or_model_gets_suggestions():
    with pytest.raises(InputError, match=r"did you mean 'h200_sxm'"):
        make_study(make_config([dict(GOOD, env="h200_sxn")]))
    with pytest.raises(InputError, match=r"did you mean 'resnet50'"):
        make_study(make_config([dict(GOOD, model="resnet5")]))


def test_a_precision_the_env_measures_no_roof_of_is_refused():
    # the GPU runs amp, but this env measures no amp roof or op-class table
    config = make_config([dict(GOOD, env="h100", precision="amp")], **gpu_envs())
    with pytest.raises(InputError, match=r"predict\[0\]\.precision: 'amp': env 'h100' measures"):
        make_study(config)
    config["ceilings"] = {"precisions": ["amp"]}
    assert make_study(config).what_ifs[0].precision == "amp"


def test_a_study_env_what_if_uses_its_own_tables_and_any_torchvision_model():
    study = make_study(make_config([GOOD]))
    (point,) = study.what_ifs
    assert (point.env, point.model, point.precision, point.batch) == (
        "local",
        "resnet50",
        "fp32",
        32,
    )
    assert point.tables_env == "local" and point.gpu is None and point.env_source == "study"
    # a model only the predict: block names: an op inventory and a complexity file, no runs
    assert study.what_if_models == ["resnet50"]
    assert study.models == ["resnet18"]
    assert {r.model for r in study.runs()} == {"resnet18"}
    assert study.model_args("resnet50") == [
        "--arch resnet50",
        "--image-size 224",
        "--num-classes 1000",
    ]


def test_a_datasheet_gpu_borrows_a_measured_env_of_its_architecture():
    config = make_config([dict(GOOD, env="h200_sxm", precision="bf16", batch=256)], **gpu_envs())
    (point,) = make_study(config).what_ifs
    assert point.gpu == "h200_sxm" and point.tables_env == "h100"
    assert datasheet.gpu_by_key("h200_sxm").architecture == "hopper"
    assert point.env_source == "datasheet h200_sxm: tables of env h100, scaled by peaks"
    assert point.record()["env_source"] == point.env_source


def test_a_study_env_neither_measured_nor_copied_in_is_refused_naming_it():
    config = make_config([dict(GOOD, env="h100", precision="bf16")], **gpu_envs())
    with pytest.raises(InputError) as err:
        make_study(config, path_exists=copied_in())
    message = str(err.value)
    assert message.startswith("config predict[0].env: env 'h100' is not measured here")
    assert "results/h100/env_info.json and ceilings.json" in message
    # measured here (measure_envs) is enough: its results come from this study
    config["measure_envs"] = ["local", "h100"]
    assert make_study(config, path_exists=copied_in()).what_ifs[0].tables_env == "h100"


def test_a_datasheet_gpu_borrows_the_env_of_its_architecture_that_has_results():
    # two Hopper GPUs declared (one study for whichever is lent), only the second measured
    envs = {
        "h100_sweep": {"device": "cuda", "gpu_name": "H100"},
        "h200_sweep": {"device": "cuda", "gpu_name": "H200"},
    }
    entry = dict(GOOD, env="h100_sxm5", precision="fp32", batch=128)
    config = make_config([entry], **envs)
    config["measure_envs"] = ["h200_sweep"]
    (point,) = make_study(config, path_exists=copied_in()).what_ifs
    assert point.tables_env == "h200_sweep"
    # measured nowhere, copied in: the copy's tables
    del config["measure_envs"]
    (point,) = make_study(config, path_exists=copied_in("h200_sweep")).what_ifs
    assert point.tables_env == "h200_sweep"
    with pytest.raises(InputError) as err:
        make_study(config, path_exists=copied_in())
    assert str(err.value).startswith(
        "config predict[0].env: 'h100_sxm5' borrows the tables of a measured hopper env, "
        "but none of 'h100_sweep', 'h200_sweep' is measured here"
    )


def test_a_datasheet_gpu_with_no_measured_env_of_its_architecture_is_refused():
    config = make_config([GOOD, dict(GOOD, env="a100_sxm_80gb")], **gpu_envs())
    with pytest.raises(InputError) as err:
        make_study(config)
    message = str(err.value)
    assert "config predict[1].env: 'a100_sxm_80gb'" in message
    assert "needs a measured CUDA env of the ampere architecture" in message


def test_a_cuda_env_without_gpu_name_is_named_in_the_refusal():
    envs = {"gpu": {"device": "cuda"}}
    config = make_config([dict(GOOD, env="h100_sxm5")], **envs)
    with pytest.raises(InputError, match=r"set envs.<env>.gpu_name \(e.g. H100\) on 'gpu'"):
        make_study(config)


def test_the_borrowed_env_must_measure_the_precision_and_the_gpu_have_its_path():
    config = make_config([dict(GOOD, env="h200_sxm", precision="tf32")], **gpu_envs())
    with pytest.raises(InputError, match=r"predict\[0\]\.env: 'h200_sxm' .* measure no tf32 roof"):
        make_study(config)
    t4 = make_config([dict(GOOD, env="t4", precision="bf16")], **gpu_envs())
    with pytest.raises(InputError, match=r"predict\[0\]\.precision: 'bf16' on NVIDIA T4"):
        make_study(t4)


def test_every_datasheet_row_has_an_architecture_and_its_memory():
    for gpu in datasheet.GPU_PEAKS:
        assert gpu.architecture in datasheet.ARCHITECTURES, gpu.key
        assert gpu.memory_bytes >= 16 * datasheet.GIB, gpu.key
    assert datasheet.gpu_by_key("h200_sxm").memory_bytes == 141 * 2**30
    assert datasheet.gpu_by_key("l4").architecture == "ada"
    # an env's gpu_name substring, or the device's full name
    assert datasheet.architecture_of("H100") == "hopper"
    assert datasheet.architecture_of("NVIDIA A100-SXM4-40GB") == "ampere"
    assert datasheet.architecture_of("no such gpu") is None


def test_the_schema_defaults_predict_to_empty_and_refuses_bad_shapes():
    schema = yaml.safe_load(SCHEMA.read_text())
    config = make_config()
    validate(config, str(SCHEMA), set_default=True)
    assert config["predict"] == []
    assert make_study(config).what_ifs == []
    for entry, wanted in [
        (dict(GOOD, batch=0), "config predict[0].batch: bad value 0"),
        (dict(GOOD, batch=8.0), "config predict[0].batch: bad value 8.0"),
        (
            {k: v for k, v in GOOD.items() if k != "model"},
            "config predict[0]: 'model' is a required",
        ),
        (dict(GOOD, gpu="x"), "config predict[0]: unknown key 'gpu'"),
    ]:
        with pytest.raises(InputError) as err:
            check_integers(make_config([entry]), schema)
        assert wanted in str(err.value)
