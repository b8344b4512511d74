"""What a CPU pays for an op's output in memory fresh from the OS, per byte.

PyTorch's CPU allocator takes each tensor from malloc and gives it back when freed. glibc
serves a block under its mmap threshold (which rises to the largest block freed, up to
32 MiB on 64-bit Linux) from its heap, so a training step's tensors reuse hot pages from
the second step on; a block above it is mapped from the OS on every allocation and
unmapped when freed, so each of its pages faults and is zeroed by the kernel the first
time it is written. A fully connected layer's weight gradient (alexnet's 144 MiB) and the
optimizer's weight-decay sum of it pay that every step, at a rate the sweep's ops, whose
outputs are smaller, never saw. :func:`measure` finds both numbers on the machine (the
smallest size that pays, and the seconds per byte above it): an output written into a
block fresh from malloc against the same output written into one block kept; the model
charges each op's fresh outputs at or above that size (:func:`seconds`), and takes the
same charge out of a swept op's time before reading its efficiency.

A CUDA tensor comes from torch's caching allocator, which keeps freed blocks: none pays.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dnnroofline.errors import InputError

MIB = 2**20
#: The sizes probed first (MiB), then bisected between the last that does not pay and
#: the first that does, to :data:`RESOLUTION_BYTES`.
PROBE_MIB = (1, 2, 4, 8, 16, 24, 48, 96)
RESOLUTION_BYTES = MIB
#: A size pays where its extra seconds per byte are at least this share of the largest
#: probe's; the largest probe pays where fresh memory costs at least this share more than
#: kept memory (else nothing pays on this machine).
PAYS_SHARE = 0.25
#: Repeats per probe, fastest kept (as the roofs are taken); the first call is a warm-up
#: that also raises glibc's threshold to the probe's size where it can.
REPEATS = 5

METHOD = (
    "per size, the fastest of {reps} writes (fill) of a tensor fresh from the CPU "
    "allocator, less the fastest of {reps} writes of one tensor kept, over the bytes; "
    "sizes {probes} MiB, bisected to 1 MiB between the last size that does not pay and "
    "the first that does (pays: at least {share:.0%} of the largest size's extra seconds "
    "per byte); seconds per byte: the median over the sizes that pay; the env's threads"
)


def _fastest(fn: Any, reps: int) -> float:
    fn()  # warm-up: first touch, and glibc's threshold raised where it can be
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def probe(torch: Any, nbytes: int, reps: int = REPEATS) -> dict:
    """Seconds to write ``nbytes`` into a fresh tensor and into a kept one."""
    kept = torch.empty(nbytes, dtype=torch.uint8)
    fresh_s = _fastest(lambda: torch.empty(nbytes, dtype=torch.uint8).fill_(1), reps)
    kept_s = _fastest(lambda: kept.fill_(1), reps)
    return {"bytes": int(nbytes), "fresh_s": fresh_s, "kept_s": kept_s}


def _extra_per_byte(p: Mapping) -> float:
    return max(p["fresh_s"] - p["kept_s"], 0.0) / p["bytes"]


def _pays(p: Mapping, largest: Mapping) -> bool:
    return _extra_per_byte(p) >= PAYS_SHARE * _extra_per_byte(largest)


def fit(probes: Sequence[Mapping]) -> tuple[int | None, float]:
    """(threshold bytes, seconds per byte) from probes: the smallest size from which
    every larger probe pays, and the median extra per byte over those; (None, 0.0)
    where the largest probe pays nothing worth charging."""
    ordered = sorted(probes, key=lambda p: p["bytes"])
    if not ordered:
        return None, 0.0
    largest = ordered[-1]
    if largest["fresh_s"] < (1 + PAYS_SHARE) * largest["kept_s"]:
        return None, 0.0
    start = len(ordered) - 1
    while start > 0 and _pays(ordered[start - 1], largest):
        start -= 1
    paying = ordered[start:]
    return int(paying[0]["bytes"]), statistics.median(_extra_per_byte(p) for p in paying)


def measure(torch: Any, reps: int = REPEATS, probe_mib: Sequence[int] = PROBE_MIB) -> dict:
    """The ``fresh_pages`` block of a CPU efficiency document (torch threads as set)."""
    probes = [probe(torch, mib * MIB, reps) for mib in probe_mib]
    largest = max(probes, key=lambda p: p["bytes"])
    threshold, _ = fit(probes)
    if threshold is not None:
        below = [p["bytes"] for p in probes if p["bytes"] < threshold]
        low, high = (max(below) if below else 0), threshold
        while high - low > RESOLUTION_BYTES:
            mid = (low + high) // 2 // RESOLUTION_BYTES * RESOLUTION_BYTES or RESOLUTION_BYTES
            if mid in (low, high):
                break
            p = probe(torch, mid, reps)
            probes.append(p)
            low, high = (low, mid) if _pays(p, largest) else (mid, high)
    threshold, per_byte = fit(probes)
    return {
        "threshold_bytes": threshold,
        "s_per_byte": per_byte,
        "probes": sorted(probes, key=lambda p: p["bytes"]),
        "method": METHOD.format(
            reps=reps, probes=", ".join(map(str, probe_mib)), share=PAYS_SHARE
        ),  # fmt: skip
    }


def seconds(fresh_bytes: Iterable[int], block: Mapping | None) -> float:
    """Seconds an op's fresh outputs (their sizes in bytes) pay on a machine whose
    efficiency document holds ``block`` (None or no threshold: nothing)."""
    if not block or block.get("threshold_bytes") is None:
        return 0.0
    threshold, per_byte = int(block["threshold_bytes"]), float(block.get("s_per_byte") or 0.0)
    return per_byte * sum(int(b) for b in fresh_bytes if int(b) >= threshold)


def fresh_bytes(record: Mapping, at: str) -> list[int]:
    """A swept op's or an inventory op's ``fresh_bytes`` (the sizes of the outputs it
    allocates; absent: none), validated."""
    sizes = record.get("fresh_bytes") or []
    if not isinstance(sizes, list) or not all(
        isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in sizes
    ):
        raise InputError(f"{at}.fresh_bytes must be a list of byte counts, got {sizes!r}")
    return sizes
