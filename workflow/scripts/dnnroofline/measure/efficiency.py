"""The efficiency sweep of one env: the share of its roofs each op class attains, by size.

Per table key (:data:`dnnroofline.model.op_classes.TABLE_KEYS`) a few ops of the sizes
the studies run (the CPU default study: resnet18, mobilenet_v2 and resnet50 at 128 px,
batch 8-16; a GPU study at 224 px, batch 128-256) are timed as the training step calls
them: GEMMs (classifier shapes, forward and both gradients), convolutions 7x7/2, 3x3 and
1x1 forward and ``aten.convolution_backward`` with the output mask of a training step
(no input gradient for the first layer), depthwise ones, elementwise ops (add, mul, relu,
in place too, relu's backward), reductions (adaptive average pooling, sums), batch norm
in training forward and backward (``aten._batch_norm_impl_index`` and its backward: the
kernels autograd picks, cuDNN's on CUDA), max pooling forward and backward, SGD's
``add_`` with alpha over parameter sizes, and copies (dtype casts, layout changes).

Each op's FLOPs follow :mod:`dnnroofline.model.flop_count`'s rules and its bytes the op
inventory's: every tensor argument read in full, every output written in full. Its
ideal time is ``max(flops / compute roof, bytes / memory roof)`` on the env's measured
roofs (from its ``ceilings.json``), and its efficiency that over its device time: on a
CPU the median seconds per call less the host's dispatch cost per op, on CUDA the
CUDA-event time of back-to-back calls. Timing is the ceilings' timer
(:func:`dnnroofline.measure.ceiling_kernels._time_repeats`: warm-up, repeats sized to
last a few milliseconds, median), inputs rotating between two sets. Dispatch: host
seconds per tiny op in a loop; on CUDA also the device's launch cost, the CUDA-event time
per tiny kernel queued back to back behind a sleeping kernel. A time budget guards the
sweep: rows past it are left out, round-robin over the tables, and noted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.measure.ceiling_kernels import (
    _cudnn_benchmark,
    _matmul_mode,
    _sync,
    _time_repeats,
    conv_flop,
    gemm_flop,
)
from dnnroofline.model.efficiency_tables import SCHEMA_VERSION, table_row
from dnnroofline.model.op_classes import TABLE_KEYS
from dnnroofline.stats import summarize
from dnnroofline.study.precisions import HALF_PRECISIONS, torch_dtype, unsupported_reason

#: Timer settings per device (:func:`_time_repeats`); quick: tests.
TIMING: dict[str, dict] = {
    "cpu": {"warmup": 1, "reps": 5, "min_reps": 3, "time_cap_s": 0.4, "min_repeat_s": 0.004},
    "cuda": {
        "warmup": 2,
        "reps": 5,
        "min_reps": 3,
        "time_cap_s": 1.0,
        "min_warmup_s": 0.02,
        "min_repeat_s": 0.002,
    },
    "quick": {"warmup": 1, "reps": 3, "min_reps": 2, "time_cap_s": 0.05, "min_repeat_s": 0.001},
}
#: The sweep's default time guard per device (the issue's bound on a 2-core CPU host is
#: 60 s an env, ``import torch`` included; a GPU's four precisions take longer).
BUDGET_S = {"cpu": 45.0, "cuda": 180.0}
#: Input sets each op rotates between.
N_SETS = 2
#: Dispatch: tiny ops per timed loop, loops; the sleep (GPU cycles) the launches queue behind.
DISPATCH_CALLS, DISPATCH_LOOPS, SLEEP_CYCLES = 200, 7, 50_000_000


def _conv(n, c, hw, co, k, s=1, input_grad=True, groups=1) -> dict:
    return {"n": n, "c": c, "hw": hw, "co": co, "k": k, "s": s, "input_grad": input_grad,
            "groups": groups}  # fmt: skip


def _dw(n, c, hw, s=1) -> dict:
    return _conv(n, c, hw, c, 3, s, groups=c)


def _each(ops: Iterable[str], shapes: Iterable[tuple]) -> list[dict]:
    """Every op at two of the shapes, in turn (ops x shapes would cost too much time)."""
    ops, shapes = list(ops), list(shapes)
    return [
        {"op": op, "shape": shapes[(j + r) % len(shapes)]}
        for r in range(min(2, len(shapes)))
        for j, op in enumerate(ops)
    ]


#: The sizes swept per device: each table's ops, in the order a budget cut drops them last.
SIZES: dict[str, dict[str, list[dict]]] = {
    "cpu": {  # 128 px, batch 8-16: resnet18, mobilenet_v2, resnet50
        "gemm": [{"m": 8, "k": 512, "n": 1000}, {"m": 16, "k": 2048, "n": 1000},
                 {"m": 1000, "k": 16, "n": 2048}, {"m": 16, "k": 1000, "n": 1280},
                 {"m": 512, "k": 512, "n": 512}],
        "conv": [_conv(8, 3, 128, 64, 7, 2, input_grad=False), _conv(8, 64, 32, 64, 3),
                 _conv(16, 128, 16, 128, 3), _conv(16, 256, 32, 64, 1),
                 _conv(16, 512, 4, 512, 3), _conv(16, 1024, 8, 256, 1)],
        "dw": [_dw(8, 96, 64, 2), _dw(16, 144, 32), _dw(16, 384, 8), _dw(8, 960, 4)],
        "act": [(8, 64, 64, 64), (16, 128, 16, 16), (16, 512, 4, 4), (16, 256, 32, 32)],
        "params": [9408, 36864, 589824, 2048000],
    },
    "cuda": {  # 224 px, batch 128-256: resnet18, resnet50
        "gemm": [{"m": 128, "k": 512, "n": 1000}, {"m": 256, "k": 2048, "n": 1000},
                 {"m": 1000, "k": 256, "n": 2048}, {"m": 256, "k": 1000, "n": 2048},
                 {"m": 4096, "k": 4096, "n": 4096}],
        "conv": [_conv(256, 3, 224, 64, 7, 2, input_grad=False), _conv(256, 64, 56, 64, 3),
                 _conv(128, 128, 28, 128, 3), _conv(256, 256, 56, 64, 1),
                 _conv(256, 512, 7, 512, 3), _conv(256, 1024, 14, 256, 1)],
        "dw": [_dw(256, 96, 112, 2), _dw(256, 144, 56), _dw(256, 384, 14), _dw(256, 960, 7)],
        "act": [(256, 64, 112, 112), (128, 128, 28, 28), (256, 2048, 7, 7), (256, 256, 56, 56)],
        "params": [9408, 589824, 2359296, 2048000],
    },
    "quick": {  # each op well above the dispatch cost, each table two rows at least
        "gemm": [{"m": 8, "k": 256, "n": 500}, {"m": 128, "k": 128, "n": 128}],
        "conv": [_conv(2, 3, 32, 16, 7, 2, input_grad=False), _conv(2, 16, 16, 16, 3)],
        "dw": [_dw(2, 32, 16), _dw(2, 64, 8)],
        "act": [(2, 32, 32, 32), (2, 64, 16, 16)],
        "params": [65536, 131072],
    },
}  # fmt: skip


def sweep_specs(sizes: Mapping[str, list]) -> dict[str, list[tuple[str, dict]]]:
    """Per table key, its ops: ``(op, params)`` pairs."""
    act, params = sizes["act"], sizes["params"]
    return {
        "gemm": [("mm", g) for g in sizes["gemm"]],
        "conv_fwd": [("conv", c) for c in sizes["conv"]],
        "conv_bwd": [("conv_backward", c) for c in sizes["conv"]],
        "conv_depthwise_fwd": [("conv", c) for c in sizes["dw"]],
        "conv_depthwise_bwd": [("conv_backward", c) for c in sizes["dw"]],
        "elementwise": [
            (s["op"], s)
            for s in _each(("add", "relu", "mul", "add_", "relu_", "threshold_backward"), act)
        ],
        "reduction": [(s["op"], s) for s in _each(("adaptive_avg_pool", "sum"), act)],
        "normalization": [(op, {"shape": a}) for a in act for op in ("bn", "bn_backward")],
        "pooling": [(op, {"shape": a}) for a in act[:2] for op in ("maxpool", "maxpool_backward")],
        "optimizer": [("sgd_add_alpha", {"numel": n}) for n in params],
        "copy": [
            (s["op"], s) for s in _each(("to_half", "to_channels_last", "to_contiguous"), act)
        ],
    }


# --------------------------------------------------------------------------- the ops


@dataclass
class Op:
    """One microbenchmark: what it is, its FLOPs and bytes per call, and the call."""

    what: str
    flops: int
    nbytes: int
    call: Callable[[], Any]


class Setting:
    """How one precision's ops are built on the device: dtypes, memory format, inputs."""

    def __init__(self, device: str, precision: str, channels_last: bool):
        import torch

        self.torch = torch
        self.device, self.precision = device, precision
        self.dtype = getattr(torch, torch_dtype(precision))  # activations, GEMMs, convs
        self.half = self.dtype if precision in HALF_PRECISIONS else torch.float16
        self.fmt = torch.channels_last if channels_last else torch.contiguous_format
        self.gen = torch.Generator(device=device).manual_seed(0)

    def rand(self, *shape, dtype=None, fmt=None):
        t = self.torch.randn(*shape, generator=self.gen, device=self.device)
        t = t.to(dtype or self.dtype)
        return t.contiguous(memory_format=fmt or self.fmt) if t.dim() == 4 else t


def _tensor_bytes(values: Iterable) -> int:
    """Bytes of every tensor among ``values`` (one level into tuples and lists)."""
    total = 0
    for v in values:
        for t in v if isinstance(v, (tuple, list)) else (v,):
            if hasattr(t, "element_size") and hasattr(t, "numel"):
                total += t.numel() * t.element_size()
    return total


def _op(what: str, flops: int, fn: Callable, sets: list[tuple]) -> Op:
    """An op over rotating argument sets; its bytes are its tensor arguments and its
    outputs, from one call (an in-place op's target counts read and written)."""
    nbytes = _tensor_bytes(sets[0]) + _tensor_bytes([fn(*sets[0])])
    state = {"i": 0}

    def call():
        args = sets[state["i"] % len(sets)]
        state["i"] += 1
        return fn(*args)

    return Op(what, int(flops), nbytes, call)


def _conv_op(s: Setting, op: str, p: dict) -> Op:
    import torch.nn.functional as F

    n, c, hw, co, k, st, g = (p[x] for x in ("n", "c", "hw", "co", "k", "s", "groups"))
    pad = k // 2
    ho = (hw + 2 * pad - k) // st + 1
    flop = conv_flop(n, c, co, ho, ho, k, k, g)
    kind = "depthwise conv" if g > 1 else "conv"
    what = f"{kind} {k}x{k}/{st} n{n} c{c}->{co} {hw}x{hw}"
    if op == "conv":
        sets = [(s.rand(n, c, hw, hw), s.rand(co, c // g, k, k)) for _ in range(N_SETS)]
        return _op(f"{what} fwd", flop, lambda x, w: F.conv2d(x, w, None, st, pad, 1, g), sets)
    mask = [bool(p["input_grad"]), True, False]
    sets = [
        (s.rand(n, co, ho, ho), s.rand(n, c, hw, hw), s.rand(co, c // g, k, k))
        for _ in range(N_SETS)
    ]
    aten = s.torch.ops.aten

    def backward(gy, x, w):
        out = aten.convolution_backward(gy, x, w, None, [st] * 2, [pad] * 2, [1, 1], False,
                                        [0, 0], g, mask)  # fmt: skip
        return [t for t in out if t is not None]

    grads = "input and weight grads" if mask[0] else "weight grad only"
    return _op(f"{what} bwd ({grads})", flop * (2 if mask[0] else 1), backward, sets)


def _elementwise_op(s: Setting, op: str, p: dict) -> Op:
    torch, shape = s.torch, p["shape"]
    numel = shape[0] * shape[1] * shape[2] * shape[3]
    fns = {
        "add": (torch.add, 2),
        "mul": (torch.mul, 2),
        "add_": (lambda a, b: a.add_(b), 2),
        "relu": (torch.relu, 1),
        "relu_": (torch.relu_, 1),
        "threshold_backward": (lambda gy, y: torch.ops.aten.threshold_backward(gy, y, 0), 2),
    }
    fn, n_args = fns[op]
    sets = [tuple(s.rand(*shape) for _ in range(n_args)) for _ in range(N_SETS)]
    return _op(f"{op} {'x'.join(map(str, shape))}", numel, fn, sets)


def _pool_norm_op(s: Setting, op: str, p: dict) -> Op:
    """Reductions, batch norm and max pooling, forward and backward, as training runs them."""
    torch, aten, shape = s.torch, s.torch.ops.aten, p["shape"]
    n, c, h, w = shape
    numel, label = n * c * h * w, "x".join(map(str, shape))
    sets = [(s.rand(*shape),) for _ in range(N_SETS)]
    if op == "sum":
        return _op(f"sum {label}", numel, torch.sum, sets)
    if op == "adaptive_avg_pool":
        return _op(
            f"adaptive avg pool {label}",
            numel,
            partial(aten._adaptive_avg_pool2d, output_size=[1, 1]),
            sets,
        )
    if op.startswith("maxpool"):
        window = ([3, 3], [2, 2], [1, 1])  # kernel, stride, padding: the ResNet stem's
        pool = partial(
            aten.max_pool2d_with_indices, kernel_size=window[0], stride=window[1], padding=window[2]
        )
        y, idx = pool(sets[0][0])
        if op == "maxpool":
            return _op(f"max pool 3x3/2 {label} fwd", 8 * y.numel(), pool, sets)

        def backward(gy, x, i):
            return aten.max_pool2d_with_indices_backward(gy, x, *window, [1, 1], False, i)

        sets = [(s.rand(*y.shape), x, idx) for (x,) in sets]
        return _op(f"max pool 3x3/2 {label} bwd", y.numel(), backward, sets)
    return _batch_norm_op(s, op, shape, label)


def _batch_norm_op(s: Setting, op: str, shape: tuple, label: str) -> Op:
    """Batch norm in training, forward or backward, through the index-dispatching aten
    ops that pick the kernels autograd runs (cuDNN's on CUDA, native elsewhere)."""
    torch, aten = s.torch, s.torch.ops.aten
    numel = shape[0] * shape[1] * shape[2] * shape[3]
    cudnn = bool(torch.backends.cudnn.enabled)

    def stats():  # weight, bias, running mean and var in fp32, as autocast keeps them
        return [s.rand(shape[1], dtype=torch.float32).abs() + 0.5 for _ in range(4)]

    def forward(x, wt, b, rm, rv):
        return aten._batch_norm_impl_index(x, wt, b, rm, rv, True, 0.1, 1e-5, cudnn)

    sets = [(s.rand(*shape), *stats()) for _ in range(N_SETS)]
    if op == "bn":
        return _op(f"batch norm {label} train fwd", 5 * numel, lambda *a: forward(*a)[:4], sets)
    bwd_sets = []
    for x, wt, b, rm, rv in sets:
        _, mean, invstd, reserve, impl = forward(x, wt, b, rm, rv)
        bwd_sets.append((s.rand(*shape), x, wt, rm, rv, mean, invstd, reserve))

    def backward(gy, x, wt, rm, rv, mean, invstd, reserve):
        return aten._batch_norm_impl_index_backward(
            impl, x, gy, wt, rm, rv, mean, invstd, True, 1e-5, [True, True, True], reserve
        )

    return _op(f"batch norm {label} train bwd", 9 * numel, backward, bwd_sets)


def _memory_op(s: Setting, op: str, p: dict) -> Op:
    """SGD's update and the copies: casts and layout changes."""
    torch = s.torch
    if op == "sgd_add_alpha":
        n = p["numel"]
        sets = [tuple(s.rand(n, dtype=torch.float32) for _ in "wg") for _ in range(N_SETS)]
        what = f"param.add_(grad, alpha) fp32 {n}"
        return _op(what, 2 * n, lambda w, g: w.add_(g, alpha=-0.1), sets)
    shape = p["shape"]
    label = "x".join(map(str, shape))
    if op == "to_half":
        sets = [(s.rand(*shape, dtype=torch.float32),) for _ in range(N_SETS)]
        half = str(s.half).replace("torch.", "")
        return _op(f"cast float32->{half} {label}", 0, lambda x: x.to(s.half), sets)
    to_cl = op == "to_channels_last"
    src = torch.contiguous_format if to_cl else torch.channels_last
    dst = torch.channels_last if to_cl else torch.contiguous_format
    sets = [(s.rand(*shape, fmt=src),) for _ in range(N_SETS)]
    name = "contiguous->channels_last" if to_cl else "channels_last->contiguous"
    return _op(f"copy {name} {label}", 0, lambda x: x.contiguous(memory_format=dst), sets)


def build_op(s: Setting, op: str, params: dict) -> Op:
    """The microbenchmark ``op`` with ``params`` in setting ``s``."""
    if op == "mm":
        m, k, n = params["m"], params["k"], params["n"]
        sets = [(s.rand(m, k), s.rand(k, n)) for _ in range(N_SETS)]
        return _op(f"gemm {m}x{n}x{k} (MxNxK)", gemm_flop(m, n, k), s.torch.mm, sets)
    if op in ("conv", "conv_backward"):
        return _conv_op(s, op, params)
    if op in ("add", "mul", "add_", "relu", "relu_", "threshold_backward"):
        return _elementwise_op(s, op, params)
    if op in ("sgd_add_alpha", "to_half", "to_channels_last", "to_contiguous"):
        return _memory_op(s, op, params)
    return _pool_norm_op(s, op, params)


# --------------------------------------------------------------------------- dispatch


def measure_dispatch(device: str) -> dict:
    """Host seconds per tiny op (``torch.add`` of one-element tensors in a loop, median
    of loops); on CUDA also the launch cost: CUDA-event seconds per tiny kernel queued
    back to back behind a sleeping kernel, so the device, not the host, sets their pace."""
    import torch

    a, b = torch.ones(1, device=device), torch.ones(1, device=device)

    def loop():
        for _ in range(DISPATCH_CALLS):
            torch.add(a, b)

    loop()
    _sync(device)
    host = []
    for _ in range(DISPATCH_LOOPS):
        t0 = time.perf_counter()
        loop()
        host.append((time.perf_counter() - t0) / DISPATCH_CALLS)
        _sync(device)
    method = (
        f"host: median over {DISPATCH_LOOPS} loops of {DISPATCH_CALLS} torch.add calls on "
        "one-element tensors, time.perf_counter"
    )
    out = {"host_s_per_op": summarize(host)["median"], "launch_s_per_op": None}
    if device == "cuda":
        launch, behind = [], []
        for _ in range(DISPATCH_LOOPS):
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            torch.cuda._sleep(SLEEP_CYCLES)
            start.record()
            loop()
            end.record()
            behind.append(not start.query())  # still sleeping: the kernels were queued
            end.synchronize()
            launch.append(start.elapsed_time(end) / 1e3 / DISPATCH_CALLS)
        out["launch_s_per_op"] = summarize(launch)["median"]
        method += (
            f"; launch: CUDA-event time of {DISPATCH_CALLS} such kernels queued behind "
            f"torch.cuda._sleep({SLEEP_CYCLES}), median of {DISPATCH_LOOPS}"
        )
        if not all(behind):
            method += " (the host outran the sleep in some loops: an upper bound)"
    return {**out, "method": method}


# --------------------------------------------------------------------------- the sweep


def _time_op(device: str, op: Op, timing: Mapping) -> float:
    times, _ = _time_repeats(device, op.call, **timing)
    return summarize(times)["median"]


def _plan(precisions: list[str], specs: Mapping[str, list]) -> list[tuple[str, str, str, dict]]:
    """Every row to time, round-robin over sizes, precisions and tables, so that a
    budget cut leaves every table its first sizes."""
    depth = max(len(v) for v in specs.values())
    return [
        (p, key, *specs[key][i])
        for i in range(depth)
        for p in precisions
        for key in TABLE_KEYS
        if i < len(specs[key])
    ]


def _supported(device: str, precisions: Iterable[str], cuda_cc, cpu_flags) -> tuple[list, list]:
    ok, skipped = [], []
    for p in dict.fromkeys(precisions):
        why = unsupported_reason(device, p, cuda_cc=cuda_cc, cpu_flags=cpu_flags)
        if why:
            skipped.append({"precision": p, "reason": f"{device}: {why}"})
        else:
            ok.append(p)
    return ok, skipped


def run_sweep(
    device: str,
    precisions: Iterable[str],
    threads: int,
    roofs: Mapping,
    budget_s: float,
    *,
    quick: bool = False,
    channels_last: bool = False,
    cpu_flags: Iterable[str] | None = None,
    cuda_cc: tuple[int, int] | None = None,
    roofs_from: str = "the ceilings",
    started: float | None = None,
) -> dict:
    """Time the sweep on ``device`` (cpu or cuda) and return the efficiency document
    (without ``env``, ``device_name``: the caller's). ``roofs``: ``{"compute":
    {precision: FLOP/s}, "memory": B/s}``, the env's measured roofs (``roofs_from`` names
    where they came from in errors). Precisions the device does not run are skipped with
    the reason; a supported one without a compute roof is refused. The budget and
    ``wall_s`` count from ``started`` (``time.monotonic()``; default: now)."""
    t0 = time.monotonic() if started is None else started
    import torch

    torch.set_num_threads(int(threads))
    run, skipped = _supported(device, precisions, cuda_cc, cpu_flags)
    for p in run:
        if p not in roofs["compute"]:
            raise InputError(f"{roofs_from}: no compute roof for precision {p!r} to sweep")
    timing = TIMING["quick" if quick else device]
    specs = sweep_specs(SIZES["quick" if quick else device])
    settings = {p: Setting(device, p, channels_last) for p in run}
    dispatch = measure_dispatch(device)
    host = dispatch["host_s_per_op"] if device != "cuda" else 0.0
    tables: dict[str, dict[str, list]] = {p: {} for p in run}
    left_out: dict[str, int] = {}
    notes: list[str] = []
    for p, key, op, params in _plan(run, specs):
        if time.monotonic() - t0 > budget_s:
            left_out[key] = left_out.get(key, 0) + 1
            continue
        try:
            with _matmul_mode(device, p), _cudnn_benchmark(device), torch.no_grad():
                bench = build_op(settings[p], op, params)
                seconds = _time_op(device, bench, timing)
        except (RuntimeError, NotImplementedError) as exc:  # one op, not the sweep (OOM too)
            notes.append(f"{p} {key} {op} {params}: failed, left out: {exc}")
            continue
        device_s = seconds - host
        if device_s < host:  # the difference of two near times: noise, not a rate
            notes.append(
                f"{p} {bench.what}: {seconds:.3g} s a call, under twice the dispatch cost "
                f"({host:.3g} s): left out"
            )
            continue
        row = table_row(
            bench.flops, bench.nbytes, device_s, roofs["compute"][p], roofs["memory"], bench.what
        )
        tables[p].setdefault(key, []).append(row)
        del bench
    if left_out:
        notes.append(
            f"time budget {budget_s:g} s spent: left out {sum(left_out.values())} rows "
            f"({', '.join(f'{k} {n}' for k, n in left_out.items())})"
        )
    if quick:
        notes.append("QUICK mode: tiny sizes for tests; not the env's efficiencies")
    return {
        "schema_version": SCHEMA_VERSION,
        "device": device,
        "threads": int(threads),
        "source": "sweep",
        "method": _method(device, timing, channels_last),
        "roofs": {"compute": {p: roofs["compute"][p] for p in run}, "memory": roofs["memory"]},
        "dispatch": dispatch,
        "tables": {
            p: {k: sorted(v, key=lambda r: r["ideal_s"]) for k, v in t.items()}
            for p, t in tables.items()
        },
        "skipped": skipped,
        "channels_last": channels_last,
        "quick": quick,
        "budget_s": budget_s,
        "torch": torch.__version__,
        "wall_s": round(time.monotonic() - t0, 3),
        "notes": notes,
    }


def _method(device: str, timing: Mapping, channels_last: bool) -> str:
    timer = "CUDA events over back-to-back calls" if device == "cuda" else "time.perf_counter"
    less = "" if device == "cuda" else ", less the host's dispatch cost per op"
    fmt = "channels_last" if channels_last else "contiguous (NCHW)"
    return (
        f"per op: median of {timing['min_reps']}-{timing['reps']} repeats after warm-up, each "
        f"repeat at least {timing['min_repeat_s'] * 1e3:g} ms of calls, {timer}{less}; inputs "
        f"rotate between {N_SETS} sets; activations {fmt}; FLOPs by flop_count's rules, "
        "bytes = tensor arguments read + outputs written in full; ideal_s = max(flops / "
        "compute roof, bytes / memory roof) on the env's measured roofs; efficiency = "
        "ideal_s / seconds"
    )


def sweep_env(
    env: str,
    device: str,
    precisions: Iterable[str],
    ceilings: Mapping,
    *,
    where: str = "ceilings.json",
    budget_s: float | None = None,
    quick: bool = False,
    channels_last: bool = False,
    expect_threads: int | None = None,
) -> dict:
    """The efficiency document of env ``env`` on this machine: the sweep on its device
    and threads (OMP_NUM_THREADS, checked against ``expect_threads``), as shares of the
    measured roofs of its ceilings file ``ceilings`` (read from ``where``), within
    ``budget_s`` (None: :data:`BUDGET_S` of the device). The budget and ``wall_s``
    count from here, ``import torch`` included; other processes busy meanwhile are
    noted, as the ceilings note them."""
    t0 = time.monotonic()
    import os

    from dnnroofline.measure import contention

    cpu0 = contention.snapshot()
    import torch

    from dnnroofline.measure.ceilings import _device_facts, contended_note
    from dnnroofline.measure.envinfo import cpu_info, resolve_device
    from dnnroofline.measure.train_config import check_threads, parse_omp_threads
    from dnnroofline.model.efficiency_tables import roofs_from_ceilings

    dev = resolve_device(device)
    if dev not in ("cpu", "cuda"):
        raise InputError(f"--device {dev}: the efficiency sweep runs on cpu or cuda")
    if ceilings.get("device") != dev:
        raise InputError(f"{where}: roofs of device {ceilings.get('device')!r}, sweep on {dev!r}")
    if ceilings.get("env") not in (None, env):
        raise InputError(f"{where}: roofs of env {ceilings.get('env')!r}, not of {env!r}")
    omp = os.environ.get("OMP_NUM_THREADS")
    threads = parse_omp_threads(omp) or torch.get_num_threads()
    check_threads(expect_threads, threads, omp)
    roofs, notes = roofs_from_ceilings(ceilings, None, where)
    cpu = cpu_info()
    facts = _device_facts(dev)
    doc = run_sweep(
        dev,
        precisions,
        threads,
        roofs,
        BUDGET_S[dev] if budget_s is None else budget_s,
        quick=quick,
        channels_last=channels_last,
        cpu_flags=cpu["flags_all"],
        cuda_cc=facts["cc"],
        roofs_from=where,
        started=t0,  # the budget holds the whole stage, import torch included
    )
    name = facts["name"] if dev == "cuda" else cpu["model"]
    other_load = contention.other_load(cpu0, contention.snapshot())
    taken = contention.contended_cpus(other_load)
    if taken is not None:
        effect = "efficiencies may be low and noisy (time sliced with other work)"
        notes.append(contended_note(taken, cpu["cores_logical"], "efficiency", effect))
    return {
        "env": env,
        "device_name": name,
        **doc,
        "notes": notes + doc["notes"],
        "other_load": other_load,
    }
