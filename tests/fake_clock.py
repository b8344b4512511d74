"""A clock that moves only when the test says so: timing code asserted exactly, with no
window that a loaded machine can miss."""

from __future__ import annotations

import types


class FakeClock:
    """Stands in for a module's ``time``: ``perf_counter`` and ``monotonic`` read ``now``,
    which only ``advance`` moves (by binary fractions of a second, so sums stay exact)."""

    def __init__(self) -> None:
        self.now = 0.0

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def module(self) -> types.SimpleNamespace:
        """What to put in place of the ``time`` module of the code under test."""
        return types.SimpleNamespace(perf_counter=lambda: self.now, monotonic=lambda: self.now)
