"""A user's own model (study.models mapping entries): bad entries refused, the CIFAR ResNet run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dnnroofline.errors import InputError
from dnnroofline.estimate.complexity import complexity
from dnnroofline.study.families import FAMILY_PATTERNS, model_family
from dnnroofline.study.models import check_factory, model_kwargs_arg, torchvision_classifiers

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT / "tests" / "data" / "models"


@pytest.fixture(autouse=True)
def tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(MODELS_DIR))


@pytest.mark.parametrize(
    "factory, expected",
    [
        (
            "broken_import:anything",
            "cannot import module 'broken_import': ModuleNotFoundError: "
            "No module named 'a_module_that_does_not_exist'",
        ),
        ("tiny_models:no_such", "module 'tiny_models' has no callable 'no_such'"),
        ("tiny_models:not_a_module", "returned dict, not a torch.nn.Module"),
        (
            "tiny_models:needs_large_input",
            "forward pass fails at input shape [2, 3, 8, 8]: RuntimeError",
        ),
    ],
)
def test_bad_model_entry_is_refused_naming_the_entry(factory, expected):
    with pytest.raises(InputError) as err:
        check_factory("mine", factory, {}, 8, 10)
    msg = str(err.value)
    assert msg.startswith(f"config study.models entry 'mine' (factory {factory})")
    assert expected in msg


def test_wrong_output_shape_is_refused():
    with pytest.raises(InputError, match=r"gives output shape \[2, 7\], expected \[2, 10\]"):
        check_factory("mine", "tiny_models:tiny_cnn", {"num_classes": 7}, 8, 10)


def test_a_passed_check_is_kept_until_the_factory_or_its_entry_changes(tmp_path, monkeypatch):
    """Every snakemake command checks its models: a passed check is kept, keyed by the
    .py files of the factory's folder, torch's install and the entry; a failed one is not."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "mine"
    folder.mkdir()
    calls = tmp_path / "calls"
    (folder / "counted_models.py").write_text(
        "from torch import nn\n"
        "def net(num_classes=10, fail=False):\n"
        f"    with open({str(calls)!r}, 'a') as fh:\n"
        "        fh.write('x')\n"
        "    if fail:\n"
        "        raise ValueError('told to fail')\n"
        "    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "counted_models", raising=False)

    def built() -> int:
        return len(calls.read_text()) if calls.exists() else 0

    check_factory("mine", "counted_models:net", {}, 8, 10)
    check_factory("mine", "counted_models:net", {}, 8, 10)
    assert built() == 1  # read back
    check_factory("mine", "counted_models:net", {}, 16, 10)  # another image size
    assert built() == 2
    (folder / "helpers.py").write_text("WIDTH = 4\n")  # a file beside it: checked again
    check_factory("mine", "counted_models:net", {}, 8, 10)
    assert built() == 3
    for _ in range(2):  # a failed check is never kept
        with pytest.raises(InputError, match="failed: ValueError: told to fail"):
            check_factory("mine", "counted_models:net", {"fail": True}, 8, 10)
    assert built() == 5
    assert len(list((tmp_path / "cache" / "dnnroofline").glob("model_check_*.json"))) == 3


def test_cifar_resnet_checks_computes_complexity_and_trains(tmp_path):
    factory = "examples.models.cifar_resnet:resnet18"
    check_factory("cifar_resnet18", factory, {}, 32, 10)
    c = complexity("cifar_resnet18", batch_size=2, image_size=32, num_classes=10, factory=factory)
    assert c["arch"] == "cifar_resnet18" and c["num_classes"] == 10
    out = tmp_path / "run.json"
    args = ["--arch", "cifar_resnet18", "--model-factory", factory, "--image-size", "32"]
    args += ["--num-classes", "10", "--batch-size", "2", "--synthetic", "--backend", "cpu"]
    args += ["--warmup-iters", "1", "--iters", "2", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "workflow" / "scripts" / "run_train.py"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": ""},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert rec["status"] == "ok", rec["message"]
    assert rec["config"]["model_factory"] == factory
    assert rec["config"]["num_classes"] == 10


@pytest.mark.workflow
def test_cifar_example_config_plans_both_envs_and_all_three_models(tmp_path):
    # the shipped example, as a user runs it: its factories are checked (built and run
    # forward at 32 px) before any job, then every model is planned in both envs
    import yaml
    from workflow_helpers import ROOT, snakemake, write_config

    write_config(tmp_path, yaml.safe_load((ROOT / "config/examples/cifar.yaml").read_text()))
    planned = snakemake(tmp_path, "-n", "--summary", timeout=300).stdout
    for env in ("local", "local_compiled"):
        for model in ("resnet18", "cifar_resnet18", "cifar_resnet34"):
            for batch in (32, 64):
                run = f"results/{env}/runs/{env}_{model}_fp32_bs{batch}_run3.json"
                assert run in planned, run


@pytest.mark.parametrize(
    "script", ["complexity.py", "run_train.py", "trace_step.py"], ids=lambda s: s[:-3]
)
@pytest.mark.parametrize(
    "text, message", [("nope", "'nope': not JSON"), ("[1]", "'[1]': must be a JSON object")]
)
def test_bad_model_kwargs_are_refused_by_each_script(script, text, message):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "workflow" / "scripts" / script), "--arch", "m",
         "--batch-size", "1", "--model-kwargs", text, "--out", "unused.json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2
    assert f"{script}: error: argument --model-kwargs: {message}" in proc.stderr


def test_model_kwargs_arg_reads_a_json_object():
    assert model_kwargs_arg('{"width": 4}') == {"width": 4}


def test_torchvision_classifiers_are_listed_once_per_install_then_read_back(tmp_path):
    """Every snakemake command checks the config's models against torchvision's: listing
    them imports torchvision (seconds), so the list is kept per install and read back."""
    import torchvision.models

    from dnnroofline.study.models import torchvision_classifiers

    expected = sorted(torchvision.models.list_models(module=torchvision.models))
    assert "resnet18" in expected
    assert torchvision_classifiers(tmp_path) == expected
    (kept,) = tmp_path.glob("torchvision_models_*.json")
    # a new process reads the list back without importing torchvision
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from dnnroofline.study.models import torchvision_classifiers\n"
        f"print(torchvision_classifiers(Path({str(tmp_path)!r})) == {expected!r}, "
        "'torchvision' in sys.modules)\n"
    )
    scripts = {"PYTHONPATH": str(ROOT / "workflow" / "scripts")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **scripts}
    )
    assert out.stdout.split() == ["True", "False"], out.stderr
    # a list kept for another install (torchvision reinstalled) is listed again
    other = json.loads(kept.read_text())
    kept.write_text(json.dumps({"key": other["key"] + "x", "value": ["not_a_model"]}))
    assert torchvision_classifiers(tmp_path) == expected
    assert json.loads(kept.read_text())["value"] == expected


def test_model_family_groups_torchvision_by_family_and_a_factory_model_alone():
    assert {model_family(n) for n in ("resnet18", "resnet50", "wide_resnet50_2")} == {"resnet"}
    assert model_family("resnext50_32x4d") == "resnet"
    assert model_family("mobilenet_v2") == model_family("mobilenet_v3_small") == "mobilenet"
    assert model_family("efficientnet_v2_s") == model_family("efficientnet_b0") == "efficientnet"
    assert model_family("googlenet") == model_family("inception_v3") == "inception"
    assert model_family("maxvit_t") == "maxvit" and model_family("vit_b_16") == "vit"
    # a user's factory model is a family of its own, even when its name looks like one
    assert model_family("cifar_resnet") == "cifar_resnet"
    assert model_family("resnet_custom") == "resnet_custom"
    # every torchvision classifier has a family of the table (a new one would say here)
    names = torchvision_classifiers()
    assert {model_family(n) for n in names} == set(FAMILY_PATTERNS)
