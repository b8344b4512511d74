"""Shared fixtures: the tiny study, run once per test session for every test that needs it."""

import pytest
from workflow_helpers import TINY, snakemake, write_config


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory):
    """The tiny study run for real with --cores 2, then the report."""
    workdir = tmp_path_factory.mktemp("tiny")
    write_config(workdir, TINY)
    snakemake(workdir, "--cores", "2")
    snakemake(workdir, "--report", "results/report.html")
    return workdir


def pytest_collection_modifyitems(items):
    """Groups for ``pytest -n 2 --dist loadgroup`` (make test): a test file's tests stay on
    one worker, so its module fixtures run once, and every user of the session's tiny
    study shares one worker, so that study runs once."""
    for item in items:
        group = "tiny_study" if "tiny_study" in item.fixturenames else item.path.stem
        item.add_marker(pytest.mark.xdist_group(group))


# the report tests' inputs and sections fixtures
pytest_plugins = ["report_fixtures"]
