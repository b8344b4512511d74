"""Shared fixtures: the tiny study, run once per test session for every test that needs it."""

import ast
import functools
import os
from pathlib import Path

import fake_rapl
import pytest
from workflow_helpers import TINY, snakemake, write_config

from dnnroofline.measure.energy import POWERCAP_ENV
from dnnroofline.measure.measurement_lock import PATH_ENV


@pytest.fixture(scope="session", autouse=True)
def measurement_lock_per_worker(tmp_path_factory):
    """Each test worker its own measurement lock: the machine-wide one would make the
    workers' tiny measurements wait for each other (tests/test_measurement_lock.py tests
    the lock itself)."""
    os.environ[PATH_ENV] = str(tmp_path_factory.getbasetemp() / "measurement.lock")


@pytest.fixture(scope="session", autouse=True)
def cache_per_session(tmp_path_factory):
    """The session's own dnnroofline cache (dnnroofline.install_cache): each session
    computes what it reads back, as a fresh machine does, and leaves the user's alone."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.getbasetemp() / "cache")


# The files with tests that use tiny_study: make test (pytest -n 2) runs those tests on one
# worker (work_unit below); the files' other tests may go to the other.
TINY_STUDY_FILES = {
    "test_workflow.py",
    "test_report_browser.py",
    "test_traces.py",
    "test_compare_workflow.py",
}


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory):
    """The tiny study run for real with --cores 2, then the report. Its runs and ceilings
    read a fake RAPL package (tests/fake_rapl.py) whose joules follow the CPUs kept busy,
    so that energy goes through every stage on hosts without one (the default study
    records it unavailable there)."""
    workdir = tmp_path_factory.mktemp("tiny")
    write_config(workdir, TINY)
    with fake_rapl.running(workdir / "powercap") as powercap:
        snakemake(workdir, "--cores", "2", env_extra={POWERCAP_ENV: str(powercap)})
    snakemake(workdir, "--report", "results/report.html")
    return workdir


# The files whose tests start scripts/local_slurm.sh's cluster (a module fixture each): one
# work unit, so that no two clusters run at once (they would share its ports and
# /etc/slurm/slurm.conf, and the second start is refused).
LOCAL_SLURM_FILES = {"test_cluster.py", "test_cluster_faults.py"}

# make test's slowest work units (pytest -n 2 --durations on a 2-core host), dealt out
# first: longest first keeps both workers busy to the end, where a slow file dealt out last
# ran alone while the other worker idled. The Slurm unit leads: most of its time is spent
# waiting on Slurm, and beside the tiny study's jobs (--cores 2) that wait costs no core;
# dealt out later it ran beside one-core tests, a quarter of the CPU idle for 4 minutes.
# The tiny study follows: its measurements run one at a time, on one core, beside the
# rest. The other files follow in collection order.
SLOWEST_FIRST = ["local_slurm", "tiny_study", "test_faults.py", "test_workflow.py",
                 "test_h100_example.py", "test_run_train.py", "test_merge_gpu_results.py",
                 "test_kernel_roofline.py", "test_ddp.py", "test_ddp_traces.py",
                 "test_perf.py", "test_traces.py", "test_lock.py"]  # fmt: skip


def tests_taking(fixture: str, files) -> frozenset[tuple[str, str]]:
    """(file, function) of each test function of ``files`` (names in tests/) that takes
    ``fixture`` as an argument."""
    found = set()
    for name in files:
        for node in ast.parse((Path(__file__).parent / name).read_text()).body:
            if isinstance(node, ast.FunctionDef) and fixture in [a.arg for a in node.args.args]:
                found.add((name, node.name))
    return frozenset(found)


@functools.cache
def tiny_study_tests() -> frozenset[tuple[str, str]]:
    """(file, function) of each test in TINY_STUDY_FILES that takes tiny_study."""
    return tests_taking("tiny_study", TINY_STUDY_FILES)


def work_unit(nodeid: str) -> str:
    """The unit a worker runs whole: the test's file (its module fixtures run once), or
    "tiny_study" for every test that takes that fixture (the session's study runs once),
    apart from the other tests of their files, which can go to the other worker; or
    "local_slurm" for every test of LOCAL_SLURM_FILES."""
    path, _, test = nodeid.partition("::")
    if Path(path).name in LOCAL_SLURM_FILES:
        return "local_slurm"
    return "tiny_study" if (Path(path).name, test.split("[")[0]) in tiny_study_tests() else path


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers added here
def pytest_collection_modifyitems(items):
    for item in items:
        if "tiny_study" in item.fixturenames and work_unit(item.nodeid) != "tiny_study":
            raise pytest.UsageError(
                f"{item.nodeid} uses tiny_study: take it as an argument of the test, in a "
                "file of TINY_STUDY_FILES in conftest.py"
            )
        if "tiny_study" in item.fixturenames:
            item.add_marker(pytest.mark.workflow)  # it runs the workflow: not in make check

    def rank(item):
        unit = Path(work_unit(item.nodeid)).name
        return SLOWEST_FIRST.index(unit) if unit in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: each file keeps its order


def pytest_xdist_make_scheduler(config, log):
    """Deal out work_unit()s in the order of the collection (SLOWEST_FIRST), not by size."""
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False

    class ByWorkUnit(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


# the report tests' inputs and sections fixtures; the CPU flags every test sees, and the
# cpu_flags fixture that runs a test under both sets; REQUIRE_CUDA=1 (make gpu-check)
# turns a cuda test's skip into a failure; pytester runs that plugin in test_require_cuda.py
pytest_plugins = ["report_fixtures", "cpu_flags", "require_cuda", "pytester"]
