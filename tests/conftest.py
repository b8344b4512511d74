"""Shared fixtures: the tiny study, run once per test session for every test that needs it."""

import os
from pathlib import Path

import pytest
from workflow_helpers import TINY, snakemake, write_config

from dnnroofline.measure.measurement_lock import PATH_ENV


@pytest.fixture(scope="session", autouse=True)
def measurement_lock_per_worker(tmp_path_factory):
    """Each test worker its own measurement lock: the machine-wide one would make the
    workers' tiny measurements wait for each other (tests/test_measurement_lock.py tests
    the lock itself)."""
    os.environ[PATH_ENV] = str(tmp_path_factory.getbasetemp() / "measurement.lock")


# The files whose tests use tiny_study: make test (pytest -n 2) keeps them on one worker.
TINY_STUDY_FILES = {"test_workflow.py", "test_report_browser.py", "test_traces.py"}


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory):
    """The tiny study run for real with --cores 2, then the report."""
    workdir = tmp_path_factory.mktemp("tiny")
    write_config(workdir, TINY)
    snakemake(workdir, "--cores", "2")
    snakemake(workdir, "--report", "results/report.html")
    return workdir


def pytest_collection_modifyitems(items):
    for item in items:
        if "tiny_study" in item.fixturenames and item.path.name not in TINY_STUDY_FILES:
            raise pytest.UsageError(
                f"{item.path.name} uses tiny_study: add it to TINY_STUDY_FILES in conftest.py"
            )


def pytest_xdist_make_scheduler(config, log):
    """Send each test file to one worker as a unit (its module fixtures run once), and
    the files of TINY_STUDY_FILES to the same one (the session's tiny study runs once)."""
    from xdist.scheduler import LoadFileScheduling

    class TinyStudyTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tiny_study" if Path(path).name in TINY_STUDY_FILES else path

    return TinyStudyTogether(config, log)


# the report tests' inputs and sections fixtures
pytest_plugins = ["report_fixtures"]
