"""A GPU step replayed: the host issuing ops ahead of the device, with the step's syncs.

On a GPU the host (Python, autograd, the dispatcher) issues each op's kernels and runs
on; the device runs them in order as they come. A kernel starts when it has been issued
and the device is free; where the step reads a value back (GradScaler's inf check under
amp: ``found_inf.item()``), the host waits for the device to drain. The driver times a
step between two CUDA events recorded at step boundaries, so a step's time is the
device's arrival at one boundary to the next: the device's own work when the host keeps
ahead, the host's pace when it does not, and both in turn around a sync.

:func:`replay` plays the step's ops in order, a few steps in a row (the first starts on
an idle device; the steady state is what the runs time), and returns the last one.
Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Steps replayed in a row; the last is the one returned (steady state).
STEPS = 3


@dataclass(frozen=True)
class Issue:
    """One op as the host issues it: host seconds to issue it, device seconds of its
    kernels (0: host work alone, such as the optimizer's Python loop), and whether the
    host waits for the device before it (a sync)."""

    host_s: float
    device_s: float
    sync: bool = False


@dataclass(frozen=True)
class Replayed:
    step_s: float  # boundary to boundary, steady state
    device_s: float  # the device's busy time in the step
    host_s: float  # the host's issue time in the step (waits excluded)

    @property
    def busy_share(self) -> float:
        """The device's busy share of the step (kernel-busy)."""
        return self.device_s / self.step_s if self.step_s > 0 else 0.0


def replay(ops: Sequence[Issue], steps: int = STEPS) -> Replayed:
    """The steady-state step of ``ops`` issued in order, ``steps`` steps in a row."""
    if not ops:
        raise ValueError("replay of a step without ops")
    host = device = 0.0
    boundaries = []
    for _ in range(steps):
        boundaries.append(max(host, device))  # the step's CUDA event: reached in order
        for op in ops:
            if op.sync:
                host = max(host, device)
            host += op.host_s
            if op.device_s > 0:
                device = max(host, device) + op.device_s
    boundaries.append(max(host, device))
    return Replayed(
        step_s=boundaries[-1] - boundaries[-2],
        device_s=sum(op.device_s for op in ops),
        host_s=sum(op.host_s for op in ops),
    )
