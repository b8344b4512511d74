"""The op-class sweep's microbenchmarks: shapes drawn over ranges, and the ops built.

Each table (:data:`dnnroofline.estimate.op_classes.TABLE_KEYS`) has a drawer: it draws one
op of its class at random over fixed ranges (log-uniform sizes: batch, channels, spatial
size, kernel, stride, groups; GEMM m, n, k; element counts...), never from a model of a
study, and returns the op as the step calls it with the ``shape`` dict the op inventory
records for such an op (:mod:`dnnroofline.perfmodel.shape_features` reads both alike).

Inputs are views into one random buffer per dtype (:class:`Pool`), placed as a step
would find them: the input an op takes from the op just before it (the activation a
layer reads, the gradient a backward op receives) is one view, hot in cache where it
fits; the others (weights, activations saved in the forward, a residual) rotate over
enough places to spread over twice the device's last-level cache, so they come from
DRAM, as a step's do (two sets of a small op would stay in cache and run faster than
any step runs them). A drawn op costs no allocation or random numbers before it is
timed, and one whose ideal time falls outside the sweep's window is dropped before
anything runs. FLOPs follow :mod:`dnnroofline.estimate.flop_count`'s
rules and bytes the inventory's: every tensor argument read in full, every output (and
in-place target) written in full.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dnnroofline.study.precisions import HALF_PRECISIONS, torch_dtype

#: Input sets each op rotates between: at least two, at most this many.
MIN_SETS, MAX_SETS = 2, 64
#: Shape ranges per device (log-uniform between the bounds): wide enough for the CNNs
#: and transformers people train at their image sizes, never taken from one of them.
RANGES: dict[str, dict[str, tuple[int, int]]] = {
    "cpu": {"n": (1, 64), "hw": (2, 160), "c": (3, 1024), "co": (8, 2048), "dw_c": (8, 1536),
            "mnk": (2, 4096), "numel": (256, 2**24), "params": (16, 2**23)},
    "cuda": {"n": (1, 512), "hw": (2, 256), "c": (3, 2048), "co": (8, 4096), "dw_c": (8, 2048),
             "mnk": (16, 16384), "numel": (4096, 2**29), "params": (64, 2**26)},
    "quick": {"n": (1, 4), "hw": (4, 16), "c": (3, 32), "co": (8, 32), "dw_c": (8, 32),
              "mnk": (16, 128), "numel": (4096, 2**16), "params": (4096, 2**16)},
}  # fmt: skip
KERNELS = (1, 1, 3, 3, 3, 5, 7)
GROUPS = (2, 4, 8, 16, 32, 64)


class Rejected(Exception):
    """A drawn op the sweep does not time (too large or too small for its window)."""


@dataclass
class Op:
    """One microbenchmark: what it is, its table, phase, shape, FLOPs and bytes per call,
    and the call (which rotates between the input sets)."""

    what: str
    key: str
    phase: str
    shape: dict
    flops: int
    nbytes: int
    call: Callable[[], Any] = field(repr=False)


class Pool:
    """One random buffer per dtype on the device; inputs are views into it."""

    def __init__(self, torch: Any, device: str, elements: int, seed: int = 0):
        self.torch, self.device, self.elements = torch, device, int(elements)
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self._by_dtype: dict[Any, Any] = {}

    def _buffer(self, dtype: Any) -> Any:
        if dtype not in self._by_dtype:
            t = self.torch.empty(self.elements, device=self.device, dtype=self.torch.float32)
            t.normal_(generator=self.gen)
            self._by_dtype[dtype] = t.to(dtype)
        return self._by_dtype[dtype]

    def buffers(self) -> list[Any]:
        """The buffers every input is a view of (an output in one of them is no
        allocation)."""
        return list(self._by_dtype.values())

    def take(self, shape: tuple, dtype: Any, offset: int, channels_last: bool = False) -> Any:
        """A view of ``shape`` (channels_last strides for a 4-d one where asked) at
        element ``offset`` of the buffer."""
        numel = math.prod(shape)
        flat = self._buffer(dtype)[offset : offset + numel]
        if channels_last and len(shape) == 4:
            n, c, h, w = shape
            return flat.view(n, h, w, c).permute(0, 3, 1, 2)
        return flat.view(*shape)


class Setting:
    """How one precision's ops are built: the activations' dtype (the autocast dtype
    under amp and bf16, as conv, GEMM and the kernels after them run), fp32 for the
    optimizer, the memory format, the input pool."""

    def __init__(
        self,
        torch: Any,
        pool: Pool,
        precision: str,
        channels_last: bool,
        admit: Callable[[float, float], bool] = lambda flops, nbytes: True,
        cold_bytes: int = 0,
    ):
        self.torch, self.pool, self.precision, self._admit = torch, pool, precision, admit
        self.cold_bytes = cold_bytes  # the inputs a repeat spreads over: twice the cache
        self.dtype = getattr(torch, torch_dtype(precision))
        self.half = self.dtype if precision in HALF_PRECISIONS else torch.float16
        self.channels_last = channels_last
        self.item = self.torch.tensor([], dtype=self.dtype).element_size()

    def admit(self, flops: float, nbytes: float) -> None:
        """Go on building an op of this size, or raise :class:`Rejected` (its ideal time
        is outside the sweep's window): checked before any input is made."""
        if not self._admit(flops, nbytes):
            raise Rejected(f"{flops:.3g} FLOPs, {nbytes:.3g} bytes: outside the window")

    def sets(
        self,
        *shapes: tuple,
        hot: tuple[int, ...] = (),
        dtype: Any = None,
        layout: bool = True,
        channels_last: bool | None = None,
    ) -> list[tuple]:
        """Argument tuples of views with these shapes. The arguments in ``hot`` (their
        positions) are the same views in every tuple: as in a step, where an op reads
        what the op before it just wrote, they stay in cache where they fit. The others
        rotate over enough places to spread over :attr:`cold_bytes` (:data:`MIN_SETS` to
        :data:`MAX_SETS` tuples), as a step's saved activations, weights and gradients
        come from DRAM. ``layout``: the 4-d ones in the env's memory format (or in
        ``channels_last``'s)."""
        dt = dtype or self.dtype
        cl = (self.channels_last if channels_last is None else channels_last) and layout
        sizes = [math.prod(shape) for shape in shapes]
        warm = sum(size for i, size in enumerate(sizes) if i in hot)
        cold = sum(sizes) - warm
        room = (self.pool.elements - warm) // max(cold, 1)
        if room < MIN_SETS:
            raise Rejected(f"{shapes}: larger than the input pool")
        item = self.torch.tensor([], dtype=dt).element_size()
        wanted = math.ceil(self.cold_bytes / max(cold * item, 1)) if cold else MIN_SETS
        count = max(MIN_SETS, min(MAX_SETS, wanted, room))
        out = []
        for i in range(count):
            offset, fixed, views = i * cold, count * cold, []
            for j, (shape, size) in enumerate(zip(shapes, sizes, strict=True)):
                if j in hot:
                    views.append(self.pool.take(shape, dt, fixed, cl))
                    fixed += size
                else:
                    views.append(self.pool.take(shape, dt, offset, cl))
                    offset += size
            out.append(tuple(views))
        return out


def rotating(fn: Callable, sets: list[tuple]) -> Callable[[], Any]:
    state = {"i": 0}

    def call() -> Any:
        args = sets[state["i"] % len(sets)]
        state["i"] += 1
        return fn(*args)

    return call


# --------------------------------------------------------------------------- drawing


class Draw:
    """Random sizes over one device's :data:`RANGES`."""

    def __init__(self, rng: random.Random, ranges: Mapping[str, tuple[int, int]]):
        self.rng, self.ranges = rng, ranges

    def size(self, name: str, lo: int | None = None) -> int:
        low, high = self.ranges[name]
        low = max(low, lo or low)
        return max(1, round(math.exp(self.rng.uniform(math.log(low), math.log(max(low, high))))))

    def pick(self, options: tuple) -> Any:
        return self.rng.choice(options)


def _out(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def conv_shape(d: Draw, depthwise: bool, backward: bool) -> dict:
    """A convolution's inventory shape: dense or grouped (one in six), or depthwise."""
    k = d.pick(KERNELS if not depthwise else (3, 3, 5, 7))
    stride = d.pick((1, 1, 2))
    # padded by k // 2, a map smaller than the kernel is a layer too: a network's last
    # stages at small images run them (a 3x3 on 2x2, a 5x5 depthwise on 4x4), slowest
    # of all per FLOP on a CPU
    hw = d.size("hw")
    if depthwise:
        c = co = groups = d.size("dw_c")
    else:
        c, co, groups = d.size("c"), d.size("co"), 1
        if d.rng.random() < 1 / 6:
            groups = d.pick(GROUPS)  # two or more input channels a group: not depthwise
            c, co = max(2 * groups, c // groups * groups), max(groups, co // groups * groups)
    ho = _out(hw, k, stride, k // 2)
    return {"n": d.size("n"), "c_in": c, "c_out": co, "h": hw, "w": hw, "h_out": ho, "w_out": ho,
            "kh": k, "kw": k, "stride": stride, "groups": groups,
            "input_grad": (d.rng.random() > 0.1) if backward else False,
            "weight_grad": backward, "bias": False}  # fmt: skip


def gemm_shape(d: Draw) -> dict:
    shape = {"m": d.size("mnk"), "n": d.size("mnk"), "k": d.size("mnk")}
    if d.rng.random() < 0.25:  # attention's batched products
        shape["batch"] = d.size("n")
    return shape


def activation_shape(d: Draw) -> tuple[int, int, int, int]:
    """An (n, c, h, w) activation of at most the range's elements."""
    n, c, hw = d.size("n"), d.size("co"), d.size("hw")
    cap = d.ranges["numel"][1]
    while n * c * hw * hw > cap and hw > 1:
        hw //= 2
    while n * c * hw * hw > cap and c > 1:
        c //= 2
    return n, c, hw, hw


# --------------------------------------------------------------------------- building


def conv_op(s: Setting, shape: dict, backward: bool, key: str) -> Op:
    import torch.nn.functional as F

    n, c, co, g = shape["n"], shape["c_in"], shape["c_out"], shape["groups"]
    k, st, hw, ho = shape["kh"], shape["stride"], shape["h"], shape["h_out"]
    pad, item = k // 2, s.item
    flop = 2 * n * co * ho * ho * (c // g) * k * k
    x, w, y = n * c * hw * hw, co * (c // g) * k * k, n * co * ho * ho
    kind = "depthwise conv" if g == c == co and g > 1 else "conv"
    what = f"{kind} {k}x{k}/{st} g{g} n{n} c{c}->{co} {hw}x{hw}"
    if not backward:
        s.admit(flop, item * (x + w + y))
        sets = s.sets((n, c, hw, hw), (co, c // g, k, k), hot=(0,))  # x: the layer before's
        call = rotating(lambda a, b: F.conv2d(a, b, None, st, pad, 1, g), sets)
        return Op(f"{what} fwd", key, "forward", shape, flop, item * (x + w + y), call)
    mask = [bool(shape["input_grad"]), True, False]
    grads = (x if mask[0] else 0) + w
    flops = flop * (2 if mask[0] else 1)
    s.admit(flops, item * (y + x + w + grads))
    # the output's gradient comes from the backward before; input and weight from DRAM
    sets = s.sets((n, co, ho, ho), (n, c, hw, hw), (co, c // g, k, k), hot=(0,))
    aten = s.torch.ops.aten

    def bwd(gy, a, b):
        return aten.convolution_backward(gy, a, b, None, [st] * 2, [pad] * 2, [1, 1], False,
                                         [0, 0], g, mask)  # fmt: skip

    return Op(f"{what} bwd", key, "backward", shape, flops, item * (y + x + w + grads),
              rotating(bwd, sets))  # fmt: skip


def gemm_op(s: Setting, shape: dict) -> Op:
    m, n, k, b = shape["m"], shape["n"], shape["k"], shape.get("batch")
    torch, batch = s.torch, b or 1
    elems = batch * (m * k + k * n + m * n)
    s.admit(2 * batch * m * n * k, s.item * elems)
    if b:
        sets = s.sets((b, m, k), (b, k, n), hot=(0,), layout=False)
        fn = torch.bmm
    else:
        sets = s.sets((m, k), (k, n), hot=(0,), layout=False)
        fn, b = torch.mm, 1
    what = f"gemm {f'{b}x' if b > 1 else ''}{m}x{n}x{k} (MxNxK)"
    return Op(what, "gemm", "forward", shape, 2 * b * m * n * k, s.item * elems, rotating(fn, sets))


#: Elementwise ops of a step: (inputs, in place, broadcast, FLOPs per element, call).
ELEMENTWISE: dict[str, tuple[int, bool, bool, int, Callable]] = {
    "add": (2, False, False, 1, lambda t, a, b: t.add(a, b)),
    "mul": (2, False, False, 1, lambda t, a, b: t.mul(a, b)),
    "add_": (2, True, False, 1, lambda t, a, b: a.add_(b)),
    "relu": (1, False, False, 1, lambda t, a: t.relu(a)),
    "relu_": (1, True, False, 1, lambda t, a: t.relu_(a)),
    "sigmoid": (1, False, False, 4, lambda t, a: t.sigmoid(a)),
    "silu": (1, False, False, 5, lambda t, a: t.nn.functional.silu(a)),
    "hardswish": (1, False, False, 5, lambda t, a: t.nn.functional.hardswish(a)),
    "gelu": (1, False, False, 5, lambda t, a: t.nn.functional.gelu(a)),  # ViT, ConvNeXt
    "threshold_backward": (2, False, False, 1,
                           lambda t, a, b: t.ops.aten.threshold_backward(a, b, 0)),
    "mul_channel": (2, False, True, 1, lambda t, a, b: t.mul(a, b)),  # squeeze-excite scale
}  # fmt: skip


def elementwise_op(s: Setting, name: str, act: tuple) -> Op:
    inputs, in_place, broadcast, per, fn = ELEMENTWISE[name]
    numel = math.prod(act)
    shapes = [act] * inputs
    if broadcast:
        shapes[1] = (act[0], act[1], 1, 1)
    read = sum(math.prod(sh) for sh in shapes)
    s.admit(per * numel, s.item * (read + numel))
    # the first input is the op before's output; a second one (a residual, a saved
    # activation) comes from DRAM; an in-place op writes into the pool, values stay finite
    sets = s.sets(*shapes, hot=(0,))
    shape = {"numel": numel, "inputs": inputs, "in_place": in_place, "broadcast": broadcast}
    call = rotating(lambda *a: fn(s.torch, *a), sets)
    what = f"{name} {'x'.join(map(str, act))}"
    return Op(what, "elementwise", "forward", shape, per * numel, s.item * (read + numel), call)


def reduction_op(s: Setting, act: tuple, backward: bool) -> Op:
    """Sums as a step runs them: over the spatial dims (global average pooling) in the
    forward, over the batch (a bias gradient) in the backward."""
    torch = s.torch
    n, c, h, w = act
    s.admit(n * c * h * w, s.item * (n * c * h * w + (c if backward else n * c)))
    if backward:
        shape2 = (n * h * w, c)
        sets = s.sets(shape2, hot=(0,), layout=False)
        call = rotating(lambda a: torch.sum(a, dim=0), sets)
        n_in, n_out, what = n * h * w * c, c, f"sum over batch {n * h * w}x{c}"
    else:
        sets = s.sets(act, hot=(0,))
        call = rotating(lambda a: torch.ops.aten._adaptive_avg_pool2d(a, [1, 1]), sets)
        n_in, n_out, what = n * c * h * w, n * c, f"adaptive avg pool {'x'.join(map(str, act))}"
    shape = {"numel_in": n_in, "numel_out": n_out}
    phase = "backward" if backward else "forward"
    return Op(what, "reduction", phase, shape, n_in, s.item * (n_in + n_out), call)


def batch_norm_op(s: Setting, act: tuple, backward: bool) -> Op:
    """Batch norm in training through the aten ops that pick the kernels autograd runs
    (cuDNN's on CUDA, native elsewhere); weight, bias and running stats in fp32."""
    torch, aten = s.torch, s.torch.ops.aten
    n, c, h, w = act
    numel = n * c * h * w
    cudnn = bool(torch.backends.cudnn.enabled)
    shape = {"n": n, "c": c, "spatial": h * w}
    s.admit((9 if backward else 5) * numel, (3 if backward else 2) * s.item * numel)

    def stats():  # weight, bias, running mean and var in fp32, as autocast keeps them
        return [torch.rand(c, device=s.pool.device) + 0.5 for _ in range(4)]

    def forward(x, wt, b, rm, rv):
        return aten._batch_norm_impl_index(x, wt, b, rm, rv, True, 0.1, 1e-5, cudnn)

    label = "x".join(map(str, act))
    if not backward:
        sets = [(x, *stats()) for (x,) in s.sets(act, hot=(0,))]
        call = rotating(lambda *a: forward(*a)[:4], sets)
        return Op(f"batch norm {label} fwd", "normalization", "forward", shape, 5 * numel,
                  2 * s.item * numel, call)  # fmt: skip
    sets = []
    for x, gy in s.sets(act, act, hot=(1,)):  # x saved in the forward, gy just made
        wt, b, rm, rv = stats()
        _, mean, invstd, reserve, impl = forward(x, wt, b, rm, rv)
        sets.append((gy, x, wt, rm, rv, mean, invstd, reserve))

    def bwd(gy, x, wt, rm, rv, mean, invstd, reserve):
        return aten._batch_norm_impl_index_backward(
            impl, x, gy, wt, rm, rv, mean, invstd, True, 1e-5, [True, True, True], reserve
        )

    return Op(f"batch norm {label} bwd", "normalization", "backward", shape, 9 * numel,
              3 * s.item * numel, rotating(bwd, sets))  # fmt: skip


def layer_norm_op(s: Setting, act: tuple, backward: bool) -> Op:
    """Layer norm over the channels of every position (a transformer's tokens, ConvNeXt's
    channels-last blocks): the rows of an (n, c, h, w) activation, c wide. In float32
    whatever the precision: autocast runs layer norm in fp32 under amp and bf16."""
    torch, aten = s.torch, s.torch.ops.aten
    n, c, h, w = act
    rows, f32 = n * h * w, torch.float32
    numel = rows * c
    shape = {"n": rows, "c": c, "spatial": 1}  # as the inventory records a layer norm
    s.admit((9 if backward else 5) * numel, (3 if backward else 2) * 4 * numel)

    def affine():  # weight and bias
        return [torch.rand(c, device=s.pool.device) + 0.5 for _ in range(2)]

    label = f"{rows}x{c}"
    if not backward:
        sets = [(x, *affine()) for (x,) in s.sets((rows, c), hot=(0,), dtype=f32, layout=False)]
        call = rotating(lambda x, wt, b: aten.native_layer_norm(x, [c], wt, b, 1e-6), sets)
        return Op(f"layer norm {label} fwd", "normalization", "forward", shape, 5 * numel,
                  2 * 4 * numel, call)  # fmt: skip
    sets = []
    for x, gy in s.sets((rows, c), (rows, c), hot=(1,), dtype=f32, layout=False):
        wt, b = affine()
        _, mean, rstd = aten.native_layer_norm(x, [c], wt, b, 1e-6)
        sets.append((gy, x, mean, rstd, wt, b))

    def bwd(gy, x, mean, rstd, wt, b):
        return aten.native_layer_norm_backward(gy, x, [c], mean, rstd, wt, b, [True] * 3)

    return Op(f"layer norm {label} bwd", "normalization", "backward", shape, 9 * numel,
              3 * 4 * numel, rotating(bwd, sets))  # fmt: skip


def pool_op(s: Setting, act: tuple, window: int, backward: bool) -> Op:
    """Max pooling (a stem's 3x3/2, or 2x2/2), forward or backward."""
    aten = s.torch.ops.aten
    n, c, h, w = act
    stride, pad = 2, window // 2 if window == 3 else 0
    ho, wo = _out(h, window, stride, pad), _out(w, window, stride, pad)
    kw = {"kernel_size": [window] * 2, "stride": [stride] * 2, "padding": [pad] * 2}
    shape = {"n": n, "c": c, "h": h, "w": w, "h_out": ho, "w_out": wo, "kh": window,
             "kw": window, "stride": stride}  # fmt: skip
    label = f"max pool {window}x{window}/2 {'x'.join(map(str, act))}"
    n_in, n_out = n * c * h * w, n * c * ho * wo
    idx_bytes = 8 * n_out
    s.admit(n_out, s.item * (3 * n_in if backward else n_in + n_out) + idx_bytes)
    if not backward:
        call = rotating(lambda x: aten.max_pool2d_with_indices(x, **kw), s.sets(act, hot=(0,)))
        return Op(f"{label} fwd", "pooling", "forward", shape, (window**2 - 1) * n_out,
                  s.item * (n_in + n_out) + idx_bytes, call)  # fmt: skip
    sets = []
    for x, gy in s.sets(act, (n, c, ho, wo), hot=(1,)):
        _, idx = aten.max_pool2d_with_indices(x, **kw)
        sets.append((gy, x, idx))

    def bwd(gy, x, idx):
        return aten.max_pool2d_with_indices_backward(
            gy, x, kw["kernel_size"], kw["stride"], kw["padding"], [1, 1], False, idx
        )

    return Op(f"{label} bwd", "pooling", "backward", shape, n_out,
              s.item * (n_out + n_in + n_in) + idx_bytes, rotating(bwd, sets))  # fmt: skip


def copy_op(s: Setting, act: tuple, kind: str) -> Op:
    """A cast to the half dtype (autocast's weight and input copies), a layout change,
    or a clone."""
    torch = s.torch
    numel = math.prod(act)
    label = "x".join(map(str, act))
    s.admit(0, 2 * s.item * numel)
    if kind == "cast":
        sets = s.sets(act, dtype=torch.float32, layout=False)
        half = s.half
        nbytes = numel * (4 + torch.tensor([], dtype=half).element_size())
        return Op(f"cast float32->{str(half)[6:]} {label}", "copy", "forward",
                  {"numel": numel}, 0, nbytes, rotating(lambda x: x.to(half), sets))  # fmt: skip
    if kind == "layout":
        sets = s.sets(act, channels_last=not s.channels_last)
        fmt = torch.channels_last if s.channels_last else torch.contiguous_format
        call = rotating(lambda x: x.contiguous(memory_format=fmt), sets)
        return Op(f"layout change {label}", "copy", "forward", {"numel": numel}, 0,
                  2 * s.item * numel, call)  # fmt: skip
    sets = s.sets(act, hot=(0,))
    return Op(f"clone {label}", "copy", "forward", {"numel": numel}, 0, 2 * s.item * numel,
              rotating(lambda x: x.clone(), sets))  # fmt: skip


def optimizer_op(s: Setting, sizes: list[int], foreach: bool) -> Op:
    """SGD's update of parameters of these sizes in fp32: ``param.add_(buf, alpha)`` per
    tensor, or one ``_foreach_add_`` over them all (CUDA's default)."""
    torch = s.torch
    f32 = torch.float32
    numel = sum(sizes)
    s.admit(2 * numel, 12 * numel)
    # parameters and momentum buffers, updated in the pool in place
    views = s.sets(*[(n,) for n in sizes] * 2, dtype=f32, layout=False)
    shape = {"numel": numel, "tensors": len(sizes)}
    if foreach:
        sets = [(list(v[: len(sizes)]), list(v[len(sizes) :])) for v in views]
        call = rotating(lambda p, b: torch._foreach_add_(p, b, alpha=-0.1), sets)
        what = f"_foreach_add_ fp32 {len(sizes)} tensors, {numel} elements"
    else:
        call = rotating(lambda p, b: p.add_(b, alpha=-0.1), views)
        what = f"param.add_(buf, alpha) fp32 {numel}"
    return Op(what, "optimizer", "optimizer", shape, 2 * numel, 12 * numel, call)


def draw_op(key: str, d: Draw, s: Setting, foreach: bool) -> Op:
    """One op of table ``key``, drawn at random and built in setting ``s``."""
    if key in ("conv_fwd", "conv_bwd", "conv_depthwise_fwd", "conv_depthwise_bwd"):
        backward = key.endswith("_bwd")
        shape = conv_shape(d, depthwise="depthwise" in key, backward=backward)
        return conv_op(s, shape, backward, key)
    if key == "gemm":
        return gemm_op(s, gemm_shape(d))
    act = activation_shape(d)
    if key == "elementwise":
        return elementwise_op(s, d.pick(tuple(ELEMENTWISE)), act)
    if key == "reduction":
        return reduction_op(s, act, backward=d.rng.random() < 0.4)
    if key == "normalization":  # a third layer norms: transformers and ConvNeXt have them
        norm = layer_norm_op if d.rng.random() < 1 / 3 else batch_norm_op
        return norm(s, act, backward=d.rng.random() < 0.5)
    if key == "pooling":
        return pool_op(s, act, d.pick((2, 3)), backward=d.rng.random() < 0.5)
    if key == "copy":
        return copy_op(s, act, d.pick(("cast", "layout", "clone")))
    if key == "optimizer":
        total = d.size("params")
        if not foreach:
            return optimizer_op(s, [total], foreach=False)
        count = d.size("n")  # tensors in the list
        sizes = [max(1, round(total * d.rng.uniform(0.2, 1.8) / count)) for _ in range(count)]
        return optimizer_op(s, sizes, foreach=True)
    raise ValueError(f"no microbenchmark for table {key!r}")
