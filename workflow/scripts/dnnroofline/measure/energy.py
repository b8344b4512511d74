"""Energy over a timed region: NVML's total energy counter on an NVIDIA GPU, RAPL
(``/sys/class/powercap``) on a CPU, else "unavailable" with the reason.

Both are cumulative hardware counters read at the start and the end of the region, so
the joules are the counter's, not power samples integrated over time (a sampler misses
the short spikes of a training step):

- NVML: ``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded
  (Volta and later); the whole board, idle power included.
- RAPL: each ``intel-rapl:N`` zone's ``energy_uj`` (microjoules), wrapping at its
  ``max_energy_range_uj``. The CPU's joules are its ``package-*`` zones plus any
  ``dram`` zone; ``core``/``uncore`` are parts of a package and ``psys`` (the platform)
  overlaps the packages, so they are left out, as are the ``intel-rapl-mmio`` copies of
  the package counters. Since Linux 5.10 (CVE-2020-8694) ``energy_uj`` is readable by
  root only: where it is not readable the run says so and goes on.

``nvml`` is the pynvml module or anything with its functions, ``powercap_root`` the
sysfs folder: tests pass fakes. Without ``powercap_root``, :func:`energy_meter` reads the
environment variable ``DNNROOFLINE_POWERCAP_ROOT`` where it is set (a copy or a fake of
the sysfs tree; the tests point it at one), else ``/sys/class/powercap``.

A timed run's ``energy`` record (docs/contracts.md) is the meter's, completed by
:func:`run_energy` (per step, per image, the GPU's peak power and clocks); a data-parallel
run's merges its ranks' by :func:`merge_rank_energy`. :func:`energy_record`,
:func:`run_energy` and :func:`merge_rank_energy` are pure.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dnnroofline.io import dig
from dnnroofline.measure.nvml_sampler import NvmlUnavailable, open_device

POWERCAP_ROOT = "/sys/class/powercap"
#: Environment variable naming another powercap root (a fake sysfs tree in tests).
POWERCAP_ENV = "DNNROOFLINE_POWERCAP_ROOT"
#: RAPL zones whose joules are the CPU's (the rest overlap them).
RAPL_COUNTED = ("package", "dram")
NVML_COUNTER = "nvmlDeviceGetTotalEnergyConsumption"


def unavailable(reason: str, source: str | None = None) -> dict:
    """The ``energy`` record of a region whose joules could not be read."""
    return {"available": False, "reason": reason, "source": source, "joules": None}


def energy_record(
    source: str,
    counter: str,
    joules: float,
    seconds: float,
    domains: Mapping[str, float] | None = None,
) -> dict:
    """The ``energy`` record of a region: ``joules`` over ``seconds``, and the mean power."""
    return {
        "available": True,
        "reason": None,
        "source": source,
        "counter": counter,
        "joules": joules,
        "seconds": seconds,
        "mean_power_w": joules / seconds if seconds > 0 else None,
        "domains": dict(domains or {}),
    }


def per_work(energy: Mapping | None, steps: int, images: int) -> dict:
    """Joules per step and per image of a region of ``steps`` steps of ``images`` images
    in all (None where the region has no joules)."""
    joules = (energy or {}).get("joules")
    if joules is None or steps <= 0 or images <= 0:
        return {"joules_per_step": None, "joules_per_image": None}
    return {"joules_per_step": joules / steps, "joules_per_image": joules / images}


# --------------------------------------------------------------------------- RAPL


@dataclass(frozen=True)
class RaplZone:
    """One counted RAPL zone: its sysfs folder, name and wrap-around range (µJ)."""

    path: str
    name: str
    max_range_uj: int

    def read_uj(self) -> int:
        with open(os.path.join(self.path, "energy_uj")) as f:
            return int(f.read().strip())


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _counted(name: str) -> bool:
    return any(name == kind or name.startswith(kind + "-") for kind in RAPL_COUNTED)


def rapl_zones(root: str = POWERCAP_ROOT) -> tuple[list[RaplZone], str | None]:
    """The counted RAPL zones under ``root`` (packages and DRAM, subzones included), or
    no zones and the reason."""
    if not os.path.isdir(root):
        return [], f"{root} does not exist (no powercap driver: no RAPL energy counters)"
    zones: list[RaplZone] = []
    seen: set[str] = set()
    for dirpath, dirnames, _files in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d.startswith("intel-rapl:"))
        base = os.path.basename(dirpath)
        # sysfs lists a subzone twice: in its package's folder and as a link in the root
        real = os.path.realpath(dirpath)
        if not base.startswith("intel-rapl:") or real in seen:
            continue
        seen.add(real)
        name = _read_text(os.path.join(dirpath, "name")) or ""
        if _counted(name):
            top = base.count(":") == 1
            label = name if top else f"{name} ({base})"
            max_range = _read_text(os.path.join(dirpath, "max_energy_range_uj"))
            zones.append(RaplZone(dirpath, label, int(max_range) if max_range else 0))
    if not zones:
        return [], f"no RAPL package or dram zone (intel-rapl:*) under {root}"
    return zones, None


def _wrapped_delta(before: int, after: int, max_range_uj: int) -> int:
    """The counter's increase, across at most one wrap at ``max_range_uj``."""
    delta = after - before
    if delta < 0 and max_range_uj > 0:
        delta += max_range_uj + 1
    return delta


class RaplMeter:
    """Joules of the CPU's packages and DRAM between ``start()`` and ``stop()``."""

    source = "rapl"

    def __init__(self, root: str = POWERCAP_ROOT, clock: Callable[[], float] = time.monotonic):
        self.root = root
        self.clock = clock
        self.zones, self.error = rapl_zones(root)
        self._before: list[int] | None = None
        self._t0 = 0.0

    def _read_all(self) -> list[int]:
        return [zone.read_uj() for zone in self.zones]

    def start(self) -> bool:
        if self.error:
            return False
        try:
            self._before = self._read_all()
        except PermissionError as exc:
            self.error = (
                f"{exc.filename} is not readable by this user (RAPL's energy_uj is "
                "root-only since Linux 5.10, CVE-2020-8694)"
            )
            return False
        except (OSError, ValueError) as exc:
            self.error = f"RAPL: {type(exc).__name__}: {exc}"
            return False
        self._t0 = self.clock()
        return True

    def stop(self) -> dict:
        if self._before is None:
            return unavailable(self.error or "RAPL was never started", self.source)
        try:
            after = self._read_all()
        except (OSError, ValueError) as exc:
            return unavailable(f"RAPL: {type(exc).__name__}: {exc}", self.source)
        seconds = self.clock() - self._t0
        domains = {
            zone.name: _wrapped_delta(b, a, zone.max_range_uj) / 1e6
            for zone, b, a in zip(self.zones, self._before, after, strict=True)
        }
        counter = "powercap energy_uj: " + ", ".join(domains)
        return energy_record(self.source, counter, sum(domains.values()), seconds, domains)


# --------------------------------------------------------------------------- NVML


class NvmlEnergyMeter:
    """Joules of one GPU between ``start()`` and ``stop()`` from NVML's energy counter."""

    source = "nvml"

    def __init__(
        self, index: int = 0, nvml: Any = None, clock: Callable[[], float] = time.monotonic
    ):
        self.index = index
        self.nvml = nvml
        self.clock = clock
        self.error: str | None = None
        self._handle: Any = None
        self._before_mj: int | None = None
        self._t0 = 0.0

    def _read_mj(self) -> int:
        return int(getattr(self.nvml, NVML_COUNTER)(self._handle))

    def start(self) -> bool:
        try:  # no NVML: the run goes on without energy
            self.nvml, self._handle = open_device(self.nvml, self.index)
        except NvmlUnavailable as exc:
            self.error = str(exc)
            return False
        try:
            self._before_mj = self._read_mj()
        except Exception as exc:  # noqa: BLE001 - no counter (pre-Volta): the run goes on
            self.error = f"NVML {NVML_COUNTER}: {type(exc).__name__}: {exc}"
            self._before_mj = None
            return False
        self._t0 = self.clock()
        return True

    def stop(self) -> dict:
        if self._before_mj is None:
            return unavailable(self.error or "NVML was never started", self.source)
        try:
            after = self._read_mj()
        except Exception as exc:  # noqa: BLE001 - the reading is lost, the run is not
            return unavailable(f"NVML {NVML_COUNTER}: {type(exc).__name__}: {exc}", self.source)
        finally:
            # shutting NVML down cannot fail the run
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
        seconds = self.clock() - self._t0
        return energy_record(self.source, NVML_COUNTER, (after - self._before_mj) / 1e3, seconds)


class UnavailableMeter:
    """A meter for a device with no energy counter: says why."""

    source = None

    def __init__(self, reason: str):
        self.error = reason

    def start(self) -> bool:
        return False

    def stop(self) -> dict:
        return unavailable(self.error)


EnergyMeter = NvmlEnergyMeter | RaplMeter | UnavailableMeter


def energy_meter(
    backend: str, index: int = 0, *, nvml: Any = None, powercap_root: str | None = None
) -> EnergyMeter:
    """The meter of a backend: NVML on ``cuda``, RAPL on ``cpu``, none elsewhere.
    ``powercap_root`` defaults to ``$DNNROOFLINE_POWERCAP_ROOT``, else /sys/class/powercap."""
    if backend == "cuda":
        return NvmlEnergyMeter(index, nvml)
    if backend == "cpu":
        return RaplMeter(powercap_root or os.environ.get(POWERCAP_ENV) or POWERCAP_ROOT)
    return UnavailableMeter(f"no energy counter is read on backend {backend!r}")


# --------------------------------------------------------------------------- a run's record

#: The keys of a run's ``energy`` record besides available, reason and source.
RUN_ENERGY_NUMBERS = (
    "counter",
    "joules",
    "seconds",
    "mean_power_w",
    "domains",
    "joules_per_step",
    "joules_per_image",
    "peak_power_w",
    "sm_clock_mhz",
    "mem_clock_mhz",
)
_TELEMETRY = {
    "peak_power_w": ("power_w", "max"),
    "sm_clock_mhz": ("sm_mhz", "median"),
    "mem_clock_mhz": ("mem_mhz", "median"),
}


def _telemetry_figures(telemetry: Mapping | None) -> dict:
    """The GPU's peak power and median clocks over the timed steps (NVML's sampler)."""
    if not telemetry or not telemetry.get("available"):
        return dict.fromkeys(_TELEMETRY)
    return {key: dig(telemetry, *path) for key, path in _TELEMETRY.items()}


def run_energy(
    energy: Mapping | None, telemetry: Mapping | None, steps: int, images: int
) -> dict | None:
    """A timed run's ``energy`` record: the meter's record over ``steps`` timed steps of
    ``images`` images in all, with joules per step and per image, and from the GPU's
    ``gpu_telemetry`` (when sampled) its peak power and median clocks. An unavailable
    record keeps its reason, every number null; None stays None (nothing timed)."""
    if energy is None:
        return None
    if not energy.get("available"):
        base = unavailable(energy.get("reason") or "no reason given", energy.get("source"))
        return {**dict.fromkeys(RUN_ENERGY_NUMBERS), **base}
    return {**energy, **per_work(energy, steps, images), **_telemetry_figures(telemetry)}


def _all_or_none(values: Sequence[Any], how: Callable[[list], Any]) -> Any:
    return how(list(values)) if values and all(v is not None for v in values) else None


def merge_rank_energy(parts: Sequence[Mapping | None], steps: int, images: int) -> dict | None:
    """The ``energy`` record of a data-parallel run from its ranks' (:func:`run_energy`)
    records: ``steps`` timed steps of ``images`` images over all ranks.

    NVML: one GPU per rank, so the joules are the sum over ranks (over the longest
    rank's seconds), the peak power the sum of the GPUs' peaks (a bound: the peaks need
    not coincide) and the clocks the median of the ranks'. RAPL: see below. A rank
    without a record or with an unavailable one makes the run's unavailable, naming it.
    """
    if all(p is None for p in parts):
        return None
    for rank, part in enumerate(parts):
        if part is None:
            return run_energy(unavailable(f"rank {rank} recorded no energy"), None, 0, 0)
        if not part.get("available"):
            why = unavailable(f"rank {rank}: {part.get('reason')}", part.get("source"))
            return run_energy(why, None, 0, 0)
    sources = sorted({str(p.get("source")) for p in parts})
    if len(sources) != 1:
        return run_energy(unavailable(f"the ranks read different counters: {sources}"), None, 0, 0)
    if sources[0] == "rapl":
        # RAPL's counters are the machine's, not a process's: every rank read all the
        # packages over windows that overlap (the ranks start at one barrier), so the
        # job's joules are the largest reading, not the sum (which counts them N times)
        top = max(parts, key=lambda p: p["joules"])
        merged = energy_record(
            "rapl", top["counter"], top["joules"], top["seconds"], top["domains"]
        )
        return run_energy(merged, None, steps, images)
    joules = sum(p["joules"] for p in parts)
    seconds = max(p["seconds"] for p in parts)
    merged = energy_record(sources[0], parts[0]["counter"], joules, seconds)
    record = {**merged, **per_work(merged, steps, images)}
    record["peak_power_w"] = _all_or_none([p.get("peak_power_w") for p in parts], sum)
    for key in ("sm_clock_mhz", "mem_clock_mhz"):
        record[key] = _all_or_none([p.get(key) for p in parts], statistics.median)
    return record
