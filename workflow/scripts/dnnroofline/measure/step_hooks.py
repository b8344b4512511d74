"""The hooks around a run's timed steps: what the timed region records besides time.

Each takes the ``before``/``after`` hooks so far and returns them wrapped, so that the
driver (:func:`dnnroofline.measure.train.timed_loop`) composes them: the profiler range
of the one step ncu profiles, the GradScaler's scale read outside the region (and what
it means, :func:`grad_scaler_record`), the NVML sampler and the energy meter over exactly
the timed steps, and the ranks of a data-parallel run starting together. Torch is imported lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dnnroofline.measure.energy import EnergyMeter
from dnnroofline.measure.nvml_sampler import NvmlSampler


def profile_hooks(backend: str) -> tuple[Callable[[], None] | None, Callable[[], None] | None]:
    """cudaProfilerStart/Stop around the one profiled step (ncu --profile-from-start off)."""
    if backend != "cuda":
        return None, None
    import torch

    def start() -> None:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()

    def stop() -> None:
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()

    return start, stop


def barrier_first(
    before: Callable[[], None] | None,
) -> Callable[[], None]:
    """Ranks of a data-parallel run start their timed steps together."""
    import torch.distributed as dist

    def start() -> None:
        dist.barrier()
        if before is not None:
            before()

    return start


def with_scale_probe(
    scaler: Any,
    before: Callable[[], None] | None,
    after: Callable[[], None] | None,
    probe: dict[str, float],
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Wrap the timed region's hooks to read the GradScaler's scale outside it (a host sync)."""

    def start() -> None:
        probe["before"] = float(scaler.get_scale())
        if before is not None:
            before()

    def stop() -> None:
        if after is not None:
            after()
        probe["after"] = float(scaler.get_scale())

    return start, stop


def with_sampler(
    sampler: NvmlSampler,
    before: Callable[[], None] | None,
    after: Callable[[], None] | None,
    record: dict[str, Any],
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Wrap the timed region's hooks so that NVML samples exactly the timed steps;
    the summary lands in ``record["gpu_telemetry"]``."""

    def start() -> None:
        if before is not None:
            before()
        sampler.start()

    def stop() -> None:
        record["gpu_telemetry"] = sampler.stop()
        if after is not None:
            after()

    return start, stop


def with_energy(
    meter: EnergyMeter,
    before: Callable[[], None] | None,
    after: Callable[[], None] | None,
    record: dict[str, Any],
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Wrap the timed region's hooks so that the energy meter reads its counter right
    after ``before`` and right before ``after``: the joules of exactly the timed steps
    (the final synchronize included); the meter's record lands in ``record["energy"]``."""

    def start() -> None:
        if before is not None:
            before()
        meter.start()

    def stop() -> None:
        record["energy"] = meter.stop()
        if after is not None:
            after()

    return start, stop


def grad_scaler_record(scale_before: float, scale_after: float, steps: int, profiled: bool) -> dict:
    """What GradScaler did over the measured steps.

    GradScaler halves its scale (backoff) on every step whose gradients hold
    inf/NaN, and skips that optimizer step; it only grows the scale after
    ``growth_interval`` (2000) clean steps. So over one profiled step a smaller
    scale means exactly that the optimizer step was skipped: the capture then
    lacks the optimizer's kernels.
    """
    decreased = scale_after < scale_before
    return {
        "scale_before": scale_before,
        "scale_after": scale_after,
        "steps": steps,
        "scale_decreased": decreased,
        "profiled_step_skipped": decreased if profiled and steps == 1 else None,
    }
