"""Analytic models: FLOP and byte counts, complexity, the roofline's arithmetic."""
