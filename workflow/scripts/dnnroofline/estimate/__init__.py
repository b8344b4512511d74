"""Estimates known before anything runs: the op recorder and its rules, FLOP and byte
counts, complexity, the traffic model, op classes, and the roofline's arithmetic."""
