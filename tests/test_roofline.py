"""Roofline math: hand-computed values, input validation, ceilings selection, properties."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline

# ----------------------------------------------------------------------------- by hand


def test_roof_memory_side_ridge_and_compute_side():
    # peak 100 FLOP/s, 10 B/s: ridge at 10 FLOP/byte
    assert roofline.ridge_ai(100.0, 10.0) == 10.0
    assert roofline.roof(2.0, 100.0, 10.0) == 20.0
    assert roofline.roof(10.0, 100.0, 10.0) == 100.0
    assert roofline.roof(50.0, 100.0, 10.0) == 100.0


def test_bound_switches_at_ridge():
    assert roofline.bound(9.99, 100.0, 10.0) == "memory"
    assert roofline.bound(10.0, 100.0, 10.0) == "compute"
    assert roofline.bound(50.0, 100.0, 10.0) == "compute"


def test_attained_ai_efficiency():
    assert roofline.attained_flops(6e9, 0.5) == 1.2e10
    assert roofline.arithmetic_intensity(6e9, 2e9) == 3.0
    assert roofline.efficiency(50.0, 200.0) == 0.25


def test_above_roof_tolerance():
    assert roofline.is_above_roof(100.001, 100.0)
    assert not roofline.is_above_roof(100.0, 100.0)
    assert not roofline.is_above_roof(100.0 * (1 + 1e-12), 100.0)  # round-off only
    assert roofline.is_above_roof(101.0, 100.0, rel_tol=0.005)
    assert not roofline.is_above_roof(100.4, 100.0, rel_tol=0.005)


def test_evaluate_point_by_hand():
    # AI = 4e9 / 1e9 = 4; attained = 4e9 / 0.1 = 4e10; ridge = 1e11 / 2e10 = 5
    p = roofline.evaluate_point(4e9, 1e9, 0.1, 1e11, 2e10)
    assert p.ai == 4.0
    assert p.attained_flops == pytest.approx(4e10, rel=1e-15)
    assert p.ridge_ai == 5.0
    assert p.roof_flops == 8e10  # 4 * 2e10, below the 1e11 peak
    assert p.efficiency == pytest.approx(0.5, rel=1e-15)
    assert p.bound == "memory"
    assert p.above_roof is False


def test_point_above_roof_is_flagged_not_clipped():
    # attained 4e9 / 0.01 = 4e11 against a roof of 1e11 (compute side: AI 40 > ridge 5)
    p = roofline.evaluate_point(4e9, 1e8, 0.01, 1e11, 2e10)
    assert p.bound == "compute"
    assert p.roof_flops == 1e11
    assert p.above_roof is True
    assert p.efficiency == pytest.approx(4.0)  # kept, not clipped to 1


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, None, "x", True])
def test_invalid_inputs_name_quantity_and_value(bad):
    with pytest.raises(InputError, match=r"memory roof.*" + re.escape(repr(bad))):
        roofline.roof(1.0, 100.0, bad)
    with pytest.raises(InputError, match="median step time"):
        roofline.attained_flops(1.0, bad)
    with pytest.raises(InputError, match="arithmetic intensity"):
        roofline.roof(bad, 100.0, 10.0)


def test_check_positive_accepts_ints_and_numeric_strings():
    assert roofline.check_positive("x", 3) == 3.0
    assert roofline.check_positive("x", "2.5") == 2.5


# ----------------------------------------------------------------------------- ceilings


def _roof(kind, precision, source, value):
    return {"kind": kind, "precision": precision, "source": source, "value": value}


CEIL = {
    "env": "gpu",
    "roofs": [
        _roof("compute", "fp32", "datasheet", 67e12),
        _roof("compute", "fp32", "measured", 50e12),
        _roof("compute", "fp32", "measured", 52e12),
        _roof("compute", "tf32", "datasheet", 495e12),
        _roof("compute", "fp16", "datasheet", 989e12),
        _roof("memory", None, "datasheet", 3.35e12),
        _roof("memory", None, "measured", 3.0e12),
    ],
}


def test_select_roof_prefers_measured_and_takes_the_highest():
    roofs = roofline.parse_roofs(CEIL)
    fp32 = roofline.select_roof(roofs, "compute", "fp32")
    assert (fp32.source, fp32.value) == ("measured", 52e12)
    mem = roofline.select_roof(roofs, "memory")
    assert (mem.source, mem.value) == ("measured", 3.0e12)


def test_select_roof_falls_back_to_datasheet_and_maps_amp_to_fp16_only():
    roofs = roofline.parse_roofs(CEIL)
    tf32 = roofline.select_roof(roofs, "compute", "tf32")
    assert (tf32.source, tf32.value) == ("datasheet", 495e12)
    amp = roofline.select_roof(roofs, "compute", "amp")
    assert amp.value == 989e12
    assert roofline.select_roof(roofs, "compute", "bf16") is None  # never falls back to fp32


def test_select_roof_needs_precision_for_compute():
    with pytest.raises(InputError, match="precision"):
        roofline.select_roof(roofline.parse_roofs(CEIL), "compute")


@pytest.mark.parametrize(
    ("entry", "pattern"),
    [
        (_roof("disk", None, "measured", 1.0), r"roofs\[0\]\.kind"),
        (_roof("memory", None, "guess", 1.0), r"roofs\[0\]\.source"),
        (_roof("compute", None, "measured", 1.0), r"roofs\[0\]\.precision"),
        (_roof("memory", None, "measured", -5.0), r"roofs\[0\]\.value.*-5\.0"),
        (_roof("memory", None, "measured", None), r"roofs\[0\]\.value.*None"),
    ],
)
def test_parse_roofs_rejects_bad_entries_with_location(entry, pattern):
    with pytest.raises(InputError, match=r"results/x/ceilings\.json: " + pattern):
        roofline.parse_roofs({"roofs": [entry]}, "results/x/ceilings.json")


def test_parse_roofs_needs_a_list():
    with pytest.raises(InputError, match="'roofs' list"):
        roofline.parse_roofs({"env": "x"}, "f.json")


# ----------------------------------------------------------------------------- properties

positive = st.floats(min_value=-6.0, max_value=6.0).map(lambda e: 10.0**e)
peaks = st.floats(min_value=6.0, max_value=18.0).map(lambda e: 10.0**e)
bandwidths = st.floats(min_value=6.0, max_value=14.0).map(lambda e: 10.0**e)


@given(a=positive, b=positive, peak=peaks, bw=bandwidths)
def test_roof_is_monotone_in_ai(a, b, peak, bw):
    lo, hi = sorted((a, b))
    assert roofline.roof(lo, peak, bw) <= roofline.roof(hi, peak, bw)


@given(ai=positive, peak=peaks, bw=bandwidths)
def test_roof_never_exceeds_either_ceiling(ai, peak, bw):
    r = roofline.roof(ai, peak, bw)
    assert r <= peak
    assert r <= ai * bw
    assert r in (peak, ai * bw)


@given(ai=positive, peak=peaks, bw=bandwidths)
def test_bound_agrees_with_ridge(ai, peak, bw):
    expected = "memory" if ai < peak / bw else "compute"
    assert roofline.bound(ai, peak, bw) == expected


@given(
    flop=st.floats(min_value=3.0, max_value=16.0).map(lambda e: 10.0**e),
    nbytes=st.floats(min_value=3.0, max_value=14.0).map(lambda e: 10.0**e),
    peak=peaks,
    bw=bandwidths,
    frac=st.floats(min_value=1e-6, max_value=1.0),
)
def test_consistent_inputs_never_flag_above_roof(flop, nbytes, peak, bw, frac):
    # a step time that attains at most `frac` of the roof at this AI
    ai = flop / nbytes
    step = flop / (frac * roofline.roof(ai, peak, bw))
    p = roofline.evaluate_point(flop, nbytes, step, peak, bw)
    assert not p.above_roof
    assert p.efficiency <= 1.0 + 1e-9
    assert p.efficiency == pytest.approx(frac, rel=1e-9)
