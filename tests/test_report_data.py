"""dnnroofline.report.data and .format: the ledgers prepared, run ids, throughput, roofs, units."""

from __future__ import annotations

import pandas as pd
import pytest
from report_fixtures import _point, _row

from dnnroofline.formatting import fmt_bytes, fmt_flops_rate, fmt_pct, fmt_time
from dnnroofline.report import data
from dnnroofline.report.data import (
    pick_roof,
    prepare_points,
    throughput_table,
    valid_roofs,
)


def test_repeat_cv_flags_noise_between_runs():
    m = pd.DataFrame([_row("local", "resnet50", 8, 1, 20.0), _row("local", "resnet50", 8, 2, 30.0)])
    tp = throughput_table(m)
    assert tp.loc[0, "repeat_cv"] > 0.05
    assert bool(tp.loc[0, "noisy"]) is True


def test_images_per_s_is_at_the_median_step_as_in_roofline_points():
    # steps of 0.1 s and 0.3 s at batch 32: 32 / 0.2 s = 160 images/s, the number
    # roofline_points.csv gives; the median of the two rates (320, 106.7) would be 213.3
    rows = [_row("local", "resnet18", 32, 1, 320.0), _row("local", "resnet18", 32, 2, 32 / 0.3)]
    tp = throughput_table(pd.DataFrame(rows))
    assert tp.loc[0, "step_median"] == pytest.approx(0.2)
    assert tp.loc[0, "ips_median"] == pytest.approx(160.0)
    assert (tp.loc[0, "ips_min"], tp.loc[0, "ips_max"]) == pytest.approx((32 / 0.3, 320.0))
    ddp = [{**r, "nproc": 2, "images_per_s": 2 * r["images_per_s"]} for r in rows]
    assert throughput_table(pd.DataFrame(ddp)).loc[0, "ips_median"] == pytest.approx(320.0)


def test_above_roof_detected_even_when_column_says_false():
    pts = pd.DataFrame([_point("local", "resnet50", 8, 40.0, 150e9, above=False)])
    prepared = prepare_points(pts)
    assert bool(prepared.loc[0, "above"]) is True
    pts = pd.DataFrame([_point("local", "resnet50", 8, 40.0, 50e9, above="False")])
    assert bool(prepare_points(pts).loc[0, "above"]) is False
    # the stage's own flag (as read back from CSV) is never dropped
    pts = pd.DataFrame([_point("local", "resnet50", 8, 40.0, 100e9, above="True")])
    assert bool(prepare_points(pts).loc[0, "above"]) is True


def test_points_without_ok_runs_are_dropped():
    pts = pd.DataFrame(
        [
            _point("local", "resnet50", 8, 40.0, 50e9),
            _point("local", "resnet50", 16, 40.0, 50e9, runs_ok=0),
        ]
    )
    assert list(prepare_points(pts)["batch_size"]) == [8]


def test_roof_selection_is_the_roofline_modules():
    roofs = valid_roofs(
        {
            "roofs": [
                {"kind": "compute", "precision": "fp16", "source": "datasheet", "value": 8e12},
                {"kind": "compute", "precision": "fp32", "source": "measured", "value": 1e12},
                {"kind": "compute", "precision": "fp32", "source": "bogus", "value": 9e12},
                {"kind": "memory", "precision": None, "source": "measured", "value": 1e11},
            ]
        }
    )
    assert len(roofs) == 3  # the invalid entry is skipped, not fatal
    assert pick_roof(roofs, "compute", "amp").value == 8e12  # amp is fp16 autocast
    assert pick_roof(roofs, "compute", "tf32") is None  # never an fp32 peak for tf32
    assert pick_roof(roofs, "compute", "fp32", sources=("datasheet",)) is None
    assert not hasattr(data, "PRECISION_ALIASES")


def test_formatting_units():
    assert fmt_bytes(1_500_000) == "1.50 MB"  # decimal, not 1024
    assert fmt_bytes(999) == "999 B"
    assert fmt_time(0.0123) == "12.3 ms"
    assert fmt_time(0.0004) == "400 µs"
    assert fmt_flops_rate(1.234e12) == "1,234 GFLOP/s"  # integers keep all digits
    assert fmt_pct(0.625) == "62.5%"
