"""The complexity section (dnnroofline.report.complexity)."""

from __future__ import annotations

from report_fixtures import table_row


def test_complexity_table(sections):
    html = sections["complexity.html"]
    row = table_row(html, "mobilenet_v2", "8")
    assert "3.50 M" in row  # params
    assert "conv_depthwise 30%" in row
    assert "4.00 FLOP/B" in row  # analytic AI = 8 GFLOP / 2 GB
    assert "2.00 GB" in row  # min DRAM bytes, decimal
    assert "2.00</td>" in row  # bwd/fwd ratio
    assert "not MACs" in html
