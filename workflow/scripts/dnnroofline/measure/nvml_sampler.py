"""GPU clocks, power, temperature and throttle reasons sampled (NVML) while a run is timed.

A GPU that hits its power cap or a thermal limit lowers its clocks, and a run
timed then is slower than the same run on a cool GPU. The timed region of each
CUDA run is sampled every ``interval_s`` by a background thread, and the run JSON
keeps the summary (``gpu_telemetry``): SM and memory clocks, power and
temperature (median, min, max) and, per throttle reason, the share of samples it
was active. ``throttled`` is true when any performance-limiting reason (power
cap, thermal or hardware slowdown, power brake) was seen in any sample; the
report flags such runs.

``nvml`` is the pynvml module (nvidia-ml-py) or anything with its functions;
tests pass a fake. Pure apart from the sampling thread: :func:`summarize` turns
samples into the record.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

#: NVML clock event (throttle) reason bits: nvmlClocksThrottleReason* / nvmlClocksEventReason*.
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: Reasons that lower the clocks below what the run would otherwise get.
LIMITING_REASONS = frozenset(
    {
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    }
)


def decode_reasons(mask: int) -> list[str]:
    """The names of the reason bits set in ``mask`` (unknown bits as ``bit_0x...``)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    bit = 1
    while unknown:
        if unknown & bit:
            names.append(f"bit_{bit:#x}")
            unknown &= ~bit
        bit <<= 1
    return names


def _stats(values: Sequence[float]) -> dict[str, float] | None:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def summarize(samples: Sequence[Mapping], interval_s: float, limits: Mapping | None = None) -> dict:
    """The ``gpu_telemetry`` record of a run from its samples."""
    n = len(samples)
    counts: dict[str, int] = {}
    limited = 0
    for s in samples:
        names = decode_reasons(int(s.get("reasons") or 0))
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        if LIMITING_REASONS & set(names):
            limited += 1
    seen = sorted(LIMITING_REASONS & set(counts))
    return {
        "available": True,
        "reason": None,
        "samples": n,
        "interval_s": interval_s,
        "sm_mhz": _stats([s.get("sm_mhz") for s in samples]),
        "mem_mhz": _stats([s.get("mem_mhz") for s in samples]),
        "power_w": _stats([s.get("power_w") for s in samples]),
        "temperature_c": _stats([s.get("temperature_c") for s in samples]),
        "limits": dict(limits or {}),
        "throttle_reasons": {k: counts[k] / n for k in sorted(counts)} if n else {},
        "throttled": bool(limited),
        "throttled_fraction": limited / n if n else None,
        "limiting_reasons": seen,
    }


def unavailable(reason: str) -> dict:
    return {"available": False, "reason": reason, "samples": 0, "throttled": None}


class NvmlUnavailable(RuntimeError):
    """NVML or the GPU asked for cannot be opened (the message says why)."""


def open_device(nvml: Any, index: int) -> tuple[Any, Any]:
    """(the NVML module, GPU ``index``'s handle) after ``nvmlInit``: ``nvml`` where given
    (tests pass a fake), else pynvml. Raises :class:`NvmlUnavailable` with the reason."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            raise NvmlUnavailable("pynvml (nvidia-ml-py) is not installed") from None
    try:
        nvml.nvmlInit()
        return nvml, nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:  # noqa: BLE001 - any NVML failure is a reason, not a crash
        raise NvmlUnavailable(f"NVML: {type(exc).__name__}: {exc}") from exc


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - one missing reading is not the run's failure
        return None


class NvmlSampler:
    """Samples one GPU from ``start()`` to ``stop()`` in a daemon thread."""

    def __init__(self, index: int = 0, interval_s: float = 0.1, nvml: Any = None) -> None:
        self.index = index
        self.interval_s = interval_s
        self.nvml = nvml
        self.samples: list[dict] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        self._limits: dict = {}

    def _reasons_fn(self) -> Any:
        n = self.nvml
        return getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )

    def sample(self) -> dict:
        n, h = self.nvml, self._handle
        power_mw = _call(n.nvmlDeviceGetPowerUsage, h)
        reasons = self._reasons_fn()
        return {
            "t": time.monotonic(),
            "sm_mhz": _call(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
            "mem_mhz": _call(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
            "power_w": power_mw / 1000.0 if power_mw is not None else None,
            "temperature_c": _call(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
            "reasons": _call(reasons, h) if reasons is not None else None,
        }

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.sample())
            self._stop.wait(self.interval_s)

    def start(self) -> bool:
        """Open NVML and start sampling; False (with ``error`` set) when NVML is not there."""
        try:  # no NVML: the run goes on without telemetry
            self.nvml, self._handle = open_device(self.nvml, self.index)
        except NvmlUnavailable as exc:
            self.error = str(exc)
            return False
        n = self.nvml
        power_limit = _call(n.nvmlDeviceGetEnforcedPowerLimit, self._handle)
        self._limits = {
            "sm_max_mhz": _call(n.nvmlDeviceGetMaxClockInfo, self._handle, n.NVML_CLOCK_SM),
            "mem_max_mhz": _call(n.nvmlDeviceGetMaxClockInfo, self._handle, n.NVML_CLOCK_MEM),
            "power_limit_w": power_limit / 1000.0 if power_limit is not None else None,
        }
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> dict:
        """Stop sampling, close NVML and return the ``gpu_telemetry`` record."""
        if self._thread is None:
            return unavailable(self.error or "sampling never started")
        self._stop.set()
        self._thread.join(timeout=10)
        self.samples.append(self.sample())  # the state at the end of the timed region
        _call(self.nvml.nvmlShutdown)
        self._thread = None
        return summarize(self.samples, self.interval_s, self._limits)
