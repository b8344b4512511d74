"""What a training step costs the host, measured on the env: per op, and per step.

A step dispatches every op forward and backward through autograd; each costs the host
microseconds whatever its size, and on a CPU that time is spent before the op computes.
Small models at small images are bound by it. Three measurements, each of the driver's
own kind of call on tiny tensors (their arithmetic costs nothing beside it):

* **Per op, with autograd, by op class and phase** (:func:`host_per_op`): a chain of
  ``L`` layers of one class (convolutions, depthwise convolutions, linear layers, batch
  norms, ReLUs, max pools, clones) in a tiny image classifier, its forward (with the
  loss) and its backward timed on the host clock for two chain lengths; the difference
  over the difference of their recorded ops (the op inventory's recorder, so that the
  ops counted are the ops the model charges) is the cost of one more op of that class in
  that phase. The chain's stem, head, loss and the engine's start cancel out.
* **Per op, without autograd** (``bare_s``): the same chains' forward under no_grad;
  the sweep's timed calls (no autograd) hold this, and the model takes it out of them.
* **The step's fixed costs, per precision** (:func:`fixed_costs`): ``optimizer.step()``
  (amp: GradScaler's ``step`` and ``update``, its unscale and the host read of its inf
  check included) and ``zero_grad(set_to_none=True)`` as the driver makes them (SGD,
  momentum, weight decay; foreach where torch picks it for the device), timed for two
  numbers of parameter tensors and fitted as ``intercept + slope x tensors``; plus one
  ``backward()`` call of a one-op graph (the engine's start).

On CUDA the host times are the host's (the device runs behind it), and the launch
cost is the CUDA-event time per tiny kernel queued behind a sleeping kernel.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from dnnroofline.estimate.complexity import OPTIMIZER
from dnnroofline.measure.timer import sync_device
from dnnroofline.stats import summarize

#: Chain lengths whose difference gives one op's cost; timed repeats per length.
CHAIN_LENGTHS = (4, 20)
REPEATS = 15
#: Tiny image: batch, size; channels of the chain.
BATCH, IMAGE, WIDTH = 2, 4, 4
#: Parameter tensors (2 per linear layer) of the two fixed-cost models.
FIXED_TENSORS = (8, 64)
#: The classes the chains measure; the others take the cost of :data:`FALLBACK`.
CHAIN_CLASSES = ("conv", "conv_depthwise", "gemm", "normalization", "elementwise",
                 "pooling", "copy")  # fmt: skip
FALLBACK = {"reduction": "elementwise", "optimizer": "elementwise"}
#: Dispatch of tiny kernels queued behind a sleeping kernel (CUDA's launch cost).
LAUNCH_CALLS, LAUNCH_LOOPS, SLEEP_CYCLES = 200, 7, 50_000_000


def _chain(cls: str, length: int) -> Any:
    """A tiny image classifier whose middle is ``length`` layers of one class."""
    import torch
    from torch import nn

    class Clone(nn.Module):
        def forward(self, x):
            return x.clone()

    def layer() -> nn.Module:
        return {
            "conv": lambda: nn.Conv2d(WIDTH, WIDTH, 3, padding=1, bias=False),
            "conv_depthwise": lambda: nn.Conv2d(
                WIDTH, WIDTH, 3, padding=1, groups=WIDTH, bias=False
            ),  # fmt: skip
            "gemm": lambda: nn.Linear(WIDTH * IMAGE * IMAGE, WIDTH * IMAGE * IMAGE),
            "normalization": lambda: nn.BatchNorm2d(WIDTH),
            "elementwise": lambda: nn.ReLU(),
            "pooling": lambda: nn.MaxPool2d(3, 1, 1),
            "copy": lambda: Clone(),
        }[cls]()

    torch.manual_seed(0)
    middle = [layer() for _ in range(length)]
    if cls == "gemm":  # linear layers on the flattened map
        middle = [nn.Flatten(), *middle, nn.Unflatten(1, (WIDTH, IMAGE, IMAGE))]
    return nn.Sequential(
        nn.Conv2d(3, WIDTH, 1),
        *middle,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(WIDTH, 10),
    )


def _fastest(fn: Callable[[], Any], device: str, repeats: int = REPEATS) -> float:
    """The fastest of ``repeats`` host times of ``fn`` (the device synchronised before,
    not inside): other processes only add time."""
    times = []
    for _ in range(repeats):
        sync_device(device)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    sync_device(device)
    return min(times)


def _phase_timer(model: Any, device: str) -> Callable[[], dict[str, float]]:
    """A function timing one forward (loss included), one backward and one no-grad
    forward of ``model`` on the host clock; the model warmed up already."""
    import torch

    x = torch.randn(BATCH, 3, IMAGE, IMAGE, device=device)
    y = torch.zeros(BATCH, dtype=torch.long, device=device)
    criterion = torch.nn.CrossEntropyLoss()
    model = model.to(device).train()
    state: dict[str, Any] = {}

    def forward():
        state["loss"] = criterion(model(x), y)

    def backward():
        state["loss"].backward()

    def bare():
        with torch.no_grad():
            model(x)

    def once() -> dict[str, float]:
        model.zero_grad(set_to_none=True)
        return {
            "forward": _fastest(forward, device, 1),
            "backward": _fastest(backward, device, 1),
            "bare": _fastest(bare, device, 1),
        }

    for _ in range(3):  # warm-up: allocator, oneDNN/cuDNN primitive caches
        once()
    return once


def _paired_differences(short: Any, long: Any, device: str, repeats: int) -> dict[str, float]:
    """Per phase, the long chain's seconds less the short one's, each the fastest of
    ``repeats`` (other processes only ever add time; with OpenMP threads waiting on a
    core another process holds, a median can be off by orders of magnitude), the two
    timed in turn."""
    time_short, time_long = _phase_timer(short, device), _phase_timer(long, device)
    best: list[dict[str, float]] = [{}, {}]
    for _ in range(repeats):
        for i, one in enumerate((time_short(), time_long())):
            for phase, seconds in one.items():
                best[i][phase] = min(seconds, best[i].get(phase, math.inf))
    return {phase: max(best[1][phase] - best[0][phase], 0.0) for phase in best[0]}


def _phase_ops(model: Any, device: str) -> dict[str, int]:
    """Ops of the model's forward and backward as the op inventory records them."""
    from dnnroofline.estimate.op_inventory import op_inventory

    inv = op_inventory(model, precision="fp32", batch_size=BATCH, image_size=IMAGE,
                       num_classes=10, device=device)  # fmt: skip
    phases = inv["totals"]["by_phase"]
    return {"forward": phases["forward"]["ops"], "backward": phases["backward"]["ops"]}


def host_per_op(
    device: str, classes: Iterable[str] = CHAIN_CLASSES, repeats: int = REPEATS
) -> dict:
    """``{"forward": {class: s}, "backward": {class: s}, "bare": {class: s}}``: host
    seconds of one more op of each class (see the module's docstring)."""
    out: dict[str, dict[str, float]] = {"forward": {}, "backward": {}, "bare": {}}
    for cls in classes:
        short, long = (_chain(cls, n) for n in CHAIN_LENGTHS)
        n_short, n_long = _phase_ops(short, device), _phase_ops(long, device)
        seconds = _paired_differences(short, long, device, repeats)
        for phase, ops in (("forward", "forward"), ("backward", "backward"), ("bare", "forward")):
            extra = n_long[ops] - n_short[ops]
            if extra > 0:  # a clone's backward passes the gradient on: no op to time
                out[phase][cls] = seconds[phase] / extra
    for phase in out:
        for cls in (*CHAIN_CLASSES, *FALLBACK):  # the classes not timed: elementwise's
            out[phase].setdefault(cls, out[phase].get(FALLBACK.get(cls, "elementwise"), 0.0))
    return out


def _optimizer_and_grads(device: str, tensors: int, precision: str) -> tuple:
    """SGD over ``tensors`` tiny parameter tensors with gradients, as the driver makes it
    (its own defaults decide foreach on the device), and amp's GradScaler or None."""
    import torch
    from torch import nn

    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(tensors // 2)]).to(device)
    params = list(model.parameters())
    opt = torch.optim.SGD(
        params, lr=0.1, momentum=OPTIMIZER["momentum"], weight_decay=OPTIMIZER["weight_decay"]
    )
    grads = [torch.randn_like(p) for p in params]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    scaler = None
    if precision == "amp":
        scaler = torch.amp.GradScaler(device)
        scaler.scale(torch.ones((), device=device))  # its scale exists before a step
    return params, grads, opt, scaler


def _fixed_at(device: str, tensors: int, precision: str) -> dict:
    """Seconds of the optimizer's step and of zero_grad for ``tensors`` parameters."""
    params, grads, opt, scaler = _optimizer_and_grads(device, tensors, precision)

    def set_grads():
        for p, g in zip(params, grads, strict=True):
            p.grad = g

    def step():
        set_grads()
        if scaler is None:
            opt.step()
        else:
            scaler.step(opt)
            scaler.update()

    def zero():
        set_grads()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    setting = _fastest(set_grads, device)
    return {
        "param_tensors": tensors,
        "optimizer_s": max(_fastest(step, device) - setting, 0.0),
        "zero_grad_s": max(_fastest(zero, device) - setting, 0.0),
    }


def _line(points: list[dict]) -> tuple[float, float]:
    """(intercept, slope) through the two points' total fixed seconds by tensors."""
    (x0, y0), (x1, y1) = ((p["param_tensors"], p["optimizer_s"] + p["zero_grad_s"]) for p in points)
    slope = max((y1 - y0) / (x1 - x0), 0.0)
    return max(y0 - slope * x0, 0.0), slope


def backward_call_s(device: str) -> float:
    """Host seconds of one ``backward()`` of a one-op graph: the engine's start."""
    import torch

    w = torch.ones(4, device=device, requires_grad=True)

    def once():
        w.sum().backward()

    for _ in range(3):
        once()
    return _fastest(once, device)


def fixed_costs(device: str, precisions: Iterable[str]) -> dict:
    """Per precision: the step's fixed host seconds as ``intercept_s`` +
    ``per_param_tensor_s`` x the model's parameter tensors, with the points measured."""
    engine = backward_call_s(device)
    out = {}
    for p in dict.fromkeys(precisions):
        points = [_fixed_at(device, n, p) for n in FIXED_TENSORS]
        intercept, slope = _line(points)
        out[p] = {"intercept_s": intercept + engine, "per_param_tensor_s": slope,
                  "points": points}  # fmt: skip
    return out


def launch_s_per_op(device: str) -> float | None:
    """CUDA-event seconds per tiny kernel queued back to back behind a sleeping kernel,
    so the device, not the host, sets their pace; None off CUDA."""
    if device != "cuda":
        return None
    import torch

    a, b = torch.ones(1, device=device), torch.ones(1, device=device)
    launch = []
    for _ in range(LAUNCH_LOOPS):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        for _ in range(LAUNCH_CALLS):
            torch.add(a, b)
        end.record()
        end.synchronize()
        launch.append(start.elapsed_time(end) / 1e3 / LAUNCH_CALLS)
    return summarize(launch)["median"]


METHOD = (
    "host seconds per op with autograd, by class and phase: chains of "
    f"{CHAIN_LENGTHS[0]} and {CHAIN_LENGTHS[1]} tiny layers of one class (batch {BATCH}, "
    f"{IMAGE}x{IMAGE} px, {WIDTH} channels) in an image classifier, forward with the loss "
    "and backward each timed on the host clock (the fastest of "
    f"{REPEATS}, alternating), their difference over the difference of the ops the op "
    "inventory records; "
    "bare: the same chains' no-grad forward; fixed: optimizer.step() (amp: GradScaler step "
    "and update) and zero_grad(set_to_none=True) of SGD as the driver makes it for "
    f"{FIXED_TENSORS[0]} and {FIXED_TENSORS[1]} tiny parameter tensors, a line through "
    "them, plus one backward() of a one-op graph"
)


#: Tests: the chains of two classes (the others take elementwise's), 3 repeats.
QUICK_CLASSES = ("conv", "elementwise")


def measure_dispatch(device: str, precisions: Iterable[str], quick: bool = False) -> dict:
    """The ``dispatch`` block of an efficiency document (see the module's docstring)."""
    import torch

    with torch.autocast(device, enabled=False):
        per_op = host_per_op(device, QUICK_CLASSES, 3) if quick else host_per_op(device)
        fixed = fixed_costs(device, precisions)
        launch = launch_s_per_op(device)
    return {
        "host_s": {"forward": per_op["forward"], "backward": per_op["backward"]},
        "bare_s": per_op["bare"],
        "launch_s_per_op": launch,
        "fixed": fixed,
        "method": METHOD
        + (
            "; launch: CUDA-event time per tiny kernel queued behind a sleeping kernel"
            if device == "cuda"
            else ""
        ),  # fmt: skip
    }
