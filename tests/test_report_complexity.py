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


def test_fvcore_s_forward_stands_beside_ours():
    from dnnroofline.report.complexity import complexity_section, facts

    doc = {
        "arch": "resnet18",
        "batch_size": 4,
        "params": 11_689_512,
        "flops": {
            "forward": 7.2e9,
            "backward": 14.4e9,
            "optimizer": 7e7,
            "train_step": 21.67e9,
            "by_layer_type": {"conv": {"forward": 7.2e9, "backward": 14.4e9}},
            "reference": {"fvcore_forward": 7.2e9, "method": "fvcore FlopCountAnalysis ..."},
        },
        "method": "FLOPs, not MACs ...",
    }
    row = facts([doc])["rows"][0]
    assert (row["reference"], row["vs_reference"]) == (7.2e9, "1.00")
    html = complexity_section([doc])
    assert "7.20 GFLOP</td><td class=num>1.00</td>" in html.replace("\n", "")
    assert "Reference: fvcore FlopCountAnalysis" in html
    # a complexity JSON written before the reference: a dash, not a failure
    old = {**doc, "flops": {k: v for k, v in doc["flops"].items() if k != "reference"}}
    assert facts([old])["rows"][0]["vs_reference"] == "–"
