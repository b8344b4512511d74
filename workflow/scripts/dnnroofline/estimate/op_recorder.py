"""One training step on fake tensors, recorded op by op as the device runs it.

:func:`record_step` runs the driver's step (``measure/train.py``: forward, cross-entropy
loss, backward, SGD, ``zero_grad(set_to_none=True)``; GradScaler under amp) on
``FakeTensor``s (shapes, no arithmetic: any batch costs the same) and describes every
aten op through :mod:`dnnroofline.estimate.op_rules`, in dispatch order, with its phase
and its layer type. The step is the device's:

* **device** ``cpu`` or ``cuda``: on ``cuda`` the parameters, images and labels are fake
  CUDA tensors, so dispatch picks the CUDA kernels (``cudnn_batch_norm``, the fused
  ``native_dropout``) on a host without a GPU. Autograd's engine needs a CUDA context
  for CUDA tensors, so there backward runs in :func:`python_backward`, which does what
  the engine does; on ``cpu`` the engine itself runs it.
* **autocast** on the device's type (amp float16, bf16 bfloat16; fp32/tf32 none),
  entered as ``torch.autocast`` enters it but without its check for a GPU.
* **channels_last**: the images and the 4-d weights in that layout.
* **attention** on ``cuda``: ``scaled_dot_product_attention`` runs the fused kernel an
  sm80+ GPU runs (:mod:`dnnroofline.estimate.attention`); torch's own choice needs a
  GPU, and on a host without one takes the math path that no such GPU runs.
* **the optimizer as the driver gets it**: plain ``SGD(params, lr, momentum,
  weight_decay)``, whose foreach choice torch makes from the params' device
  (:func:`optimizer_choice`): CUDA runs ``_foreach_*`` ops, a CPU one op per tensor.
* **GradScaler** under amp, and a ``"sync"`` where the real step waits for the device:
  GradScaler.step reads ``found_inf`` (``.item()``) before the optimizer step (on a CPU
  the host runs the ops itself: no sync).

Layer types: a forward op's is its rule's (a GEMM with a weight operand is ``linear``),
or ``dropout`` inside a dropout call, or ``loss`` inside the loss. A backward op's is the
layer of the forward op whose autograd node runs it (a linear layer's weight-gradient
``mm`` and bias-gradient ``sum`` are ``linear``); the engine's adds of a gradient that
fans in from several uses are ``elementwise``.
"""

from __future__ import annotations

import contextlib
import copy
import heapq
import logging
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dnnroofline.errors import InputError
from dnnroofline.estimate import op_rules
from dnnroofline.estimate.attention import gpu_attention
from dnnroofline.estimate.op_classes import step_variant
from dnnroofline.study.models import check_arch
from dnnroofline.study.precisions import autocast_dtype, require_known

#: The driver's optimizer (measure/train.py); the learning rate changes values, not ops.
OPTIMIZER = {"name": "SGD", "momentum": 0.9, "weight_decay": 1e-4}
LR = 0.1
IN_CHANNELS = 3
#: Inception/GoogLeNet: the weight of an auxiliary head's loss (as the driver's).
AUX_LOSS_WEIGHT = 0.4
#: The marker of a host-device synchronisation in a step's sequence.
SYNC = "sync"
DEVICES = ("cpu", "cuda")
ENGINES = ("autograd", "python")


class ModelCannotRun(InputError):
    """The model cannot train at this configuration (e.g. an image too small for its
    kernels). A property of the (model, image size), not a bad argument: the CLIs
    record it as a JSON with ``status: "error"``, as the driver records a failed run."""


def build_model(arch: str, num_classes: int = 1000) -> nn.Module:
    """A randomly initialised torchvision classifier (``weights=None``: nothing is
    downloaded). InputError for an unknown name, with close names as suggestions."""
    check_arch(arch)
    if not isinstance(num_classes, int) or num_classes < 1:
        raise InputError(f"--num-classes {num_classes!r}: must be a positive integer")
    import torchvision

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # googlenet/inception init_weights notices
        return torchvision.models.get_model(arch, weights=None, num_classes=num_classes)


@dataclass(frozen=True)
class StepSpec:
    """How the step runs: precision, device type and memory format."""

    precision: str
    device: str = "cpu"
    channels_last: bool = False

    @property
    def variant(self) -> str:
        return step_variant(self.device, self.channels_last)


@dataclass
class RecordedStep:
    """The ops of one step in dispatch order (op records, and :data:`SYNC` markers)."""

    spec: StepSpec
    events: list = field(default_factory=list)
    uncounted: Counter = field(default_factory=Counter)
    param_tensors: int = 0
    foreach: bool = False
    fused: bool = False
    traffic: list[dict] = field(default_factory=list)  # the model's forward ops

    def step_block(self) -> dict:
        """The inventory's ``step`` block."""
        dtype = autocast_dtype(self.spec.precision)
        return {
            "device": self.spec.device,
            "channels_last": self.spec.channels_last,
            "autocast": self.spec.device if dtype else None,
            "autocast_dtype": dtype,
            "optimizer": {"name": OPTIMIZER["name"], "foreach": self.foreach, "fused": self.fused},
            "grad_scaler": self.spec.precision == "amp",
        }

    def ops(self) -> list[dict]:
        return [e for e in self.events if e != SYNC]


# --------------------------------------------------------------------------- recording


class _Recorder:
    """Describes each aten op the step dispatches, with its phase and layer type."""

    def __init__(
        self, spec: StepSpec, weights: set[int], kinds: Callable[[torch.Tensor], str] | None
    ):
        self.phase = "forward"
        self.scope: str | None = None  # a layer type every forward op takes (loss, dropout)
        self.weights = weights  # storage keys of the weights and their copies
        self.kinds = kinds  # the traffic table's tensor kinds (None: no table)
        self.step = RecordedStep(spec)
        self.node_layers: dict[int, str | None] = {}  # autograd node -> forward layer
        self.engine_node: Any = None  # the node python_backward runs
        self.done: int | None = None  # the node autograd's engine has finished
        self._peek = _next_node()
        self._last_layer: str | None = None
        self._left: list[int] = []  # nodes the previous op left to the next one
        self._keep: list[torch.Tensor] = []  # no storage address reused while recording

    def dispatched(self, func: Any, args: tuple, kwargs: dict, out: Any, peek: int) -> None:
        if func.namespace != "aten":
            return  # prim.device, profiler ranges: no data, and no node of their own
        info = op_rules.describe(
            func, args, kwargs, out, optimizer=self.phase == "optimizer", weights=self.weights
        )
        layer = self._layer(info)
        if self.phase == "forward":
            self._name_nodes(peek, layer, args, kwargs, info is not None)
        self._peek = _next_node()
        if info is None:
            return
        if info.cls == "copy" and any(op_rules.storage_key(t) in self.weights for t in info.reads):
            self.weights.update(op_rules.storage_key(t) for t in info.writes)
            self._keep.extend(info.writes)  # an autocast copy of a weight is a weight
        if info.flops is None:
            self.step.uncounted[info.name] += 1
        record = info.record(self.phase) | {"layer": layer}
        self.step.events.append(record)
        if self.phase == "forward" and self.scope != "loss" and self.kinds is not None:
            self._traffic(info.name, args, kwargs, out)

    def _name_nodes(self, peek: int, layer: str | None, args: tuple, kwargs: dict, data: bool):
        """Give the autograd nodes made since the previous op a layer. Autograd makes an
        op's node just before dispatching it (the sequence number before the op's), but
        an in-place op that saves its input makes its node, then the clone's, then
        dispatches the clone and itself (no new node: it takes its own, left over by the
        clone); a node made after an op returned (CopySlices, for an in-place op on a
        view) is that op's."""
        new = list(range(self._peek, peek))
        graded = any(t.requires_grad for t in op_rules.tensors((args, kwargs)))
        if graded and new:
            self.node_layers[new.pop()] = layer
        elif graded and data and self._left:
            self.node_layers[self._left.pop()] = layer
        for seq in new:
            self.node_layers[seq] = self._last_layer  # unless the next op takes it
        self._left, self._last_layer = new, layer

    def _layer(self, info: op_rules.OpInfo | None) -> str | None:
        if self.phase == "forward":
            return self.scope or (info.layer if info else None)
        if self.phase == "backward":
            node = self.engine_node or torch._C._current_autograd_node()
            if node is not None and node._sequence_nr() != self.done:
                layer = self.node_layers.get(node._sequence_nr())
                if layer is not None:
                    return layer
        return info.layer if info else None

    def _traffic(self, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        """The op as model.traffic reads it: each tensor's storage, bytes, kind, fixed."""
        ins = [t for t in op_rules.tensors((args, kwargs)) if t.untyped_storage().nbytes()]
        outs = [t for t in op_rules.tensors(out) if t.untyped_storage().nbytes()]
        self._keep.extend(ins + outs)
        self.step.traffic.append(
            {
                "op": name,
                "inputs": list(dict.fromkeys(self._describe(t) for t in ins)),
                "outputs": list(dict.fromkeys(self._describe(t) for t in outs)),
            }
        )

    def _describe(self, t: torch.Tensor) -> tuple[int, int, str, bool]:
        kind = self.kinds(t)
        fixed = kind in ("param", "buffer") or t.dim() <= 1
        storage = t.untyped_storage()
        return storage._cdata, int(storage.nbytes()), _traffic_kind(kind, t), fixed

    def node_finished(self, seq: int) -> None:
        self.done = seq


def _traffic_kind(kind: str, t: torch.Tensor) -> str:
    if kind == "buffer" or (kind == "act" and not t.is_floating_point()):
        return "other"
    return kind


def _next_node() -> int:
    """The sequence number autograd gives its next node (nodes count up per thread)."""
    return torch._C._autograd._get_sequence_nr()


def _recording_modes(recorder: _Recorder) -> tuple[Any, Any]:
    """(dispatch mode that records every aten op, function mode that scopes dropout)."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            peek = _next_node()
            out = func(*args, **kwargs)
            recorder.dispatched(func, args, kwargs, out, peek)
            return out

    class Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            layer = op_rules.CALL_LAYERS.get(getattr(func, "__name__", ""))
            if layer is None or recorder.scope is not None:
                return func(*args, **(kwargs or {}))
            recorder.scope = layer
            try:
                return func(*args, **(kwargs or {}))
            finally:
                recorder.scope = None

    return Ops(), Calls()


# --------------------------------------------------------------------------- backward


def python_backward(root: torch.Tensor, recorder: Any = None) -> None:
    """``root.backward()`` without autograd's engine (which needs a CUDA context for
    CUDA tensors): the nodes in the engine's order (each once all its users have run,
    the latest-created first), each called under no_grad with its gradient checked
    against its input's metadata (summed to its shape, cast to its dtype) as the engine
    does, fan-in summed with ``+``, leaf gradients set or accumulated as AccumulateGrad
    would (in the parameter's layout)."""
    users: Counter = Counter()
    seen, stack = {root.grad_fn}, [root.grad_fn]
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is not None:
                users[nxt] += 1
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
    buffers = {root.grad_fn: [torch.ones_like(root)]}
    ready = [(-root.grad_fn._sequence_nr(), id(root.grad_fn), root.grad_fn)]
    while ready:
        node = heapq.heappop(ready)[2]
        grads = buffers.pop(node)
        if recorder is not None:
            recorder.engine_node = node
        outs = _run_node(node, grads)
        if recorder is not None:
            recorder.engine_node = None
        for (nxt, i), g in zip(node.next_functions, outs, strict=False):
            if nxt is None:
                continue
            buf = buffers.setdefault(nxt, [None] * len(nxt._input_metadata))
            if g is not None:
                buf[i] = g if buf[i] is None else buf[i] + g
            users[nxt] -= 1
            if users[nxt] == 0:
                heapq.heappush(ready, (-nxt._sequence_nr(), id(nxt), nxt))


def _run_node(node: Any, grads: list) -> list:
    """One node's output gradients, validated as the engine validates them."""
    if node.name() == "torch::autograd::AccumulateGrad":
        _accumulate(node.variable, grads[0])
        return []
    with torch.no_grad():  # as the engine: composite formulas stay fused (silu_backward)
        outs = node(*grads)
        outs = outs if isinstance(outs, tuple) else (outs,)
        checked = []
        for (nxt, i), g in zip(node.next_functions, outs, strict=False):
            if g is not None and nxt is not None:
                meta = nxt._input_metadata[i]
                if tuple(g.shape) != tuple(meta.shape):
                    g = g.sum_to_size(meta.shape)
                if g.dtype != meta.dtype:
                    g = g.to(meta.dtype)
            checked.append(g)
    return checked


def _accumulate(variable: torch.Tensor, g: torch.Tensor | None) -> None:
    """AccumulateGrad: the gradient stolen where its layout is the parameter's, else
    copied into that layout; added in place to an existing one."""
    if g is None:
        return
    with torch.no_grad():
        if variable.grad is not None:
            variable.grad.add_(g)
        elif not _same_layout(g, variable):
            variable.grad = g.new_empty_strided(variable.shape, variable.stride()).copy_(g)
        else:
            variable.grad = g


def _same_layout(g: torch.Tensor, variable: torch.Tensor) -> bool:
    """AccumulateGrad's layout contract: the strides agree wherever a size is not 1."""
    pairs = zip(g.shape, g.stride(), variable.stride(), strict=True)
    return all(size == 1 or a == b for size, a, b in pairs)


def _engine_backward(
    root: torch.Tensor, recorder: _Recorder, grad: torch.Tensor | None = None
) -> None:
    """Autograd's engine, each node telling the recorder when it has run (the adds
    after it are the fan-in of its gradients)."""
    handles, seen, stack = [], {root.grad_fn}, [root.grad_fn]
    while stack:
        node = stack.pop()
        if node.name() != "torch::autograd::AccumulateGrad":
            seq = node._sequence_nr()
            handles.append(node.register_hook(lambda *_, s=seq: recorder.node_finished(s)))
        for nxt, _ in node.next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    try:
        root.backward(grad)
    finally:
        for h in handles:
            h.remove()


# --------------------------------------------------------------------------- the step


def optimizer_choice(params: list[torch.Tensor]) -> tuple[bool, bool]:
    """(fused, foreach) of the driver's SGD, which names neither: torch's own default
    (``torch.optim.optimizer._default_to_fused_or_foreach``) for these params. Its
    check that a param is a plain Tensor fails for a fake one, where the real run's
    Parameter passes, so it is asked of the params' device types alone."""
    from torch.optim.optimizer import _get_foreach_kernels_supported_devices

    devices = _get_foreach_kernels_supported_devices()
    return False, all(p.device.type in devices for p in params)


@contextlib.contextmanager
def device_autocast(device: str, dtype: torch.dtype | None) -> Iterator[None]:
    """``torch.autocast(device, dtype)`` as its ``__enter__``/``__exit__`` set it, without
    its check that the device exists (fake CUDA tensors need none)."""
    if dtype is None:
        yield
        return
    prev = (
        torch.is_autocast_enabled(device),
        torch.get_autocast_dtype(device),
        torch.is_autocast_cache_enabled(),
    )
    torch.set_autocast_enabled(device, True)
    torch.set_autocast_dtype(device, dtype)
    torch.autocast_increment_nesting()
    torch.set_autocast_cache_enabled(True)
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled(device, prev[0])
        torch.set_autocast_dtype(device, prev[1])
        torch.set_autocast_cache_enabled(prev[2])


class _StepScaler(torch.amp.GradScaler):
    """amp's GradScaler on any device (its check for a GPU skipped); its step marks the
    host's read of ``found_inf`` instead of making it (a fake tensor has no value; the
    check found no inf, as in a healthy step)."""

    def __init__(self, device: str, on_sync: Callable[[], None] | None) -> None:
        super().__init__("cpu")
        self._device = device
        self._on_sync = on_sync

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        if self._on_sync is not None:
            self._on_sync()
        return optimizer.step(*args, **kwargs)


def _loss(criterion: Callable, out: Any, target: torch.Tensor) -> torch.Tensor:
    """The driver's loss: Inception/GoogLeNet train-mode outputs carry aux logits."""
    if isinstance(out, tuple):
        main, *aux = out
        total = criterion(main, target)
        for a in aux:
            if a is not None:
                total = total + AUX_LOSS_WEIGHT * criterion(a, target)
        return total
    return criterion(out, target)


def _storage_kinds(model: nn.Module, *inputs: torch.Tensor) -> Callable[[torch.Tensor], str]:
    """A tensor's kind for the traffic table: a trained weight (param), the image batch
    (input), a buffer or frozen weight (buffer), else an activation (act)."""
    key = op_rules.storage_key
    params = {key(p) for p in model.parameters() if p.requires_grad}
    buffers = {key(b) for b in model.buffers()} | {key(p) for p in model.parameters()}
    given = {key(t) for t in inputs}

    def kind(t: torch.Tensor) -> str:
        k = key(t)
        if k in params:
            return "param"
        if k in given:
            return "input"
        return "buffer" if k in buffers else "act"

    return kind


def _run_step(
    model: nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor],
    recorder: _Recorder,
    engine: str,
) -> None:
    """One training step of ``model`` (fake, placed) as the driver runs it, recorded."""
    spec, images, labels = recorder.step.spec, *batch
    trained = [p for p in model.parameters() if p.requires_grad]
    fused, foreach = optimizer_choice(trained)
    optimizer = torch.optim.SGD(
        trained,
        lr=LR,
        momentum=OPTIMIZER["momentum"],
        weight_decay=OPTIMIZER["weight_decay"],
        foreach=foreach,
    )
    for p in trained:  # steady state: the first step's buffer creation is not timed
        optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)
    recorder.step.param_tensors, recorder.step.fused, recorder.step.foreach = (
        len(trained),
        fused,
        foreach,
    )
    scaler = None
    if spec.precision == "amp":
        sync = (lambda: recorder.step.events.append(SYNC)) if spec.device == "cuda" else None
        scaler = _StepScaler(spec.device, sync)
        scaler.scale(torch.zeros((), device=images.device))  # its scale exists before a step
    dtype = autocast_dtype(spec.precision)
    autocast = device_autocast(spec.device, getattr(torch, dtype) if dtype else None)
    criterion = nn.CrossEntropyLoss()
    ops, calls = _recording_modes(recorder)
    model.train()
    with ops, gpu_attention(spec.device):
        with autocast, calls:
            out = model(images)
            recorder.scope = "loss"
            loss = _loss(criterion, out, labels)
            recorder.scope = None
        recorder.phase = "backward"
        root = scaler.scale(loss) if scaler is not None else loss
        if engine == "python":
            python_backward(root, recorder)
        else:
            _engine_backward(root, recorder)
        recorder.phase = "optimizer"
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def _fake_model(
    model_or_arch: nn.Module | str,
    fake_mode: Any,
    num_classes: int,
    factory: str | None,
    kwargs: dict | None,
) -> nn.Module:
    """The model with fake parameters: built inside the fake mode (its initialisation
    then costs nothing), or, where the initialisation reads a value (Inception's
    truncated normal), built for real and copied into the fake mode, as a given module is."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, FakeCopyMode

    model = model_or_arch
    if not isinstance(model, nn.Module):
        from dnnroofline.study.models import build_custom, refuse_kwargs_without_factory

        refuse_kwargs_without_factory(model, factory, kwargs)

        def build() -> nn.Module:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # googlenet/inception init notices
                if factory:
                    return build_custom(factory, kwargs, num_classes)
                return build_model(model, num_classes=num_classes)

        try:
            with fake_mode:
                return build()
        except DataDependentOutputException:
            model = build()
    with FakeCopyMode(fake_mode):
        return copy.deepcopy(model)


def _place(model: nn.Module, device: str, channels_last: bool) -> None:
    """Parameters and buffers on ``device``, 4-d ones channels_last, as the driver's
    ``model.to(device, memory_format=...)`` (shared parameters stay shared)."""
    if device == "cpu" and not channels_last:
        return
    memo: dict[int, torch.Tensor] = {}

    def placed(t: torch.Tensor) -> torch.Tensor:
        new = t.detach().to(device)
        if channels_last and new.dim() == 4:
            new = new.contiguous(memory_format=torch.channels_last)
        return new

    for module in model.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            if id(p) not in memo:
                memo[id(p)] = nn.Parameter(placed(p), requires_grad=p.requires_grad)
            setattr(module, name, memo[id(p)])
        for name, b in list(module.named_buffers(recurse=False)):
            setattr(module, name, placed(b))


def _check_device(device: str, fake_mode: Any) -> None:
    if device not in DEVICES:
        raise InputError(f"--device {device!r}: expected one of {', '.join(DEVICES)}")
    if device == "cuda":
        try:
            with fake_mode:
                torch.empty(1, device="cuda")
        except (RuntimeError, AssertionError) as exc:
            raise InputError(
                f"--device cuda: this torch build ({torch.__version__}) cannot make fake "
                f"CUDA tensors, so it cannot record the step as a GPU runs it: {exc}"
            ) from None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The fake mode logs a traceback for a shape check that fails (an image too small
    for the model); the error is raised and reported as ModelCannotRun anyway."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        log.setLevel(level)


def positive(value: Any, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{flag} {value!r}: must be a positive integer")
    return value


def record_step(
    model_or_arch: nn.Module | str,
    spec: StepSpec,
    *,
    batch_size: int,
    image_size: int,
    num_classes: int = 1000,
    factory: str | None = None,
    kwargs: dict | None = None,
    arch: str | None = None,
    engine: str | None = None,
    traffic: bool = False,
) -> RecordedStep:
    """The ops of one training step of ``model_or_arch`` (a torchvision name, the name
    of ``factory``'s model, or a module, named ``arch``) as ``spec`` runs it.
    ``engine``: ``autograd`` (the default on a CPU) or ``python`` (on CUDA, the only
    one); ``traffic``: also keep the forward ops' tensors for the traffic table.

    InputError on a bad argument, ModelCannotRun where the model cannot train at this
    image size.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    require_known(spec.precision, "--precision")
    positive(batch_size, "--batch-size")
    positive(image_size, "--image-size")
    positive(num_classes, "--num-classes")
    engine = engine or ("autograd" if spec.device == "cpu" else "python")
    if engine not in ENGINES or (spec.device == "cuda" and engine == "autograd"):
        raise InputError(f"engine {engine!r}: cpu runs autograd or python, cuda python")
    fake_mode = FakeTensorMode()
    _check_device(spec.device, fake_mode)
    name = arch or (
        model_or_arch if isinstance(model_or_arch, str) else type(model_or_arch).__name__
    )
    model = _fake_model(model_or_arch, fake_mode, num_classes, factory, kwargs)
    with fake_mode:
        _place(model, spec.device, spec.channels_last)
        images = torch.empty(batch_size, IN_CHANNELS, image_size, image_size, device=spec.device)
        if spec.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        labels = torch.zeros(batch_size, dtype=torch.long, device=spec.device)
        weights = {op_rules.storage_key(p) for p in model.parameters()}
        kinds = _storage_kinds(model, images) if traffic else None
        recorder = _Recorder(spec, weights, kinds)
        try:
            with _quiet():
                _run_step(model, (images, labels), recorder, engine)
        except (RuntimeError, ValueError, AssertionError) as exc:
            raise ModelCannotRun(
                f"--arch {name!r} cannot train on {image_size}x{image_size} images "
                f"(--image-size {image_size}) at --batch-size {batch_size}: {exc}"
            ) from exc
    return recorder.step


def record_call(module: nn.Module, *inputs: torch.Tensor, traffic: bool = False) -> RecordedStep:
    """One forward and backward of ``module(*inputs)`` on fake copies (a gradient of
    ones at its first output; an input gets a gradient where it requires grad), in the
    module's own mode: the rules on one layer, as the step applies them. No loss, no
    optimizer; the module and inputs are left as they were. ``traffic``: keep the
    forward ops' tensors for the traffic table."""
    from torch._subclasses.fake_tensor import FakeCopyMode, FakeTensorMode

    fake_mode = FakeTensorMode()
    with FakeCopyMode(fake_mode):
        module, inputs = copy.deepcopy((module, inputs))
    weights = {op_rules.storage_key(p) for p in module.parameters()}
    kinds = _storage_kinds(module, *inputs) if traffic else None
    recorder = _Recorder(StepSpec("fp32"), weights, kinds)
    ops, calls = _recording_modes(recorder)
    with fake_mode, _quiet(), ops:
        with calls:
            out = module(*inputs)
        out = op_rules.tensors(out)[0]
        recorder.phase = "backward"
        _engine_backward(out, recorder, torch.ones_like(out))
    return recorder.step
