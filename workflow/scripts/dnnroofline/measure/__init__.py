"""Measurement: the training driver, DDP, ceilings, traces and their busy share, perf,
machine facts."""
