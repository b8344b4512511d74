"""dnnroofline.model.op_inventory: the ops of one fake training step, against today's FLOP
counts (the complexity JSON), a hand-checked tiny model, and the op_inventory.py CLI."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch import nn

from dnnroofline.model.complexity import ModelCannotRun, complexity
from dnnroofline.model.op_classes import OP_CLASSES, PHASES
from dnnroofline.model.op_inventory import op_inventory

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "op_inventory.py"
# fvcore (complexity) calls torch.jit.script at import time; the notice is not ours
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script")

CONV_GEMM = ("conv", "conv_depthwise", "gemm")
# conv + GEMM: the same 2-per-MAC rule on the same layers; they differ only by the
# linear layer's bias gradient, which complexity counts as 1 per output and the
# inventory as the reduction that computes it (aten.sum), outside these classes.
CONV_GEMM_TOLERANCE = 0.005
# The whole step: the inventory also counts the loss (log-softmax, NLL, ~6 FLOPs per
# logit) and the bias-gradient sum, which complexity leaves out (< 0.01% here).
TOTAL_TOLERANCE = 0.001


@functools.cache
def _inventory(arch: str, precision: str, batch_size: int, image_size: int) -> dict:
    """Shared by the tests of one process (the docs are read, never changed)."""
    return op_inventory(arch, precision=precision, batch_size=batch_size, image_size=image_size)


@functools.cache
def _complexity(arch: str) -> dict:
    return complexity(arch, batch_size=8, image_size=64)


def _class_flops(doc: dict, classes: tuple[str, ...]) -> int:
    return sum(doc["totals"]["by_class"].get(c, {}).get("flops", 0) for c in classes)


@pytest.mark.parametrize("arch", ["resnet18", "mobilenet_v2"])
def test_flops_agree_with_the_complexity_json(arch):
    inv, ref = _inventory(arch, "fp32", 8, 64), _complexity(arch)
    by_type = ref["flops"]["by_layer_type"]
    ref_conv_gemm = sum(
        v["forward"] + v["backward"]
        for k, v in by_type.items()
        if k.startswith("conv") or k in ("linear", "matmul")
    )
    got = _class_flops(inv, CONV_GEMM)
    assert got == pytest.approx(ref_conv_gemm, rel=CONV_GEMM_TOLERANCE)
    assert inv["totals"]["flops"] == pytest.approx(ref["flops"]["train_step"], rel=TOTAL_TOLERANCE)
    # SGD's four updates per parameter: exactly complexity's 6 FLOPs per parameter
    assert inv["totals"]["by_phase"]["optimizer"]["flops"] == ref["flops"]["optimizer"]
    assert inv["uncounted_ops"] == {}
    totals = inv["totals"]
    assert totals["flops"] == sum(o["flops"] * o["count"] for o in inv["ops"])
    assert totals["ops"] == sum(p["ops"] for p in totals["by_phase"].values())
    assert set(totals["by_class"]) <= set(OP_CLASSES)
    assert {o["phase"] for o in inv["ops"]} == set(PHASES)


def test_depthwise_convolutions_are_their_own_class():
    inv, ref = _inventory("mobilenet_v2", "fp32", 8, 64), _complexity("mobilenet_v2")
    depthwise = [o for o in inv["ops"] if o["class"] == "conv_depthwise"]
    assert {o["phase"] for o in depthwise} == {"forward", "backward"}
    for op in depthwise:
        shape = op["shape"]
        assert op["kind"] == "depthwise"
        assert shape["groups"] == shape["c_in"] == shape["c_out"] > 1
    assert not [o for o in inv["ops"] if o["class"] == "conv" and o["shape"]["groups"] > 1]
    dw = ref["flops"]["by_layer_type"]["conv_depthwise"]
    assert _class_flops(inv, ("conv_depthwise",)) == dw["forward"] + dw["backward"]


@pytest.mark.parametrize(("precision", "half"), [("bf16", "bfloat16"), ("amp", "float16")])
def test_autocast_dtypes(precision, half):
    inv = _inventory("resnet18", precision, 2, 32)
    convs = [o for o in inv["ops"] if o["class"] in ("conv", "gemm")]
    assert convs and {o["dtype"] for o in convs} == {half}
    assert any(o["name"] == "aten._to_copy.default" and o["class"] == "copy" for o in inv["ops"])
    updates = [o for o in inv["ops"] if o["phase"] == "optimizer" and o["shape"]["numel"] > 1]
    assert {o["class"] for o in updates} == {"optimizer"}
    assert {o["dtype"] for o in updates} == {"float32"}  # master weights, grads, momentum
    unscale = [o for o in inv["ops"] if "non_finite_check_and_unscale" in o["name"]]
    if precision == "amp":  # GradScaler: one unscale and inf check over every gradient
        momentum = [o for o in updates if o["name"] == "aten.mul_.Tensor"]  # one per tensor
        params = sum(o["shape"]["numel"] * o["count"] for o in momentum)
        assert [(o["count"], o["flops"]) for o in unscale] == [(1, 2 * params)]
    else:
        assert unscale == []


def test_fp32_does_not_autocast():
    inv = op_inventory("resnet18", precision="fp32", batch_size=2, image_size=32)
    assert {o["dtype"] for o in inv["ops"] if o["class"] in ("conv", "gemm")} == {"float32"}
    assert not [o for o in inv["ops"] if o["name"] == "aten._to_copy.default"]


def test_a_tiny_model_by_hand():
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)
    )
    inv = op_inventory(model, arch="tiny", precision="fp32", batch_size=2, image_size=8)
    ops = {(o["phase"], o["name"]): o for o in inv["ops"]}
    conv = ops["forward", "aten.convolution.default"]
    # output 2x4x6x6 = 288; MACs = 2 images * 108 weights * 36 positions = 7776
    assert conv["flops"] == 2 * 7776 + 288  # + one bias add per output
    assert conv["bytes_read"] == (2 * 3 * 8 * 8 + 4 * 3 * 3 * 3 + 4) * 4  # x, weight, bias
    assert conv["bytes_written"] == 288 * 4
    assert (conv["class"], conv["kind"], conv["dtype"], conv["count"]) == (
        "conv",
        "dense",
        "float32",
        1,
    )
    assert conv["shape"] == {
        "n": 2,
        "c_in": 3,
        "c_out": 4,
        "h": 8,
        "w": 8,
        "h_out": 6,
        "w_out": 6,
        "kh": 3,
        "kw": 3,
        "stride": 1,
        "groups": 1,
    }
    # the image needs no gradient: backward computes the weight and bias gradients only
    grad = ops["backward", "aten.convolution_backward.default"]
    assert grad["flops"] == 2 * 7776 + 288
    assert grad["bytes_read"] == (288 + 2 * 3 * 8 * 8 + 108) * 4  # grad out, x, weight
    assert grad["bytes_written"] == (108 + 4) * 4
    norm = ops["forward", "aten.native_batch_norm.default"]
    assert norm["flops"] == 5 * 288
    assert norm["bytes_read"] == (288 + 4 * 4) * 4  # x, weight, bias, running mean and var
    # y, the saved mean and inverse std, the running mean and var updated in place
    assert norm["bytes_written"] == (288 + 2 * 4 + 2 * 4) * 4
    linear = ops["forward", "aten.addmm.default"]
    assert linear["shape"] == {"m": 2, "n": 5, "k": 144}
    assert linear["flops"] == 2 * 2 * 144 * 5 + 2 * 5
    relu = ops["forward", "aten.relu.default"]
    assert (relu["flops"], relu["bytes_read"], relu["bytes_written"]) == (288, 1152, 1152)
    params = 108 + 4 + 2 * 4 + 144 * 5 + 5
    assert inv["totals"]["by_phase"]["optimizer"]["flops"] == 6 * params
    assert inv["arch"] == "tiny"


def test_the_batch_costs_nothing():
    small = _inventory("resnet18", "bf16", 2, 32)
    large = op_inventory("resnet18", precision="bf16", batch_size=4096, image_size=32)
    assert _class_flops(large, ("conv",)) == 2048 * _class_flops(small, ("conv",))
    assert large["totals"]["ops"] == small["totals"]["ops"]


def test_a_model_that_cannot_train_at_this_size():
    # train-mode batch norm needs 2 values per channel: 1 image at 32 px has a 1x1 map
    with pytest.raises(ModelCannotRun, match="--image-size 32"):
        op_inventory("resnet18", precision="fp32", batch_size=1, image_size=32)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _cli():
    """The entry script as a module: run in this process, torch already imported."""
    spec = importlib.util.spec_from_file_location("op_inventory_cli", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_writes_the_ops_json(tmp_path):
    out = tmp_path / "sub" / "resnet18_amp_bs4_ops.json"
    flags = ["--arch", "resnet18", "--batch-size", "4", "--image-size", "32"]
    assert _cli().main([*flags, "--precision", "amp", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["status"], doc["arch"], doc["precision"], doc["batch_size"]) == (
        "ok",
        "resnet18",
        "amp",
        4,
    )
    assert {"flops", "bytes_read", "bytes_written", "ops", "by_phase", "by_class"} <= set(
        doc["totals"]
    )
    assert "FakeTensorMode" in doc["method"]
    assert list(out.parent.iterdir()) == [out]  # no temporary left behind


def test_cli_records_a_model_that_cannot_train(tmp_path, capsys):
    out = tmp_path / "resnet18_fp32_bs1_ops.json"
    flags = ["--arch", "resnet18", "--batch-size", "1", "--image-size", "32"]
    assert _cli().main([*flags, "--precision", "fp32", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["status"], doc["totals"], doc["ops"]) == ("error", None, None)
    assert "more than 1 value per channel" in doc["message"]
    assert "status error" in capsys.readouterr().err


def test_cli_refuses_a_bad_precision_naming_it(tmp_path):
    out = tmp_path / "x.json"
    flags = ["--arch", "resnet18", "--batch-size", "4", "--out", str(out)]
    proc = _run(*flags, "--precision", "fp16")
    assert proc.returncode == 2
    assert "--precision 'fp16'" in proc.stderr and "amp" in proc.stderr
    assert not out.exists()


def _complexity_cli():
    """complexity.py as a module: the study's rule writes the inventories through it."""
    path = SCRIPT.parent / "complexity.py"
    spec = importlib.util.spec_from_file_location("complexity_cli", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_complexity_cli_writes_each_inventory_as_op_inventory_does(tmp_path):
    flags = ["--arch", "resnet18", "--batch-size", "4", "--image-size", "32"]
    alone = tmp_path / "alone.json"
    assert _cli().main([*flags, "--precision", "amp", "--out", str(alone)]) == 0
    inventories = {p: tmp_path / f"resnet18_{p}_bs4_ops.json" for p in ("fp32", "amp")}
    specs = [a for p, path in inventories.items() for a in ("--inventory", f"{p}={path}")]
    cx = tmp_path / "resnet18_bs4.json"
    assert _complexity_cli().main([*flags, *specs, "--out", str(cx)]) == 0
    assert json.loads(cx.read_text())["flops"]["train_step"] > 0
    assert json.loads(inventories["amp"].read_text()) == json.loads(alone.read_text())
    assert json.loads(inventories["fp32"].read_text())["precision"] == "fp32"


@pytest.mark.parametrize(
    "spec, expected",
    [("fp16=x.json", "--inventory 'fp16': unknown precision"), ("amp", "expected PRECISION=PATH")],
)
def test_complexity_cli_refuses_a_bad_inventory_naming_it(tmp_path, capsys, spec, expected):
    out = tmp_path / "c.json"
    flags = ["--arch", "resnet18", "--batch-size", "4", "--out", str(out)]
    assert _complexity_cli().main([*flags, "--inventory", spec]) == 2
    assert expected in capsys.readouterr().err
    assert not out.exists()
