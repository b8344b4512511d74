"""A pytest plugin: with ``REQUIRE_CUDA=1`` (set by ``make gpu-check``) a test marked
``cuda`` that skips fails instead, naming the skip's reason. On a GPU machine a skipped
CUDA test means a CPU-only torch or a missing driver, not a machine without a GPU."""

from __future__ import annotations

import os

import pytest

REQUIRE_CUDA = "REQUIRE_CUDA"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("cuda") and os.environ.get(REQUIRE_CUDA) == "1":
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"{REQUIRE_CUDA}=1 and this cuda test skipped: {reason}"
