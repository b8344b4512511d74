"""The CPUs the tests see, whatever this host has (a pytest plugin of conftest.py).

The project reads the CPU's flags in one place, ``detect_cpu_flags``, which takes them
from ``DNNROOFLINE_CPU_FLAGS`` where that is set. The whole session sets it to
``CPU_FLAG_SETS["without_bf16"]`` (workflow subprocesses included), so no test reads
this host's flags; a test of what bf16 support changes takes ``cpu_flags`` (or a module
fixture takes ``module_cpu_flags``) and runs once under each set, on every host.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from dnnroofline.study.config import CPU_FLAGS_ENV

#: An AVX-512 CPU without bf16 arithmetic, and the same CPU with AVX512_BF16: the two
#: paths of every flag-dependent decision (bf16 runs, or is refused / skipped).
CPU_FLAG_SETS = {
    "without_bf16": ["avx", "avx2", "fma", "avx512f"],
    "with_bf16": ["avx", "avx2", "fma", "avx512f", "avx512_bf16"],
}
SESSION_FLAGS = "without_bf16"


def pytest_configure(config):
    # before collection, so that nothing, not even a module's import, reads the host's
    os.environ[CPU_FLAGS_ENV] = ",".join(CPU_FLAG_SETS[SESSION_FLAGS])


@contextlib.contextmanager
def cpu_flags_set(name: str) -> Iterator[list[str]]:
    """``DNNROOFLINE_CPU_FLAGS`` set to ``CPU_FLAG_SETS[name]`` inside the block."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CPU_FLAGS_ENV, ",".join(CPU_FLAG_SETS[name]))
        yield list(CPU_FLAG_SETS[name])


@pytest.fixture(params=list(CPU_FLAG_SETS))
def cpu_flags(request) -> Iterator[list[str]]:
    """The test runs once per set of CPU_FLAG_SETS; the flags the CPU has, as a list."""
    with cpu_flags_set(request.param) as flags:
        yield flags


@pytest.fixture(scope="module", params=list(CPU_FLAG_SETS))
def module_cpu_flags(request) -> Iterator[list[str]]:
    """cpu_flags for a module fixture (a measurement taken once per set)."""
    with cpu_flags_set(request.param) as flags:
        yield flags


def has_bf16(flags: list[str]) -> bool:
    """Whether a CPU with these flags runs bf16 (as dnnroofline.study.precisions decides)."""
    from dnnroofline.study.precisions import cpu_bf16_reason

    return cpu_bf16_reason(flags) is None
