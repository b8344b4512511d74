"""Summary statistics of repeated timings.

Percentiles use linear interpolation between order statistics (numpy's default),
so p5/p95 of 10 samples are well defined and reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def summarize(values: Sequence[float]) -> dict:
    """Median, mean, p5, p95, min, max, std (sample), cv and all values.

    ``cv`` is the coefficient of variation, std / mean: the noise measure the
    report flags above 5%.
    """
    if len(values) == 0:
        raise ValueError("summarize() needs at least one value")
    arr = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"non-finite timing values: {list(values)!r}")
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return {
        "median": float(np.median(arr)),
        "mean": mean,
        "p5": float(np.percentile(arr, 5)),
        "p95": float(np.percentile(arr, 95)),
        "min": float(arr.min()),
        "max": float(arr.max()),
        "std": std,
        "cv": std / mean if mean > 0 else math.nan,
        "all": [float(v) for v in arr],
    }
