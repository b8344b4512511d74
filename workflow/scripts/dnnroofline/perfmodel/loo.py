"""``model_loo``: the model's step rescaled by what other model families ran on the env.

The model proper learns nothing from runs (``predictions.csv`` is made without them).
This is a separate, named method that may: for a measured point q of an env, it fits
two scale factors on the env's other measured points whose model family differs from
q's (leave one family out, :func:`dnnroofline.study.families.model_family`), one for the
model's predicted device time and one for its host time (dispatch and the step's fixed
costs), and predicts q's step with them:

* on a CPU, one thread runs both: step = a x device_s + b x host_s;
* on a GPU the host runs ahead of the device: step = max(a x device_s, b x host_s).

(a, b) minimise the squared log error against the measured steps (so a point twice too
slow weighs as one twice too fast), each within [0.1, 10]. Neither q's runs nor those
of its family enter its prediction. Pure arithmetic, no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from dnnroofline.study.families import model_family

NAME = "model_loo"
#: The range of each scale factor: the model's times are off by less than tenfold.
SCALE_BOUNDS = (0.1, 10.0)
#: Fewer points of other families than this fit two factors poorly: no prediction.
MIN_POINTS = 3
#: Starting points of the fit, in each factor: max() has kinks a single start can sit on.
_STARTS = (0.3, 1.0, 3.0)


@dataclass(frozen=True)
class LooPoint:
    """One measured point of an env as the fit sees it: the model's predicted device
    and host seconds (NaN where predictions.csv has none) and the measured step."""

    model: str
    device_s: float
    host_s: float
    measured_s: float

    @property
    def predicted(self) -> bool:
        """Whether the model's device and host times are there, a positive step in all."""
        times = (self.device_s, self.host_s)
        return all(math.isfinite(t) and t >= 0 for t in times) and sum(times) > 0

    @property
    def usable(self) -> bool:
        """Whether the fit can use it: predicted, and a positive step measured."""
        return self.predicted and math.isfinite(self.measured_s) and self.measured_s > 0


def scaled_step_s(a: float, b: float, device_s, host_s, gpu: bool):
    """The step of device and host times scaled by (a, b): their sum on a CPU, the
    longer on a GPU (numbers or numpy arrays)."""
    return np.maximum(a * device_s, b * host_s) if gpu else a * device_s + b * host_s


def fit_scales(
    device_s: Sequence[float], host_s: Sequence[float], measured_s: Sequence[float], gpu: bool
) -> tuple[float, float]:
    """(a, b) in :data:`SCALE_BOUNDS` minimising the squared log error of
    :func:`scaled_step_s` against ``measured_s`` (the best of a few starts)."""
    d, h, m = (np.asarray(x, dtype=float) for x in (device_s, host_s, measured_s))
    lo, hi = (math.log(x) for x in SCALE_BOUNDS)

    def residuals(log_ab: np.ndarray) -> np.ndarray:
        a, b = np.exp(log_ab)
        return np.log(scaled_step_s(a, b, d, h, gpu)) - np.log(m)

    best = None
    for start in itertools.product(_STARTS, repeat=2):
        fit = least_squares(residuals, np.log(start), bounds=([lo, lo], [hi, hi]))
        if best is None or fit.cost < best.cost:
            best = fit
    a, b = np.exp(best.x)
    return float(a), float(b)


def loo_step_s(target: tuple, points: Mapping[tuple, LooPoint], gpu: bool) -> tuple[float, str]:
    """(step seconds, note) of ``target`` (a key of ``points``, one env's measured
    points) from the factors fitted on the points of other families; NaN and the
    reason where there is no prediction."""
    own = points[target]
    if not own.predicted:
        return math.nan, (
            "no prediction: predictions.csv has no predicted_device_s and predicted_host_s "
            "for this point"
        )
    family = model_family(own.model)
    train = [p for p in points.values() if model_family(p.model) != family and p.usable]
    if len(train) < MIN_POINTS:
        return math.nan, (
            f"no prediction: {len(train)} measured point(s) of other families than {family} "
            f"on this env with predicted device and host times, {MIN_POINTS} needed"
        )
    a, b = fit_scales(
        [p.device_s for p in train], [p.host_s for p in train], [p.measured_s for p in train], gpu
    )
    families = sorted({model_family(p.model) for p in train})
    note = (
        f"fit on {len(train)} points of {', '.join(families)} (not {family}): "
        f"device x {a:.3g}, host x {b:.3g}"
    )
    return float(scaled_step_s(a, b, own.device_s, own.host_s, gpu)), note
