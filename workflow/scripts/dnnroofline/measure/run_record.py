"""The run record of a timed run: what it was asked to do, where it ran, what it measured.

:func:`new_record` is the record before the run (every result key null); the timed
driver (:mod:`dnnroofline.measure.train`) fills it with :func:`timing_fields`,
:func:`peak_memory_fields` and :func:`usage_fields`, or :func:`failure_fields` when the
run crashed. The data-parallel launcher (:mod:`dnnroofline.measure.ddp`) starts from the
same :func:`new_record`.
"""

from __future__ import annotations

import resource
import sys
import time
import traceback
from typing import Any

import psutil

from dnnroofline.measure.ddp import dist_backend
from dnnroofline.measure.envinfo import cpu_model, installed_version
from dnnroofline.measure.train_config import (
    MAX_MESSAGE,
    OPTIMIZER,
    SCHEMA_VERSION,
    Resolved,
    cudnn_benchmark_setting,
    failure_status,
)
from dnnroofline.stats import summarize
from dnnroofline.study import environment


def rss_bytes(ru: resource.struct_rusage) -> int:
    # ru_maxrss is KiB on Linux and bytes on macOS.
    return int(ru.ru_maxrss) if sys.platform == "darwin" else int(ru.ru_maxrss) * 1024


def current_rss_bytes() -> int:
    """The process's resident memory now (max RSS is its peak over the whole run): taken
    before the model is built, it is the Python and torch runtime, for the model check
    to set the rest of the peak beside the predicted tensors."""
    return int(psutil.Process().memory_info().rss)


def gpu_clocks(index: int) -> dict[str, Any] | None:
    """Current and max SM/memory clocks (MHz) through pynvml, None if it is not there."""
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return {
                "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                "mem_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                "sm_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
                "mem_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - clocks are optional information
        return None


def device_info(resolved: Resolved) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "torchvision": installed_version("torchvision"),
        "cuda": None,
        "cudnn": None,
        "gpu_clocks": None,
    }
    if resolved.backend == "cuda":
        index = torch.device(resolved.device).index or 0
        info["device_name"] = torch.cuda.get_device_name(index)
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
        info["gpu_clocks"] = gpu_clocks(index)
    elif resolved.backend == "mps":
        info["device_name"] = f"Apple MPS ({cpu_model()})"
    else:
        info["device_name"] = cpu_model()
    return info


def config_record(resolved: Resolved) -> dict[str, Any]:
    cfg = resolved.cfg
    return {
        "arch": cfg.arch,
        "batch_size": cfg.batch_size,
        "image_size": cfg.image_size,
        "warmup_iters": cfg.warmup_iters,
        "iters": 1 if cfg.profile_step else cfg.iters,
        "precision": cfg.precision,
        "backend": resolved.backend,
        "device": resolved.device,
        "channels_last": cfg.channels_last,
        "compile": cfg.compile,
        "cudnn_benchmark": cudnn_benchmark_setting(cfg.cudnn_benchmark, resolved.backend),
        "cudnn_benchmark_source": "default (on for CUDA)"
        if cfg.cudnn_benchmark is None
        else "--cudnn-benchmark"
        if cfg.cudnn_benchmark
        else "--no-cudnn-benchmark",
        "model_factory": cfg.model_factory,
        "model_kwargs": dict(cfg.model_kwargs),
        "data": "synthetic" if cfg.data is None else str(cfg.data),
        "workers": cfg.workers,
        "pin_memory": cfg.pin_memory and resolved.backend == "cuda",
        "threads": resolved.threads,
        "optimizer": dict(OPTIMIZER),
        "num_classes": cfg.num_classes,
        "requested_backend": cfg.backend,
        "profile_step": cfg.profile_step,
        "nproc": cfg.nproc,
        "dist_backend": dist_backend(resolved.backend) if cfg.nproc > 1 else None,
        "global_batch_size": cfg.nproc * cfg.batch_size,
        "environment": environment.parse(cfg.environ),
    }


def new_record(resolved: Resolved) -> dict[str, Any]:
    """The run record before the run: config and start time, every result key null."""
    cfg = resolved.cfg
    return {
        "schema_version": SCHEMA_VERSION,
        "status": None,
        "message": None,
        "run_id": cfg.run_id,
        "env": cfg.env,
        "config": config_record(resolved),
        "start_time": time.time(),
        "end_time": None,
        "step_time_s": None,
        "data_wait_s": None,
        "compute_s": None,
        "images_per_s": None,
        "wall_s": None,
        "user_s": None,
        "sys_s": None,
        "max_rss_bytes": None,
        "rss_before_model_bytes": None,
        "peak_device_memory_bytes": None,
        "device_name": None,
        "threads": resolved.threads,
        "omp_num_threads": resolved.omp_num_threads,
        "timer": None,
        "numerics": None,
        "setup_s": None,
        "warmup_s": None,
        "first_step_s": None,
        "timed_region": None,
        "dataset_images": None,
        "grad_scaler": None,
        "gpu_telemetry": None,
        "energy": None,
        "ranks": None,
    }


def timing_fields(times: Any, batch_size: int) -> dict[str, Any]:
    """The record's results of a finished timed loop (``train.LoopTimes``): median and
    spread of the per-step times, data wait apart from compute, images/s."""
    step = summarize(times.step_s)
    data = summarize(times.data_wait_s)
    compute = summarize(times.compute_s)
    return {
        "status": "ok",
        "step_time_s": step,
        "data_wait_s": {
            "median": data["median"],
            "total": sum(times.data_wait_s),
            "all": data["all"],
        },
        "compute_s": {"median": compute["median"], "total": sum(times.compute_s)},
        "images_per_s": batch_size / step["median"],
        "timer": times.timer,
        "warmup_s": times.warmup_s,
        "first_step_s": times.first_step_s,
        "timed_region": {
            "wall_s": times.timed_wall_s,
            "user_s": times.timed_user_s,
            "sys_s": times.timed_sys_s,
            "minor_faults": times.timed_minor_faults,
            "page_bytes": resource.getpagesize(),
            "steps_sum_s": sum(times.step_s),
            "other_load": times.other_load,
        },
    }


def peak_memory_fields(resolved: Resolved) -> dict[str, Any]:
    """The device memory the run peaked at (CUDA: allocated and reserved; MPS: the driver's)."""
    import torch

    if resolved.backend == "cuda":
        return {
            "peak_device_memory_bytes": int(torch.cuda.max_memory_allocated(resolved.device)),
            "peak_device_reserved_bytes": int(torch.cuda.max_memory_reserved(resolved.device)),
        }
    if resolved.backend == "mps":
        return {"peak_device_memory_bytes": int(torch.mps.driver_allocated_memory())}
    return {}


def failure_fields(exc: BaseException) -> dict[str, Any]:
    """The record of a run that crashed: its status (``oom`` or ``error``), the message
    and the traceback's end, every result null."""
    status, message = failure_status(exc)
    return {
        "status": status,
        "message": message,
        "step_time_s": None,
        "data_wait_s": None,
        "compute_s": None,
        "images_per_s": None,
        "energy": None,
        "traceback": traceback.format_exc(limit=8)[-MAX_MESSAGE:],
    }


def usage_fields(
    t0: float, ru0: resource.struct_rusage, ru0_children: resource.struct_rusage
) -> dict[str, Any]:
    """Wall time since ``t0`` (time.monotonic), user and sys time since the rusage
    snapshots (the data-loader workers', shut down by now, included) and max RSS."""
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    ru1_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall_s": time.monotonic() - t0,
        "user_s": ru1.ru_utime - ru0.ru_utime + ru1_children.ru_utime - ru0_children.ru_utime,
        "sys_s": ru1.ru_stime - ru0.ru_stime + ru1_children.ru_stime - ru0_children.ru_stime,
        "max_rss_bytes": rss_bytes(ru1),
        "end_time": time.time(),
    }
