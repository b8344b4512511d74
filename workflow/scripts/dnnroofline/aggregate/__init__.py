"""Aggregation: runs into metrics.csv, points into roofline_points.csv."""
