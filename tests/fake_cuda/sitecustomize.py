"""A CUDA machine without a GPU, for the workflow's dry runs.

Python imports ``sitecustomize`` at start-up from the first folder on its path that has
one; tests put this folder on ``PYTHONPATH`` (``workflow_helpers.FAKE_CUDA``) so that the
Snakemake process they start plans the DAG of a machine whose NVIDIA driver is loaded:
``dnnroofline.study.config.device_from_drivers`` answers ``cuda``. Nothing is measured in a dry
run, and the production code carries no test switch.
"""

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workflow" / "scripts"))
config = importlib.import_module("dnnroofline.study.config")
config.device_from_drivers = lambda: "cuda"
