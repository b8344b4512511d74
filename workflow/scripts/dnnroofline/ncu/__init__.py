"""Nsight Compute: capture, metrics, the CSV parser, self-test, per-kernel rooflines."""
