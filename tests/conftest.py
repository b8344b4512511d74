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


# the report tests' inputs and sections fixtures
pytest_plugins = ["report_fixtures"]
