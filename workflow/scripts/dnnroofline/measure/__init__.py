"""Measurement: the training driver, DDP, ceilings, traces, perf, machine facts."""
