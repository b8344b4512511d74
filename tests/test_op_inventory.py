"""dnnroofline.estimate.op_inventory and op_recorder: the ops of one fake training step as
the device runs it, against the complexity JSON (the same recorder), a hand-checked tiny
model, autograd's own engine, and the op_inventory.py and complexity.py CLIs."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from dnnroofline.estimate.attention import fused_attention_choice
from dnnroofline.estimate.complexity import ModelCannotRun, complexity
from dnnroofline.estimate.op_classes import (
    OP_CLASSES,
    PHASES,
    STEP_VARIANTS,
    inventory_variant,
    parse_step_variant,
    step_variant,
)
from dnnroofline.estimate.op_inventory import op_inventory
from dnnroofline.estimate.op_recorder import (
    SYNC,
    StepSpec,
    record_step,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "op_inventory.py"
# fvcore (complexity's reference) calls torch.jit.script at import time; not ours
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script")

CONV = {"n", "c_in", "c_out", "h", "w", "h_out", "w_out", "kh", "kw", "stride", "groups"}
#: The shape features every op of a class carries.
FEATURES = {
    "conv": CONV | {"input_grad", "weight_grad", "bias"},
    "conv_depthwise": CONV | {"input_grad", "weight_grad", "bias"},
    "gemm": {"m", "n", "k"},
    "elementwise": {"numel", "inputs", "in_place", "broadcast"},
    "reduction": {"numel_in", "numel_out"},
    "normalization": {"n", "c", "spatial"},
    "pooling": {"n", "c", "h", "w", "h_out", "w_out", "kh", "kw", "stride"},
    "copy": {"numel"},
    "optimizer": {"numel", "tensors"},
}


@functools.cache
def _inventory(
    arch: str,
    precision: str,
    batch_size: int,
    image_size: int,
    device: str = "cpu",
    channels_last: bool = False,
) -> dict:
    """Shared by the tests of one process (the docs are read, never changed)."""
    return op_inventory(
        arch,
        precision=precision,
        batch_size=batch_size,
        image_size=image_size,
        device=device,
        channels_last=channels_last,
    )


@functools.cache
def _vit() -> dict:
    """A ViT-B/16 built for 32 px images (2x2 patches): layer norm, GELU, attention."""
    model = torchvision.models.vit_b_16(image_size=32)
    return op_inventory(model, arch="vit_b_16", precision="fp32", batch_size=2, image_size=32)


@functools.cache
def _complexity(arch: str) -> dict:
    return complexity(arch, batch_size=8, image_size=64)


def _class_flops(doc: dict, classes: tuple[str, ...]) -> int:
    return sum(doc["totals"]["by_class"].get(c, {}).get("flops", 0) for c in classes)


@pytest.mark.parametrize("arch", ["resnet18", "mobilenet_v2"])
def test_the_fp32_cpu_inventory_is_the_complexity_json_s_step(arch):
    """complexity counts the same recorded step by layer type, less the loss."""
    inv, ref = _inventory(arch, "fp32", 8, 64), _complexity(arch)
    by_layer: dict[str, dict[str, int]] = {}
    for o in inv["ops"]:
        if o["phase"] != "optimizer" and o["layer"] not in (None, "loss") and o["flops"]:
            entry = by_layer.setdefault(o["layer"], {"forward": 0, "backward": 0})
            entry[o["phase"]] += o["flops"] * o["count"]
    assert by_layer == ref["flops"]["by_layer_type"]
    loss = sum(o["flops"] * o["count"] for o in inv["ops"] if o["layer"] == "loss")
    # log-softmax 5 per logit and NLL 1 per label, forward and backward
    assert loss == 2 * (5 * 8 * 1000 + 8)
    assert inv["totals"]["flops"] == ref["flops"]["train_step"] + loss
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
    assert inv["step"]["autocast"] == "cpu" and inv["step"]["autocast_dtype"] == half
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
        assert unscale[0]["shape"]["tensors"] == inv["param_tensors"] == 62
    else:
        assert unscale == []
    assert SYNC not in inv["sequence"]  # a CPU runs the ops itself: nothing to wait for


def test_fp32_does_not_autocast():
    inv = _inventory("resnet18", "fp32", 2, 32)
    assert {o["dtype"] for o in inv["ops"] if o["class"] in ("conv", "gemm")} == {"float32"}
    assert not [o for o in inv["ops"] if o["name"] == "aten._to_copy.default"]
    assert inv["step"] == {
        "device": "cpu",
        "channels_last": False,
        "autocast": None,
        "autocast_dtype": None,
        "optimizer": {"name": "SGD", "foreach": False, "fused": False},
        "grad_scaler": False,
    }
    assert (inv["schema_version"], inv["step_variant"], inventory_variant(inv)) == (2, "cpu", "cpu")


def test_a_tiny_model_by_hand():
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(4 * 3 * 3, 5),
    )  # fmt: skip
    inv = op_inventory(model, arch="tiny", precision="fp32", batch_size=2, image_size=8)
    ops = {(o["phase"], o["name"]): o for o in inv["ops"]}
    conv = ops["forward", "aten.convolution.default"]
    # output 2x4x6x6 = 288; MACs = 2 images * 108 weights * 36 positions = 7776
    assert conv["flops"] == 2 * 7776 + 288  # + one bias add per output
    assert conv["bytes_read"] == (2 * 3 * 8 * 8 + 4 * 3 * 3 * 3 + 4) * 4  # x, weight, bias
    assert conv["bytes_written"] == 288 * 4
    assert (conv["class"], conv["kind"], conv["layer"], conv["dtype"], conv["count"]) == (
        "conv",
        "dense",
        "conv",
        "float32",
        1,
    )
    assert conv["shape"] == {
        "n": 2, "c_in": 3, "c_out": 4, "h": 8, "w": 8, "h_out": 6, "w_out": 6, "kh": 3,
        "kw": 3, "stride": 1, "groups": 1, "input_grad": False, "weight_grad": False,
        "bias": True,
    }  # fmt: skip
    # the image needs no gradient: backward computes the weight and bias gradients only
    grad = ops["backward", "aten.convolution_backward.default"]
    assert grad["flops"] == 2 * 7776 + 288
    assert grad["bytes_read"] == (288 + 2 * 3 * 8 * 8 + 108) * 4  # grad out, x, weight
    assert grad["bytes_written"] == (108 + 4) * 4
    assert (grad["shape"]["input_grad"], grad["shape"]["weight_grad"]) == (False, True)
    norm = ops["forward", "aten.native_batch_norm.default"]
    assert norm["flops"] == 5 * 288
    assert norm["bytes_read"] == (288 + 4 * 4) * 4  # x, weight, bias, running mean and var
    # y, the saved mean and inverse std, the running mean and var updated in place
    assert norm["bytes_written"] == (288 + 2 * 4 + 2 * 4) * 4
    assert norm["shape"] == {"n": 2, "c": 4, "spatial": 36}
    # num_batches_tracked += 1: integer arithmetic, no FLOP
    assert ops["forward", "aten.add_.Tensor"]["flops"] == 0
    relu = ops["forward", "aten.relu.default"]
    assert (relu["flops"], relu["bytes_read"], relu["bytes_written"]) == (288, 1152, 1152)
    assert relu["shape"] == {"numel": 288, "inputs": 1, "in_place": False, "broadcast": False}
    pool = ops["forward", "aten.max_pool2d_with_indices.default"]
    assert pool["flops"] == 3 * 72  # 3 compares per output of a 2x2 window
    assert pool["shape"] == {
        "n": 2, "c": 4, "h": 6, "w": 6, "h_out": 3, "w_out": 3, "kh": 2, "kw": 2, "stride": 2,
    }  # fmt: skip
    linear = ops["forward", "aten.addmm.default"]
    assert (linear["layer"], linear["shape"]) == ("linear", {"m": 2, "n": 5, "k": 36})
    assert linear["flops"] == 2 * 2 * 36 * 5 + 2 * 5
    # the linear layer's backward: its weight gradient and its bias gradient (a sum)
    assert ops["backward", "aten.mm.default"]["layer"] == "linear"
    bias = ops["backward", "aten.sum.dim_IntList"]
    assert (bias["class"], bias["layer"], bias["shape"]) == (
        "reduction",
        "linear",
        {"numel_in": 10, "numel_out": 5},
    )
    params = 108 + 4 + 2 * 4 + 36 * 5 + 5
    assert inv["totals"]["by_phase"]["optimizer"]["flops"] == 6 * params
    assert (inv["arch"], inv["param_tensors"]) == ("tiny", 6)


def test_the_batch_costs_nothing():
    small = _inventory("resnet18", "bf16", 2, 32)
    large = _inventory("resnet18", "bf16", 4096, 32)
    assert _class_flops(large, ("conv",)) == 2048 * _class_flops(small, ("conv",))
    assert large["totals"]["ops"] == small["totals"]["ops"]


def test_a_model_that_cannot_train_at_this_size():
    # train-mode batch norm needs 2 values per channel: 1 image at 32 px has a 1x1 map
    with pytest.raises(ModelCannotRun, match="--image-size 32"):
        op_inventory("resnet18", precision="fp32", batch_size=1, image_size=32)


# --------------------------------------------------------------------------- the recorder


def _names(spec: StepSpec, arch: str, engine: str) -> Counter:
    step = record_step(arch, spec, batch_size=2, image_size=32, engine=engine)
    return Counter((o["phase"], o["name"], o["layer"]) for o in step.ops())


@pytest.mark.parametrize(
    ("arch", "spec"),
    [
        ("resnet18", StepSpec("fp32")),
        ("resnet18", StepSpec("bf16", channels_last=True)),
        ("mobilenet_v2", StepSpec("fp32", channels_last=True)),
        ("efficientnet_b0", StepSpec("amp")),
        ("densenet121", StepSpec("fp32")),
    ],
)
def test_the_python_engine_runs_what_autograd_s_engine_runs(arch, spec):
    """On fake CUDA tensors backward runs in python_backward; on a CPU, where both run,
    it dispatches the very ops autograd's engine does (views aside), each charged to
    the same layer."""
    assert _names(spec, arch, "python") == _names(spec, arch, "autograd")


def test_a_fake_cuda_step_is_the_gpu_s():
    inv = _inventory("mobilenet_v2", "amp", 8, 32, "cuda", True)
    assert inv["step"] == {
        "device": "cuda",
        "channels_last": True,
        "autocast": "cuda",
        "autocast_dtype": "float16",
        "optimizer": {"name": "SGD", "foreach": True, "fused": False},
        "grad_scaler": True,
    }
    assert inv["step_variant"] == inventory_variant(inv) == "cuda_cl"
    names = {o["name"] for o in inv["ops"]}
    assert {"aten.cudnn_batch_norm.default", "aten.cudnn_batch_norm_backward.default"} <= names
    assert {"aten.native_dropout.default", "aten.native_dropout_backward.default"} <= names
    assert "aten.native_batch_norm.default" not in names
    # SGD with foreach: each update one _foreach_ op over every parameter tensor
    foreach = [o for o in inv["ops"] if o["name"].startswith("aten._foreach_")]
    assert foreach and {o["phase"] for o in foreach} == {"optimizer"}
    params = sum(p.numel() for p in torchvision.models.mobilenet_v2().parameters())
    for op in foreach:
        assert op["shape"] == {"numel": params, "tensors": inv["param_tensors"]}
    assert sum(o["flops"] for o in foreach) == 6 * params
    # GradScaler.step reads found_inf on the host: one sync, after the inf check and
    # before the update
    seq = inv["sequence"]
    assert seq.count(SYNC) == 1
    before = inv["ops"][seq[seq.index(SYNC) - 1]]["name"]
    after = inv["ops"][seq[seq.index(SYNC) + 1]]["name"]
    assert "non_finite_check_and_unscale" in before and after.startswith("aten._foreach_")


def test_googlenet_on_cuda_keeps_its_aux_logits():
    """GoogLeNet's initialisation reads values: it is built for real, copied into the
    fake mode and moved to CUDA; in training its two aux heads add their losses (x 0.4)."""
    inv = _inventory("googlenet", "amp", 2, 32, "cuda")
    loss = Counter()
    for o in inv["ops"]:
        if o["layer"] == "loss" and o["phase"] == "forward":
            loss[o["name"]] += o["count"]
    assert loss["aten._log_softmax.default"] == loss["aten.nll_loss_forward.default"] == 3
    assert loss["aten.mul.Tensor"] == 2  # the aux losses' weights
    # the aux heads' functional dropout: CUDA's fused kernel, in the dropout layer
    dropout = {o["name"] for o in inv["ops"] if o["layer"] == "dropout"}
    assert "aten.native_dropout.default" in dropout


def test_a_bf16_cuda_step_waits_for_nothing():
    inv = _inventory("resnet18", "bf16", 8, 32, "cuda")
    assert SYNC not in inv["sequence"] and not inv["step"]["grad_scaler"]
    assert inv["step"]["autocast_dtype"] == "bfloat16" and inv["step"]["optimizer"]["foreach"]


def test_channels_last_reaches_the_recorded_tensors():
    """The images and weights are channels_last: resnet18's pooled 512x1x1 map is then
    flattened through as_strided (not a view of a contiguous tensor), whose backward
    zero-fills a gradient and copies into it; the contiguous step has neither op."""
    plain, cl = (_inventory("resnet18", "fp32", 2, 32, "cpu", c) for c in (False, True))

    def backward(doc: dict) -> Counter:
        return Counter({o["name"]: o["count"] for o in doc["ops"] if o["phase"] == "backward"})

    extra = backward(cl) - backward(plain)
    assert extra == Counter({"aten.new_zeros.default": 1, "aten.copy_.default": 1})
    assert cl["step"]["channels_last"] and cl["step_variant"] == "cpu_cl"


@pytest.mark.parametrize("which", ["resnet18 amp cuda_cl", "mobilenet_v2 fp32 cpu", "vit"])
def test_every_op_has_its_class_features(which):
    if which == "vit":
        inv = _vit()
    else:
        arch, precision, step = which.split()
        inv = _inventory(arch, precision, 8, 32, step.split("_")[0], step.endswith("_cl"))
    seen = set()
    for op in inv["ops"]:
        missing = FEATURES[op["class"]] - set(op["shape"])
        assert not missing, f"{op['name']} ({op['class']}) lacks {missing}"
        assert all(isinstance(v, (int, bool)) for v in op["shape"].values()), op
        sizes = {k: v for k, v in op["shape"].items() if not isinstance(v, bool)}
        sizes.pop("inputs", None)  # an elementwise op may read no tensor
        assert min(sizes.values()) >= 1, op  # sizes are logged by the model's fit
        seen.add(op["class"])
    assert seen >= {"gemm", "elementwise", "reduction", "normalization", "optimizer", "copy"}


@pytest.mark.parametrize("which", [("resnet18", "amp", "cuda"), ("mobilenet_v2", "fp32", "cpu")])
def test_the_sequence_is_the_step_in_dispatch_order(which):
    arch, precision, device = which
    inv = _inventory(arch, precision, 8, 32, device)
    seq = inv["sequence"]
    uses = Counter(i for i in seq if i != SYNC)
    assert uses == Counter({i: op["count"] for i, op in enumerate(inv["ops"])})
    phases = [inv["ops"][i]["phase"] for i in seq if i != SYNC]
    assert phases == sorted(phases, key=PHASES.index)  # forward, backward, optimizer
    first = next(inv["ops"][i] for i in seq if inv["ops"][i]["class"] != "copy")
    assert first["name"] == "aten.convolution.default"  # after amp's weight casts


def test_a_torch_without_fake_cuda_is_refused_by_name(monkeypatch):
    import torch

    from dnnroofline.errors import InputError

    real_empty = torch.empty

    def no_cuda(*args, **kwargs):
        if str(kwargs.get("device", "")).startswith("cuda"):
            raise RuntimeError("Torch not compiled with CUDA enabled")
        return real_empty(*args, **kwargs)

    monkeypatch.setattr(torch, "empty", no_cuda)
    with pytest.raises(InputError, match="cannot make fake CUDA tensors"):
        record_step("resnet18", StepSpec("fp32", "cuda"), batch_size=2, image_size=32)


def test_step_variants_name_the_device_and_layout_both_ways():
    for step in STEP_VARIANTS:
        assert step_variant(*parse_step_variant(step)) == step
    assert step_variant("cuda:1", True) == "cuda_cl"
    assert step_variant("mps") == "cpu"  # the recorder cannot dispatch MPS kernels
    assert inventory_variant({"schema_version": 1}) == "cpu"  # before variants: a CPU's
    with pytest.raises(ValueError, match="'xpu'"):
        step_variant("xpu")
    with pytest.raises(ValueError, match="'gpu'"):
        parse_step_variant("gpu")


# --------------------------------------------------------------------------- the CLIs


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
    out = tmp_path / "sub" / "resnet18_amp_bs4_cuda_cl_ops.json"
    flags = ["--arch", "resnet18", "--batch-size", "4", "--image-size", "32"]
    args = [*flags, "--precision", "amp", "--device", "cuda", "--channels-last"]
    assert _cli().main([*args, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["status"], doc["arch"], doc["precision"], doc["batch_size"]) == (
        "ok",
        "resnet18",
        "amp",
        4,
    )
    assert (doc["step_variant"], doc["step"]["device"], doc["step"]["channels_last"]) == (
        "cuda_cl",
        "cuda",
        True,
    )
    assert {"flops", "bytes_read", "bytes_written", "ops", "by_phase", "by_class"} <= set(
        doc["totals"]
    )
    assert "FakeTensorMode" in doc["method"]
    assert list(out.parent.iterdir()) == [out]  # no temporary left behind


def test_cli_records_a_model_that_cannot_train(tmp_path, capsys):
    out = tmp_path / "resnet18_fp32_bs1_cpu_ops.json"
    flags = ["--arch", "resnet18", "--batch-size", "1", "--image-size", "32"]
    assert _cli().main([*flags, "--precision", "fp32", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["status"], doc["totals"], doc["ops"], doc["sequence"]) == (
        "error",
        None,
        None,
        None,
    )
    assert doc["step_variant"] == "cpu"
    assert "more than 1 value per channel" in doc["message"]
    assert "status error" in capsys.readouterr().err


def test_cli_refuses_a_bad_precision_naming_it(tmp_path):
    out = tmp_path / "x.json"
    flags = ["--arch", "resnet18", "--batch-size", "4", "--out", str(out)]
    proc = _run(*flags, "--precision", "fp16")
    assert proc.returncode == 2
    assert "--precision 'fp16'" in proc.stderr and "amp" in proc.stderr
    assert not out.exists()


def test_cli_refuses_a_bad_device_naming_it(tmp_path, capsys):
    out = tmp_path / "x.json"
    flags = ["--arch", "resnet18", "--batch-size", "4", "--precision", "fp32"]
    assert _cli().main([*flags, "--device", "xpu", "--out", str(out)]) == 2
    assert "--device 'xpu'" in capsys.readouterr().err
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
    assert _cli().main([*flags, "--precision", "amp", "--device", "cuda", "--out", str(alone)]) == 0
    steps = {"fp32:cpu": "fp32_bs4_cpu", "amp:cuda": "amp_bs4_cuda", "bf16:cpu_cl": "bf16_cl"}
    paths = {k: tmp_path / f"resnet18_{v}_ops.json" for k, v in steps.items()}
    specs = [a for k, path in paths.items() for a in ("--inventory", f"{k}={path}")]
    cx = tmp_path / "resnet18_bs4.json"
    assert _complexity_cli().main([*flags, *specs, "--out", str(cx)]) == 0
    assert json.loads(cx.read_text())["flops"]["train_step"] > 0
    assert json.loads(paths["amp:cuda"].read_text()) == json.loads(alone.read_text())
    fp32 = json.loads(paths["fp32:cpu"].read_text())  # the complexity's own step, reused
    assert (fp32["precision"], fp32["step_variant"]) == ("fp32", "cpu")
    assert fp32 == _inventory("resnet18", "fp32", 4, 32)
    assert json.loads(paths["bf16:cpu_cl"].read_text())["step_variant"] == "cpu_cl"


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("fp16=x.json", "--inventory 'fp16': unknown precision"),
        ("amp", "expected PRECISION[:STEP]=PATH"),
        ("amp:gpu=x.json", "unknown step variant 'gpu'"),
    ],
)
def test_complexity_cli_refuses_a_bad_inventory_naming_it(tmp_path, capsys, spec, expected):
    out = tmp_path / "c.json"
    flags = ["--arch", "resnet18", "--batch-size", "4", "--out", str(out)]
    assert _complexity_cli().main([*flags, "--inventory", spec]) == 2
    assert expected in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("dtype", "shapes", "mask", "causal", "wanted"),
    [
        # ViT-B/16: 12 heads of 64 over 197 tokens
        (torch.bfloat16, ((8, 12, 197, 64),) * 3, None, False, "flash"),
        (torch.float16, ((8, 12, 197, 64),) * 3, None, False, "flash"),
        (torch.float32, ((8, 12, 197, 64),) * 3, None, False, "efficient"),
        # an additive mask: flash takes none, the memory-efficient kernel a float one
        (torch.bfloat16, ((8, 12, 197, 64),) * 3, torch.bfloat16, False, "efficient"),
        (torch.bfloat16, ((8, 12, 197, 64),) * 3, torch.bool, False, "math"),
        # heads over 256 wide: no flash; 8-aligned: memory-efficient
        (torch.bfloat16, ((2, 2, 16, 264),) * 3, None, False, "efficient"),
        (torch.float32, ((2, 2, 16, 30),) * 3, None, False, "math"),  # 30 % 4 != 0
        # causal over a query shorter than the keys: flash refuses it
        (torch.float16, ((2, 2, 4, 64), (2, 2, 16, 64), (2, 2, 16, 64)), None, True, "efficient"),
        (torch.float16, ((12, 197, 64),) * 3, None, False, "math"),  # 3-d: no fused kernel
        (torch.float64, ((2, 2, 16, 64),) * 3, None, False, "math"),
    ],
)
def test_the_fused_attention_an_sm80_gpu_picks(dtype, shapes, mask, causal, wanted):
    assert fused_attention_choice(dtype, shapes, mask, causal) == wanted


@pytest.mark.parametrize(("precision", "kernel"), [("bf16", "flash"), ("fp32", "efficient")])
def test_a_fake_cuda_transformer_step_runs_the_fused_attention_a_gpu_runs(precision, kernel):
    """On a host without a GPU torch's own choice falls back to the math path (bmm,
    softmax, bmm), which no sm80+ GPU runs: the recorder takes the GPU's fused kernel."""
    batch, tokens, heads, head = 2, 5, 12, 64  # 32 px: 2x2 patches and the class token
    model = torchvision.models.vit_b_16(image_size=32)
    spec = StepSpec(precision, device="cuda", channels_last=True)
    step = record_step(model, spec, batch_size=batch, image_size=32, arch="vit_b_16")
    ops = Counter()
    flops = Counter()
    for o in step.ops():
        ops[o["phase"], o["name"]] += 1
        flops[o["phase"], o["name"]] += o["flops"]
    fused = {(p, n) for p, n in ops if "_scaled_dot_product_" in n}
    assert {p for p, _ in fused} == {"forward", "backward"}
    assert not any("bmm" in n or n == "aten._safe_softmax.default" for _, n in ops)
    if not torch.cuda.is_available():  # with a GPU here, its own dispatch picks
        forward = f"aten._scaled_dot_product_{kernel}_attention.default"
        backward = f"aten._scaled_dot_product_{kernel}_attention_backward.default"
        assert fused == {("forward", forward), ("backward", backward)}
        assert ops["forward", forward] == ops["backward", backward] == 12  # one per layer
        # QK^T and PV (2 per MAC), softmax 5 and a scale 1 per score; backward 2x products
        scores = batch * heads * tokens * tokens
        products = 2 * scores * (head + head)
        assert flops["forward", forward] == 12 * (products + 6 * scores)
        assert flops["backward", backward] == 12 * (2 * products + 6 * scores)
