"""Plots: static and interactive rooflines, per-kernel and throughput plots."""
