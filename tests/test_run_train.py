"""The timed training driver: run_train.py end to end, and dnnroofline.measure.train's pure pieces.

CPU runs use a tiny model (resnet18 at 32x32, batch 2) with OMP_NUM_THREADS=1.
CUDA-only branches are marked ``cuda`` and skip without a GPU.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cpu_flags import has_bf16
from fake_clock import FakeClock

from dnnroofline.errors import InputError
from dnnroofline.measure import train, train_config
from dnnroofline.study.models import torchvision_classifiers
from dnnroofline.study.precisions import DEVICES, supported

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "run_train.py"
TINY = ["--arch", "resnet18", "--batch-size", "2", "--image-size", "32"]
SHORT = ["--warmup-iters", "1", "--iters", "3"]
RUN_KEYS = {
    "schema_version", "status", "message", "run_id", "env", "config", "start_time",
    "end_time", "step_time_s", "data_wait_s", "compute_s", "images_per_s", "wall_s",
    "user_s", "sys_s", "max_rss_bytes", "peak_device_memory_bytes", "device_name",
}  # fmt: skip
CONFIG_KEYS = {
    "arch", "batch_size", "image_size", "warmup_iters", "iters", "precision", "backend",
    "device", "channels_last", "compile", "cudnn_benchmark", "data", "workers",
    "pin_memory", "threads", "optimizer",
}  # fmt: skip
TIMING_KEYS = ("step_time_s", "data_wait_s", "compute_s", "images_per_s")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")


def run_cli(tmp_path, *args, threads="1", preexec_fn=None, name="run.json"):
    out = tmp_path / name
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=preexec_fn,
        timeout=300,
    )
    record = json.loads(out.read_text()) if out.exists() else None
    return proc, record


def assert_ok_timings(rec, iters, batch):
    assert rec["status"] == "ok", rec["message"]
    assert rec["message"] is None
    step = rec["step_time_s"]
    assert len(step["all"]) == iters
    assert step["p5"] <= step["median"] <= step["p95"]
    assert step["min"] > 0
    assert rec["images_per_s"] == pytest.approx(batch / step["median"], rel=1e-12)
    assert len(rec["data_wait_s"]["all"]) == iters
    # Step = data wait + compute, every step.
    total = rec["data_wait_s"]["total"] + rec["compute_s"]["total"]
    assert total == pytest.approx(sum(step["all"]), rel=1e-9)
    assert rec["start_time"] < rec["end_time"]
    assert rec["wall_s"] >= sum(step["all"])


# --------------------------------------------------------------------------- CLI, CPU


def test_cli_synthetic_run_follows_contract(tmp_path):
    proc, rec = run_cli(
        tmp_path, *TINY, *SHORT, "--backend", "cpu", "--synthetic", "--env", "local",
        "--run-id", "local_resnet18_fp32_bs2_run1", "--expect-threads", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert rec.keys() >= RUN_KEYS
    assert rec["config"].keys() >= CONFIG_KEYS
    assert_ok_timings(rec, iters=3, batch=2)
    assert rec["threads"] == 1 and rec["config"]["threads"] == 1
    assert rec["config"]["backend"] == "cpu" and rec["config"]["data"] == "synthetic"
    assert rec["config"]["optimizer"] == {
        "name": "SGD", "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4,
    }  # fmt: skip
    assert (rec["env"], rec["run_id"]) == ("local", "local_resnet18_fp32_bs2_run1")
    assert rec["timer"] == "perf_counter"
    assert rec["numerics"]["autocast_dtype"] is None
    assert rec["numerics"]["cuda_matmul_allow_tf32"] is False
    assert rec["numerics"]["seed"] == train.SEED
    assert rec["timed_region"]["page_bytes"] == resource.getpagesize()
    assert isinstance(rec["timed_region"]["minor_faults"], int)
    load = rec["timed_region"]["other_load"]  # other processes' CPUs while it was timed
    assert set(load) == {"other_processes_cpus", "steal_cpus", "wall_s"}
    assert load["other_processes_cpus"] >= 0 and load["wall_s"] > 0
    assert rec["peak_device_memory_bytes"] is None
    assert rec["max_rss_bytes"] > 100e6  # a torch process; ru_maxrss KiB scaled to bytes
    assert_the_check_leaves_the_runtime_out(rec)
    assert rec["user_s"] > 0
    assert rec["device_name"]
    # Synthetic data lives on the device: no loader, the wait is only the clock reads.
    assert rec["data_wait_s"]["median"] < 1e-3
    # Progress went to stderr; nothing but the JSON file was left in the folder.
    assert "warm-up" in proc.stderr and "images/s" in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def assert_the_check_leaves_the_runtime_out(rec):
    """The RSS before the model was built is the runtime (torch imported: 100s of MB),
    under the peak; the check's measured peak on a CPU is the rest (issue 36, point 7)."""
    from dnnroofline.aggregate.check import RSS_ABOVE_RUNTIME, measured_points
    from dnnroofline.aggregate.metrics import metrics_frame

    before = rec["rss_before_model_bytes"]
    assert 100e6 < before < rec["max_rss_bytes"]
    runs = metrics_frame([rec])
    assert int(runs["rss_before_model_bytes"].iloc[0]) == before
    (point,) = measured_points(runs).values()
    assert point["peak_memory"] == rec["max_rss_bytes"] - before
    assert point["peak_memory_source"] == RSS_ABOVE_RUNTIME and not point["peak_memory_note"]


def test_bf16_on_cpu_runs_where_the_cpu_has_it_and_is_refused_where_not(
    tmp_path, capsys, monkeypatch, cpu_flags
):
    """Through the driver's flag detection (DNNROOFLINE_CPU_FLAGS), under each set of
    flags, whatever this host has. In-process: the driver sets torch's threads."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "run.json"
    threads = torch.get_num_threads()
    try:
        argv = [*TINY, *SHORT, "--backend", "cpu", "--precision", "bf16"]
        rc = train.main([*argv, "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    if not has_bf16(cpu_flags):
        assert rc == 2
        err = capsys.readouterr().err
        assert "--precision 'bf16' is not supported on backend 'cpu' here" in err
        assert "needs AVX512_BF16 or AMX" in err and not out.exists()
        return
    assert rc == 0
    rec = json.loads(out.read_text())
    assert_ok_timings(rec, iters=3, batch=2)
    assert rec["config"]["precision"] == "bf16"
    assert rec["numerics"]["autocast_dtype"] == "bfloat16"
    assert rec["numerics"]["grad_scaler"] is False


@pytest.mark.parametrize("precision", ["amp", "tf32"])
def test_precision_unsupported_on_cpu_is_refused(tmp_path, capsys, precision):
    out = tmp_path / "run.json"
    argv = [*TINY, "--backend", "cpu", "--precision", precision, "--out", str(out)]
    assert train.main(argv) == 2
    err = capsys.readouterr().err
    assert f"--precision '{precision}'" in err and "backend 'cpu'" in err
    assert not out.exists()


def test_cli_amp_on_cpu_exits_2(tmp_path):
    proc, rec = run_cli(tmp_path, *TINY, "--backend", "cpu", "--precision", "amp")
    assert proc.returncode == 2
    assert "amp" in proc.stderr and "cpu" in proc.stderr
    assert rec is None


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("imagenet")
    gen = torch.Generator().manual_seed(0)
    for cls, ext in (("cat", "jpg"), ("dog", "png")):
        (root / "train" / cls).mkdir(parents=True)
        for i in range(4):
            pixels = torch.randint(0, 256, (40, 48, 3), dtype=torch.uint8, generator=gen)
            Image.fromarray(pixels.numpy()).save(root / "train" / cls / f"{i}.{ext}")
    return root


@pytest.mark.parametrize("workers", [0, 1])
def test_cli_image_folder_records_data_wait(tmp_path, image_folder, workers):
    # 8 images in batches of 2: 4 batches per epoch, so 7 steps cycle the loader.
    proc, rec = run_cli(
        tmp_path, *TINY, "--warmup-iters", "1", "--iters", "6", "--backend", "cpu",
        "--data", str(image_folder), "--workers", str(workers), "--channels-last",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert_ok_timings(rec, iters=6, batch=2)
    assert rec["config"]["data"] == str(image_folder)
    assert rec["config"]["workers"] == workers
    assert rec["config"]["channels_last"] is True
    assert rec["dataset_images"] == 8
    # Decoding, cropping and collating 2 images takes far more than the clock reads.
    assert rec["data_wait_s"]["median"] > 5e-5
    assert all(w > 0 for w in rec["data_wait_s"]["all"])


def test_every_run_starts_from_the_same_weights_and_batch():
    cfg = train_config.TrainConfig(
        arch="resnet18", batch_size=2, image_size=32, backend="cpu", num_classes=10
    )
    resolved = train_config.validate(cfg, environ={"OMP_NUM_THREADS": "1"})
    first, second = train.build(resolved), train.build(resolved)
    assert torch.equal(first.model.conv1.weight, second.model.conv1.weight)
    for a, b in zip(first.next_batch(), second.next_batch(), strict=True):
        assert torch.equal(a, b)


def test_the_data_loader_workers_cpu_time_is_in_the_record(tmp_path):
    # Workers are processes of their own: RUSAGE_SELF misses them. Large JPEGs make
    # their decoding outweigh the little this test does around the run.
    import resource

    from PIL import Image

    root = tmp_path / "big"
    (root / "train" / "a").mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)
    for i in range(6):
        pixels = torch.randint(0, 256, (1024, 1024, 3), dtype=torch.uint8, generator=gen)
        Image.fromarray(pixels.numpy()).save(root / "train" / "a" / f"{i}.jpg")
    cfg = train_config.TrainConfig(
        arch="resnet18", batch_size=2, image_size=32, warmup_iters=1, iters=8,
        backend="cpu", data=str(root), workers=2, num_classes=10,
    )  # fmt: skip
    resolved = train_config.validate(cfg, environ={"OMP_NUM_THREADS": "1"})

    def cpu(who):
        ru = resource.getrusage(who)
        return ru.ru_utime + ru.ru_stime

    self0, children0 = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    rec = train.run(resolved, progress=None)
    self_cpu = cpu(resource.RUSAGE_SELF) - self0
    workers_cpu = cpu(resource.RUSAGE_CHILDREN) - children0
    assert rec["status"] == "ok", rec.get("message")
    assert workers_cpu > 0.2  # the workers decoded (and have exited: the loader is gone)
    # the run's own CPU time is at most this test's; the workers' comes on top
    assert rec["user_s"] + rec["sys_s"] > self_cpu + workers_cpu / 2


def test_cli_model_that_rejects_the_image_size_records_error(tmp_path):
    args = ["--arch", "inception_v3", "--batch-size", "2", "--image-size", "32", *SHORT]
    proc, rec = run_cli(tmp_path, *args, "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert rec["status"] == "error"
    assert rec["message"].startswith("RuntimeError: ")
    assert "size" in rec["message"]
    for key in TIMING_KEYS:
        assert rec[key] is None
    assert rec["config"]["arch"] == "inception_v3"
    assert rec["start_time"] < rec["end_time"]


def _vm_peak_after_import() -> int:
    code = (
        "import torch, torchvision\n"
        "for line in open('/proc/self/status'):\n"
        "    if line.startswith('VmPeak:'): print(int(line.split()[1]) * 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux")
def test_cli_real_oom_under_address_space_limit(tmp_path):
    import resource

    # Address space for the interpreter and torch, plus 0.75 GiB. The model (47 MB) and
    # the batch (154 MB of images) fit; the first conv's output (822 MB) cannot.
    limit = _vm_peak_after_import() + int(0.75 * 2**30)

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    args = ["--arch", "resnet18", "--batch-size", "256", "--image-size", "224"]
    proc, rec = run_cli(
        tmp_path, *args, "--warmup-iters", "1", "--iters", "1", "--backend", "cpu",
        preexec_fn=limit_memory,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert rec["status"] == "oom", rec["message"]
    assert "allocate" in rec["message"]
    for key in TIMING_KEYS:
        assert rec[key] is None


def test_cli_thread_mismatch_is_refused(tmp_path):
    proc, rec = run_cli(tmp_path, *TINY, "--backend", "cpu", "--expect-threads", "2", threads="1")
    assert proc.returncode == 2
    assert "env declares 2 threads but this job got 1 (OMP_NUM_THREADS=1)" in proc.stderr
    assert "--cores >= 2" in proc.stderr
    assert rec is None


def test_cli_unknown_arch_suggests_close_names(tmp_path):
    proc, rec = run_cli(tmp_path, "--arch", "resnet5", "--batch-size", "2")
    assert proc.returncode == 2
    assert "--arch 'resnet5'" in proc.stderr and "resnet50" in proc.stderr
    assert rec is None


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--batch-size", "0"], "--batch-size 0"),
        (["--batch-size", "-3"], "--batch-size -3"),
        (["--batch-size", "2", "--iters", "0"], "--iters 0"),
        (["--batch-size", "2", "--warmup-iters", "0"], "--warmup-iters 0: the first step"),
        (
            ["--batch-size", "2", "--model-kwargs", '{"width_mult": 0.5}'],
            '--model-kwargs {"width_mult": 0.5}: only for --model-factory',
        ),
        (
            ["--batch-size", "2", "--warmup-iters", "1", "--compile", "reduce-overhead"],
            "--warmup-iters 1: compile mode 'reduce-overhead' compiles on the first step and "
            "records its CUDA graphs on the second",
        ),
        (["--batch-size", "2", "--data", "/no/such/dir"], "--data '/no/such/dir'"),
        (["--batch-size", "2", "--precision", "fp8"], "--precision 'fp8'"),
        (["--batch-size", "2", "--backend", "tpu"], "--backend 'tpu'"),
    ],
)
def test_bad_arguments_exit_2_and_write_nothing(tmp_path, capsys, args, expected):
    out = tmp_path / "run.json"
    assert train.main(["--arch", "resnet18", *args, "--out", str(out)]) == 2
    assert expected in capsys.readouterr().err
    assert not out.exists()


def test_data_dir_without_train_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "run.json"
    argv = [*TINY, "--backend", "cpu", "--data", str(tmp_path), "--out", str(out)]
    assert train.main(argv) == 2
    assert "train/" in capsys.readouterr().err
    assert not out.exists()


# --------------------------------------------------------------------------- pure pieces


@pytest.mark.parametrize(
    ("precision", "backend", "autocast", "scaler", "tf32", "matmul"),
    [
        ("fp32", "cpu", None, False, False, "highest"),
        ("bf16", "cpu", "bfloat16", False, False, "highest"),
        ("fp32", "cuda", None, False, False, "highest"),
        ("tf32", "cuda", None, False, True, "high"),
        ("amp", "cuda", "float16", True, False, "highest"),
        ("bf16", "cuda", "bfloat16", False, False, "highest"),
        ("fp32", "mps", None, False, False, "highest"),
    ],
)
def test_precision_settings(precision, backend, autocast, scaler, tf32, matmul):
    s = train_config.precision_settings(precision, backend)
    assert (s.autocast_dtype, s.grad_scaler, s.allow_tf32, s.matmul_precision) == (
        autocast, scaler, tf32, matmul,
    )  # fmt: skip
    assert precision in supported(backend)


@pytest.mark.parametrize(
    ("precision", "backend"),
    [("tf32", "cpu"), ("amp", "cpu"), ("tf32", "mps"), ("amp", "mps"), ("bf16", "mps")],
)
def test_unsupported_precision_names_precision_and_backend(precision, backend):
    assert precision not in supported(backend)
    with pytest.raises(InputError, match=f"'{precision}'.*backend '{backend}'"):
        train_config.precision_settings(precision, backend)


def test_every_backend_trains_in_fp32():
    assert set(DEVICES) == set(train_config.BACKENDS)
    for backend in train_config.BACKENDS:
        assert "fp32" in supported(backend), backend


@pytest.fixture
def restore_numerics():
    saved = (
        torch.get_float32_matmul_precision(),
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cuda.matmul.allow_tf32 = saved[1]
    torch.backends.cudnn.allow_tf32 = saved[2]


def test_apply_precision_sets_and_clears_tf32(restore_numerics):
    on = train_config.apply_precision(train_config.precision_settings("tf32", "cuda"))
    assert on["cuda_matmul_allow_tf32"] and on["cudnn_allow_tf32"]
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    off = train_config.apply_precision(train_config.precision_settings("fp32", "cuda"))
    assert not off["cuda_matmul_allow_tf32"] and not off["cudnn_allow_tf32"]
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert torch.get_float32_matmul_precision() == "highest"


def test_autocast_factory():
    assert train_config.autocast_factory(train_config.precision_settings("fp32", "cpu")) is None
    factory = train_config.autocast_factory(train_config.precision_settings("bf16", "cpu"))
    with factory():
        y = torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert y.dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize(
    ("requested", "cuda_ok", "mps_ok", "expected"),
    [
        ("auto", True, True, "cuda"),
        ("auto", False, True, "mps"),
        ("auto", False, False, "cpu"),
        ("cpu", True, True, "cpu"),
        ("cuda", True, False, "cuda"),
        ("mps", False, True, "mps"),
    ],
)
def test_resolve_backend(requested, cuda_ok, mps_ok, expected):
    got = train_config.resolve_backend(requested, cuda_available=cuda_ok, mps_available=mps_ok)
    assert got == expected


@pytest.mark.parametrize("requested", ["cuda", "mps"])
def test_resolve_backend_refuses_missing_device(requested):
    with pytest.raises(InputError, match=f"--backend '{requested}'"):
        train_config.resolve_backend(requested, cuda_available=False, mps_available=False)


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom"),
        (RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"), "oom"),
        (
            RuntimeError(
                "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
                "memory: you tried to allocate 3288334336 bytes. Error code 12"
            ),
            "oom",
        ),
        (RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"), "oom"),
        (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"), "oom"),
        (MemoryError(), "oom"),
        (RuntimeError("Kernel size can't be greater than actual input size"), "error"),
        (ValueError("out of memory"), "error"),  # not an allocator error type
        (KeyError("x"), "error"),
    ],
)
def test_failure_classification(exc, status):
    got_status, message = train_config.failure_status(exc)
    assert got_status == status
    assert message.startswith(f"{type(exc).__name__}")
    assert train_config.is_oom(exc) == (status == "oom")


def test_failure_message_is_type_colon_message():
    assert train_config.failure_status(RuntimeError("boom")) == ("error", "RuntimeError: boom")


def test_check_arch_names_the_close_torchvision_models():
    names = torchvision_classifiers()
    assert "resnet50" in names and "mobilenet_v2" in names
    with pytest.raises(InputError, match=r"'resnet5': not a torchvision .*did you mean resnet50"):
        train_config.check_arch("resnet5", names)
    with pytest.raises(InputError, match="did you mean mobilenet_v2"):
        train_config.check_arch("mobilenetv2")  # the kept list of this install
    with pytest.raises(InputError, match=r"'zzzzzz': not a torchvision classification model \("):
        train_config.check_arch("zzzzzz", names)
    train_config.check_arch("resnet18", names)


@pytest.mark.parametrize(
    ("value", "expected"), [(None, None), ("", None), ("4", 4), (" 2 ", 2), ("3,1", 3)]
)
def test_parse_omp_threads(value, expected):
    assert train_config.parse_omp_threads(value) == expected


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_parse_omp_threads_rejects_garbage(value):
    with pytest.raises(InputError, match="OMP_NUM_THREADS"):
        train_config.parse_omp_threads(value)


def test_check_threads():
    train_config.check_threads(None, 7, None)
    train_config.check_threads(2, 2, "2")
    with pytest.raises(InputError, match=r"declares 4 threads but this job got 1 \(OMP_NUM"):
        train_config.check_threads(4, 1, "1")
    with pytest.raises(InputError, match="OMP_NUM_THREADS unset"):
        train_config.check_threads(4, 1, None)


# --------------------------------------------------------------------------- the loop


def _resolved(**overrides):
    cfg = train_config.TrainConfig(arch="resnet18", batch_size=2, image_size=32, backend="cpu")
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return train_config.Resolved(
        cfg=cfg,
        backend="cpu",
        device="cpu",
        threads=torch.get_num_threads(),
        settings=train_config.precision_settings(cfg.precision, "cpu"),
    )


def test_timed_loop_splits_data_wait_from_compute(monkeypatch):
    """On a clock that only the batches and the steps move: each split exactly."""
    clock, batch_s, step_s = FakeClock(), 2.0**-8, 2.0**-7  # about 4 and 8 ms, exact
    monkeypatch.setattr(train, "time", clock.module())
    calls = {"batch": 0, "step": 0}

    def next_batch():
        calls["batch"] += 1
        clock.advance(batch_s)
        return None, None

    def step(_x, _y):
        calls["step"] += 1
        clock.advance(step_s)

    setup = train.Setup(
        resolved=_resolved(), model=None, optimizer=None, step=step,
        next_batch=next_batch, numerics={},
    )  # fmt: skip
    times = train.timed_loop(setup, warmup_iters=2, iters=5)
    assert calls == {"batch": 7, "step": 7}
    assert times.data_wait_s == [batch_s] * 5
    assert times.compute_s == [step_s] * 5
    assert times.step_s == [batch_s + step_s] * 5
    assert times.timed_wall_s == 5 * (batch_s + step_s)
    assert times.warmup_s == 2 * (batch_s + step_s)
    assert times.first_step_s == batch_s + step_s
    assert times.timer == "perf_counter"


@pytest.mark.parametrize("fresh", [True, False])
def test_timed_loop_counts_the_pages_its_steps_fault_in(fresh):
    """A step that writes 64 MiB new from the OS (above glibc's largest mmap threshold,
    32 MiB: mapped afresh on every allocation) faults in all of it every step; one that
    writes into a tensor it keeps faults in next to nothing."""
    size = 64 * 2**20
    kept = torch.empty(size // 4)
    kept.fill_(0.0)  # its pages are in before the warm-up

    def step(_x, _y):
        (torch.empty(size // 4) if fresh else kept).fill_(1.0)

    setup = train.Setup(
        resolved=_resolved(), model=None, optimizer=None, step=step,
        next_batch=lambda: (None, None), numerics={},
    )  # fmt: skip
    times = train.timed_loop(setup, warmup_iters=1, iters=4)
    faulted = times.timed_minor_faults * resource.getpagesize()
    if fresh:
        assert faulted >= 4 * size * 0.9
    else:
        assert faulted < size / 8


def test_make_step_trains_and_clears_grads():
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    before = model.weight.detach().clone()
    step = train.make_step(model, train._loss_fn(torch.nn.CrossEntropyLoss()), opt, None)
    step(torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1]))
    assert not torch.equal(before, model.weight)
    assert model.weight.grad is None  # zero_grad(set_to_none=True)


def test_loss_handles_aux_logit_outputs():
    loss = train._loss_fn(torch.nn.CrossEntropyLoss(reduction="sum"))
    logits, aux = torch.randn(2, 3), torch.randn(2, 3)
    y = torch.tensor([0, 2])
    ce = torch.nn.CrossEntropyLoss(reduction="sum")
    expected = ce(logits, y) + 0.4 * ce(aux, y)
    assert torch.allclose(loss((logits, aux, None), y), expected)
    assert torch.allclose(loss(logits, y), ce(logits, y))


def test_run_profile_step_on_cpu_times_one_step(monkeypatch):
    def forbidden():
        raise AssertionError("cudaProfilerStart must not be called off CUDA")

    monkeypatch.setattr(torch.cuda.profiler, "start", forbidden)
    rec = train.run(_resolved(profile_step=True, warmup_iters=1, iters=5), progress=None)
    assert rec["status"] == "ok", rec["message"]
    assert rec["config"]["iters"] == 1 and rec["config"]["profile_step"] is True
    assert len(rec["step_time_s"]["all"]) == 1


def test_run_records_oom_raised_inside_the_step(monkeypatch):
    def oom_step(*_args, **_kwargs):
        def step(_x, _y):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")

        return step

    monkeypatch.setattr(train, "make_step", oom_step)
    rec = train.run(_resolved(), progress=None)
    assert rec["status"] == "oom"
    assert rec["message"] == "OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB"
    for key in TIMING_KEYS:
        assert rec[key] is None
    json.dumps(rec, allow_nan=False)  # still a valid run record


# --------------------------------------------------------------------------- CUDA only


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize(
    ("precision", "autocast", "scaler", "tf32"),
    [
        ("fp32", None, False, False),
        ("tf32", None, False, True),
        ("amp", "float16", True, False),
        ("bf16", "bfloat16", False, False),
    ],
)
def test_cuda_run_with_events(tmp_path, precision, autocast, scaler, tf32):
    major, _ = torch.cuda.get_device_capability()
    if precision in ("tf32", "bf16") and major < 8:
        pytest.skip(f"{precision} needs compute capability >= 8.0")
    proc, rec = run_cli(
        tmp_path, *TINY, "--warmup-iters", "2", "--iters", "5", "--backend", "cuda",
        "--precision", precision, "--cudnn-benchmark", "--channels-last",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert_ok_timings(rec, iters=5, batch=2)
    assert rec["timer"] == "cuda_events"
    assert rec["config"]["device"].startswith("cuda")
    assert rec["numerics"]["autocast_dtype"] == autocast
    assert rec["numerics"]["grad_scaler"] is scaler
    assert rec["numerics"]["cuda_matmul_allow_tf32"] is tf32
    assert rec["numerics"]["cudnn_allow_tf32"] is tf32
    assert rec["numerics"]["cudnn_benchmark"] is True
    assert rec["peak_device_memory_bytes"] > 0
    assert rec["device_name"] == torch.cuda.get_device_name(0)
    # GPU-timeline steps add up to the host-timed region (one sync at its end).
    region = rec["timed_region"]
    assert region["steps_sum_s"] <= region["wall_s"] * 1.01 + 1e-4
    assert region["steps_sum_s"] >= 0.5 * region["wall_s"]


@pytest.mark.cuda
@cuda
def test_cuda_profile_step_brackets_one_step_with_the_profiler(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append("stop"))
    cfg = train_config.TrainConfig(
        arch="resnet18", batch_size=2, image_size=32, warmup_iters=2, iters=5,
        backend="cuda", profile_step=True,
    )  # fmt: skip
    rec = train.run(train_config.validate(cfg), progress=None)
    assert rec["status"] == "ok", rec["message"]
    assert calls == ["start", "stop"]
    assert len(rec["step_time_s"]["all"]) == 1
    assert rec["timer"] == "cuda_events"


@pytest.mark.cuda
@cuda
def test_cuda_oom_is_recorded(tmp_path):
    free, _total = torch.cuda.mem_get_info()
    # A batch whose images alone exceed the free device memory.
    batch = int(free / (3 * 512 * 512 * 4)) + 1
    args = ["--arch", "resnet18", "--batch-size", str(batch), "--image-size", "512"]
    proc, rec = run_cli(tmp_path, *args, "--warmup-iters", "1", "--iters", "1", "--backend", "cuda")
    assert proc.returncode == 0, proc.stderr
    assert rec["status"] == "oom", rec["message"]


TINY_FACTORY = [
    "--arch",
    "tiny",
    "--model-factory",
    "tiny_models:tiny_cnn",
    "--batch-size",
    "2",
    "--image-size",
    "8",
    "--num-classes",
    "10",
]


@pytest.mark.build
def test_cli_compile_records_first_step_apart_from_steady_state(tmp_path, monkeypatch):
    # a tiny conv net at 8 px: torch.compile on CPU takes ~15 s on 2 cores
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests" / "data" / "models"))
    shared = tmp_path / "shared-cache"  # a cache another job filled must not be used
    shared.mkdir()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(shared))
    args = [*TINY_FACTORY, "--warmup-iters", "2", "--iters", "3", "--compile", "default"]
    proc, rec = run_cli(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    assert_ok_timings(rec, iters=3, batch=2)
    assert rec["config"]["compile"] == "default"
    assert rec["config"]["model_factory"] == "tiny_models:tiny_cnn"
    # Compilation happened in the first warm-up step, not in the timed steps.
    assert 0 < rec["first_step_s"] <= rec["warmup_s"]
    assert rec["first_step_s"] > 5 * rec["step_time_s"]["max"]
    # ... with an empty cache of its own (a cold compile whatever ran before), removed at exit
    cache = rec["numerics"]["compile_cache"]
    assert cache.startswith("empty, private to the run (")
    assert not Path(cache.split("(", 1)[1].rstrip(")")).exists()
    assert list(shared.iterdir()) == []


def test_cli_unknown_compile_mode_is_refused(tmp_path):
    proc, rec = run_cli(tmp_path, *TINY, "--compile", "fast")
    assert proc.returncode == 2 and rec is None
    assert "--compile 'fast': unknown mode" in proc.stderr
