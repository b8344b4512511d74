"""Whole applications on top of the package, run from scripts/: the GPU lease
(``scripts/gpu_lease.py``) and the GPU wheel check (``scripts/gpu_check.py``)."""
