"""Static plots: files written atomically, valid PNG/SVG, artists findable by gid."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib.image as mpimg
import pytest
from plot_geometry import drawn_figure, label_clashes

import plot_roofline as plot_roofline_cli
from dnnroofline.aggregate.metrics import metrics_frame
from dnnroofline.aggregate.points import roofline_points_frame
from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.plots import roofline as plots
from dnnroofline.plots.figure import ABOVE_ROOF_LABEL, AXIS_X, AXIS_Y
from dnnroofline.plots.roof_labels import (
    LABEL_HEIGHT_PT,
    Box,
    LabelGaps,
    Marker,
    Obstacle,
    place_labels,
    place_point_labels,
    point_label_box,
    right_edge_clear_of,
)
from dnnroofline.plots.roofline import AI_RANGE_LABEL, plot_roofline
from dnnroofline.plots.throughput import plot_throughput

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "workflow" / "scripts"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_run(env, model, precision, batch, n, median=0.1, status="ok"):
    ok = status == "ok"
    return {
        "status": status,
        "message": None if ok else "CUDA out of memory",
        "run_id": f"{env}_{model}_{precision}_bs{batch}_run{n}",
        "env": env,
        "config": {"arch": model, "batch_size": batch, "precision": precision, "device": "cpu"},
        "start_time": 0.0,
        "end_time": 1.0,
        "step_time_s": {"median": median, "p5": median, "p95": median, "cv": 0.0} if ok else None,
        "images_per_s": batch / median if ok else None,
    }


def roof(kind, precision, source, value):
    return {"kind": kind, "precision": precision, "source": source, "value": value}


CEILINGS = {
    "local": {
        "env": "local",
        "roofs": [
            roof("compute", "fp32", "measured", 2e11),
            roof("compute", "fp32", "datasheet", 3e11),
            roof("compute", "bf16", "datasheet", 6e11),
            roof("memory", None, "measured", 1e10),
            roof("memory", None, "datasheet", 2e10),
        ],
    },
    "gcp_l4": {
        "env": "gcp_l4",
        "roofs": [
            roof("compute", "fp32", "measured", 2.5e13),
            roof("compute", "amp", "datasheet", 1.21e14),
            roof("memory", None, "measured", 2.7e11),
        ],
    },
}


def complexity(model, batch):
    per_img = {"resnet18": 5.5e9, "mobilenet_v2": 1.8e9}[model]
    return {
        "arch": model,
        "batch_size": batch,
        "flops": {"train_step": per_img * batch},
        "min_dram_bytes_per_step": 4e7 * batch + 2e8,
        "by_precision": {},
    }


def build(runs, ceilings=None):
    metrics = metrics_frame(runs)
    keys = {(r["config"]["arch"], r["config"]["batch_size"]) for r in runs}
    comp = {k: complexity(*k) for k in keys}
    return metrics, roofline_points_frame(metrics, comp, ceilings or CEILINGS)


LOCAL_RUNS = [
    make_run(
        "local",
        model,
        "fp32",
        batch,
        n,
        median=batch * {"resnet18": 0.05, "mobilenet_v2": 0.02}[model] * (1 + 0.03 * n),
    )
    for model in ("resnet18", "mobilenet_v2")
    for batch in (8, 16, 32)
    for n in (1, 2, 3)
] + [
    # bs64 of resnet18: every repeat ran out of memory -> a metrics row, never a point
    make_run("local", "resnet18", "fp32", 64, n, status="oom")
    for n in (1, 2)
]


def svg_ids(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    return [el.get("id") for el in root.iter() if el.get("id")]


def svg_element(path: Path, gid: str) -> ET.Element:
    root = ET.parse(path).getroot()
    (el,) = [e for e in root.iter() if e.get("id") == gid]
    return el


def assert_valid_png(path: Path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 300


# ----------------------------------------------------------------------------- roofline


def test_roofline_single_env_files_points_and_roofs(tmp_path):
    _, pts = build(LOCAL_RUNS)
    png, svg = tmp_path / "plots" / "roofline_local.png", tmp_path / "plots" / "roofline_local.svg"
    info = plot_roofline(pts, {"local": CEILINGS["local"]}, png, svg, "Roofline: local")
    assert_valid_png(png)
    ids = svg_ids(svg)
    point_ids = [i for i in ids if i.startswith("point-")]
    assert len(point_ids) == 6 == info["points"]  # the all-OOM bs64 group is not a point
    assert "point-local-resnet18-fp32-bs16" in point_ids
    assert "point-local-resnet18-fp32-bs64" not in ids
    # every compute roof of the env, measured and datasheet, with its ridge
    for gid in [
        "roof-local-compute-fp32-measured",
        "roof-local-compute-fp32-datasheet",
        "roof-local-compute-bf16-datasheet",
        "roof-local-memory-measured",
        "roof-local-memory-datasheet",
        "ridge-local-fp32-measured",
        "ridge-local-bf16-datasheet",
    ]:
        assert gid in ids
    assert not [i for i in ids if i.startswith("above-roof-")]
    text = svg.read_text()
    assert AXIS_X in text and AXIS_Y in text
    assert ABOVE_ROOF_LABEL not in text
    # the legend's sections, in order; one env: no marker-fill section
    titles = ["Model", "Precision (colour)", "Roofs"]
    assert all(t in text for t in titles), titles
    assert [text.index(t) for t in titles] == sorted(text.index(t) for t in titles)
    assert "Env (marker fill)" not in text
    assert "bs32" in text  # batch annotations are text
    assert "ridge 20" in text  # 2e11 / 1e10
    assert sorted(p.name for p in png.parent.iterdir()) == [
        "roofline_local.png",
        "roofline_local.svg",
    ]


def _stroke_dashed(svg: Path, gid: str) -> bool:
    styles = [el.get("style", "") for el in svg_element(svg, gid).iter()]
    assert any("stroke:" in s for s in styles), f"{gid} has no stroked path"
    return any("stroke-dasharray" in s for s in styles)


def test_measured_roofs_solid_datasheet_roofs_dashed(tmp_path):
    _, pts = build(LOCAL_RUNS)
    svg = tmp_path / "r.svg"
    plot_roofline(pts, {"local": CEILINGS["local"]}, None, svg, "t")
    assert not _stroke_dashed(svg, "roof-local-compute-fp32-measured")
    assert not _stroke_dashed(svg, "roof-local-memory-measured")
    assert _stroke_dashed(svg, "roof-local-compute-fp32-datasheet")
    assert _stroke_dashed(svg, "roof-local-memory-datasheet")


def test_point_above_roof_is_drawn_and_flagged(tmp_path):
    low = {
        "local": {
            "env": "local",
            "roofs": [
                roof("compute", "fp32", "measured", 1e11),
                roof("memory", None, "measured", 1e10),
            ],
        }
    }
    runs = [make_run("local", "resnet18", "fp32", 8, 1, median=0.1)]  # 4.4e10 FLOP in 0.1 s
    _, pts = build(runs, low)
    assert bool(pts.loc[0, "above_roof"])
    svg = tmp_path / "r.svg"
    info = plot_roofline(pts, low, tmp_path / "r.png", svg, "t")
    ids = svg_ids(svg)
    assert "point-local-resnet18-fp32-bs8" in ids
    assert "above-roof-local-resnet18-fp32-bs8" in ids
    assert info["above_roof"] == 1
    assert ABOVE_ROOF_LABEL in svg.read_text()
    # the flag ring is red
    styles = " ".join(
        el.get("style", "") for el in svg_element(svg, "above-roof-local-resnet18-fp32-bs8").iter()
    )
    assert "#ff0000" in styles


def test_combined_plot_has_every_env(tmp_path):
    l4_runs = [
        make_run("gcp_l4", "resnet18", p, b, 1, median=0.004 * b)
        for p in ("fp32", "amp")
        for b in (8, 16)
    ]
    _, pts = build(LOCAL_RUNS + l4_runs)
    png, svg = tmp_path / "roofline_all.png", tmp_path / "roofline_all.svg"
    info = plot_roofline(pts, CEILINGS, png, svg, "Roofline: all envs")
    assert_valid_png(png)
    ids = svg_ids(svg)
    assert len([i for i in ids if i.startswith("point-")]) == 10 == info["points"]
    assert "point-gcp_l4-resnet18-amp-bs16" in ids
    assert "point-local-mobilenet_v2-fp32-bs8" in ids
    assert "roof-gcp_l4-compute-amp-datasheet" in ids
    assert "roof-gcp_l4-memory-measured" in ids
    assert "roof-local-compute-fp32-measured" in ids
    # combined view draws only precisions with points: no local bf16 roof
    assert "roof-local-compute-bf16-datasheet" not in ids
    text = svg.read_text()
    assert "gcp_l4 amp datasheet" in text  # roof labels name their env
    assert "Env (marker fill)" in text  # the combined view's legend tells the envs apart


def assert_legible(lines, centres, height=LABEL_HEIGHT_PT):
    """No two labels overlap, and no label crosses a line."""
    for i, c in enumerate(centres):
        assert all(abs(c - y) >= height / 2 for y in lines), (c, lines)
        assert all(abs(c - o) >= height for o in centres[i + 1 :]), centres


def test_place_labels_next_to_a_lone_line_on_its_preferred_side():
    above, below = place_labels([100.0], [True]), place_labels([100.0], [False])
    assert 100 < above[0] <= 100 + LABEL_HEIGHT_PT
    assert 100 - LABEL_HEIGHT_PT <= below[0] < 100


@pytest.mark.parametrize(
    "lines",
    [
        [300.0, 297.7, 276.0, 276.0],  # one machine measured twice: close roofs, a shared datasheet
        [50.0, 49.0, 48.0, 47.0, 46.0],  # five envs' roofs within 4 pt
        [10.0, 22.0],  # far apart: each label stays by its line
    ],
)
def test_place_labels_keeps_close_roofs_legible(lines):
    centres = place_labels(lines, [False, True] * (len(lines) // 2) + [True] * (len(lines) % 2))
    distinct = sorted(set(lines))
    assert_legible(distinct, [c for i, c in enumerate(centres) if lines[i] not in lines[:i]])
    # a stack reads like its roofs: the higher roof's label is the higher label
    assert sorted(range(len(lines)), key=lambda i: -centres[i]) == sorted(
        range(len(lines)), key=lambda i: (-lines[i], i)
    )
    if lines == [10.0, 22.0]:
        assert all(abs(c - y) <= LABEL_HEIGHT_PT for c, y in zip(centres, lines, strict=True))


LABEL = (160.0, 100.0, 108.0)  # a roof label 160 pt wide, its box 100..108 pt high


def test_right_edge_moves_a_decade_at_a_time_until_the_roof_labels_clear_the_points():
    # AI 2000 on 1..1e4 over 700 pt sits at 578 pt, under a label reaching from 537 pt
    under = Obstacle(2000, 2000, 3.5, 27.0, 96.0, 112.0)
    assert right_edge_clear_of(1, 1e4, 700, [LABEL], [under]) == 1e5
    # the same AI far below the label, or with no label at all: the edge stays
    below = Obstacle(2000, 2000, 3.5, 27.0, 20.0, 36.0)
    assert right_edge_clear_of(1, 1e4, 700, [LABEL], [below]) == 1e4
    assert right_edge_clear_of(1, 1e4, 700, [], [under]) == 1e4
    # an AI range bar reaching under the label counts as well as a point
    bar = Obstacle(10, 3000, 3.5, 3.5, 101.0, 107.0)
    assert right_edge_clear_of(1, 1e4, 700, [LABEL], [bar]) > 1e4
    # none clears within max_decades: the edge that covers fewest points
    stuck = Obstacle(1e4, 1e4, 3.5, 27.0, 96.0, 112.0)
    assert right_edge_clear_of(1, 1e4, 700, [LABEL], [under, stuck], max_decades=1) == 1e5


GAPS = LabelGaps(x=3.5, y=5.0, height=7.5, radius_y=3.5)  # a batch label's place (pt)


def test_point_labels_keep_clear_of_markers_labels_and_roof_labels():
    # two batch sizes of one sweep, close together: both labelled, apart
    markers = [Marker(100.0, 100.0, 3.5, "bs8", 15.0), Marker(104.0, 103.0, 3.5, "bs16", 20.0)]
    spots = place_point_labels(markers, gaps=GAPS)
    boxes = [point_label_box(m, s, GAPS) for m, s in zip(markers, spots, strict=True)]
    assert not boxes[0].overlaps(boxes[1])
    for box in boxes:
        assert not any(
            box.overlaps(Box(m.x - m.radius, m.y - m.radius, m.x + m.radius, m.y + m.radius))
            for m in markers
        )
    # a lone point takes its preferred spot, unless a roof label is there
    lone = Marker(100.0, 100.0, 3.5, "bs8", 15.0)
    assert place_point_labels([lone], gaps=GAPS) == [("right", "above", 0)]
    roof_label = Box(90.0, 104.0, 300.0, 112.0)
    spot = place_point_labels([lone], [roof_label], gaps=GAPS)[0]
    assert not point_label_box(lone, spot, GAPS).overlaps(roof_label)
    # a large marker (a kernel with much of the step's time) pushes its label out
    big = Marker(100.0, 100.0, 12.0, "nvjet_hsh (40%)", 60.0)
    assert point_label_box(big, ("right", "above", 0), GAPS).x0 >= 100.0 + 12.0
    assert point_label_box(big, ("right", "below", 0), GAPS).y1 <= 100.0 - 12.0
    # a marker without a label is avoided, never labelled
    unlabelled = Marker(110.0, 108.0, 3.5)
    spots = place_point_labels([lone, unlabelled], gaps=GAPS)
    assert spots[1] is None and spots[0] != ("right", "above", 0)


def test_coincident_points_of_one_batch_share_their_label():
    # amp and bf16 at one batch often run alike: one "bs256" for the pair, not two overlaid
    markers = [Marker(100.0, 100.0, 3.5, "bs256", 20.0), Marker(100.5, 101.0, 3.5, "bs256", 20.0)]
    assert place_point_labels(markers, gaps=GAPS).count(None) == 1
    # another batch at the same spot keeps its own label
    markers[1] = Marker(100.5, 101.0, 3.5, "bs64", 15.0)
    assert None not in place_point_labels(markers, gaps=GAPS)


def test_roofline_widens_its_ai_axis_so_that_roof_labels_clear_a_high_ai_point(tmp_path):
    _, pts = build(LOCAL_RUNS)
    # one point at AI 5000, just under the fp32 measured roof (2e11), whose label is
    # right-aligned at the axis' right end just below the line
    pts.loc[pts.index[0], ["ai", "ai_low", "ai_high", "attained_flops"]] = [5e3, 5e3, 5e3, 1.9e11]
    default = plot_roofline(pts, CEILINGS, None, tmp_path / "a.svg", "t")["x_max"]
    pts.loc[pts.index[0], "attained_flops"] = 1e10  # the same AI, far below the labels
    assert plot_roofline(pts, CEILINGS, None, tmp_path / "b.svg", "t")["x_max"] == 1e5
    assert default >= 1e6


H100 = {
    "env": "h100",
    "roofs": [
        *(roof("compute", p, "datasheet", v) for p, v in (("fp32", 67e12), ("tf32", 495e12))),
        *(roof("compute", p, "datasheet", 989e12) for p in ("amp", "bf16")),
        *(roof("compute", p, "measured", v) for p, v in (("fp32", 51e12), ("tf32", 378e12))),
        *(roof("compute", p, "measured", v) for p, v in (("amp", 720e12), ("bf16", 760e12))),
        roof("memory", None, "datasheet", 3.35e12),
        roof("memory", None, "measured", 3.0e12),
    ],
}


def test_a_crowded_gpu_roofline_keeps_every_label_legible(monkeypatch):
    # An H100 study as issue 9 runs it: four precisions, amp and bf16 running alike
    # (their points coincide), fp32 and tf32 close, the largest batch under the roofs.
    # (AI, attained FLOP/s) per (model, precision, batch):
    layout = {
        ("resnet18", "fp32", 16): (95, 1.6e13),
        ("resnet18", "fp32", 32): (110, 1.8e13),
        ("resnet18", "tf32", 16): (95, 3.0e13),
        ("resnet18", "tf32", 32): (110, 3.4e13),
        ("resnet18", "amp", 16): (85, 5.0e13),
        ("resnet18", "amp", 32): (130, 7.4e13),
        ("resnet18", "bf16", 16): (85, 4.9e13),
        ("resnet18", "bf16", 32): (130, 7.2e13),
        ("mobilenet_v2", "fp32", 32): (18, 3.0e12),
        ("mobilenet_v2", "tf32", 32): (18, 3.3e12),
        ("mobilenet_v2", "amp", 32): (14, 4.5e12),
        ("mobilenet_v2", "bf16", 32): (14, 4.4e12),
        ("mobilenet_v2", "bf16", 64): (2500, 5.0e14),  # high AI, under the bf16 labels
    }
    runs = [make_run("h100", m, p, b, 1) for m, p, b in layout]
    _, pts = build(runs, {"h100": H100})
    for (m, p, b), (ai, flops) in layout.items():
        row = (pts["model"] == m) & (pts["precision"] == p) & (pts["batch_size"] == b)
        pts.loc[row, ["ai", "ai_low", "ai_high", "attained_flops"]] = [ai, ai, ai, flops]
    fig = drawn_figure(monkeypatch, plots, plot_roofline, pts, {"h100": H100}, None, None, "t")
    assert label_clashes(fig, r"point-.*") == []
    # amp and bf16 that coincide share their batch label
    assert [t.get_text() for t in fig.axes[0].texts].count("bs16") == 3


def test_two_envs_of_one_machine_share_a_roof_label(tmp_path):
    twin = {"env": "local_compiled", "roofs": CEILINGS["local"]["roofs"][1:]}
    twin["roofs"] = [roof("compute", "fp32", "measured", 1.93e11), *twin["roofs"]]
    ceilings = {"local": CEILINGS["local"], "local_compiled": twin}
    runs = [make_run(e, "resnet18", "fp32", 8, 1, median=0.4) for e in ceilings]
    _, pts = build(runs, ceilings)
    svg = tmp_path / "all.svg"
    plot_roofline(pts, ceilings, None, svg, "t")
    text = svg.read_text()
    ids = svg_ids(svg)
    # every env keeps its own roofs ...
    assert "roof-local-compute-fp32-datasheet" in ids
    assert "roof-local_compiled-compute-fp32-datasheet" in ids
    # ... a roof they share is labelled once, naming both; their close measured roofs apart
    assert text.count("local, local_compiled fp32 datasheet: 300 GFLOP/s") == 1
    assert "local, local_compiled memory measured: 10 GB/s" in text
    assert "local fp32 measured: 200 GFLOP/s" in text
    assert "local_compiled fp32 measured: 193 GFLOP/s" in text


def test_points_without_ceilings_are_refused(tmp_path):
    _, pts = build(LOCAL_RUNS)
    with pytest.raises(InputError, match=r"env\(s\) \['local'\]"):
        plot_roofline(
            pts, {"gcp_l4": CEILINGS["gcp_l4"]}, tmp_path / "a.png", tmp_path / "a.svg", "t"
        )
    assert not (tmp_path / "a.png").exists()


def test_point_precision_without_peak_is_refused(tmp_path):
    _, pts = build(LOCAL_RUNS)
    only_bf16 = {
        "local": {
            "env": "local",
            "roofs": [
                roof("compute", "bf16", "measured", 1e12),
                roof("memory", None, "measured", 1e10),
            ],
        }
    }
    with pytest.raises(InputError, match="no compute peak for precision 'fp32'"):
        plot_roofline(pts, only_bf16, tmp_path / "a.png", tmp_path / "a.svg", "t")


def test_roofline_without_any_successful_run_still_renders(tmp_path):
    runs = [make_run("local", "resnet18", "fp32", 64, n, status="oom") for n in (1, 2)]
    _, pts = build(runs)
    png, svg = tmp_path / "r.png", tmp_path / "r.svg"
    info = plot_roofline(pts, {"local": CEILINGS["local"]}, png, svg, "t")
    assert info["points"] == 0
    assert_valid_png(png)
    assert not [i for i in svg_ids(svg) if i.startswith("point-")]
    assert "no successful runs to plot" in svg.read_text()


def test_svg_is_reproducible(tmp_path):
    _, pts = build(LOCAL_RUNS)
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    plot_roofline(pts, {"local": CEILINGS["local"]}, None, a, "t")
    plot_roofline(pts, {"local": CEILINGS["local"]}, None, b, "t")
    assert a.read_bytes() == b.read_bytes()


# ----------------------------------------------------------------------------- throughput


def test_throughput_lines_errorbars_and_failed_batches(tmp_path):
    l4_runs = [
        make_run("gcp_l4", "resnet18", "amp", b, n, median=0.004 * b * n)
        for b in (8, 16)
        for n in (1, 2)
    ]
    metrics, _ = build(LOCAL_RUNS + l4_runs)
    png, svg = tmp_path / "throughput.png", tmp_path / "throughput.svg"
    info = plot_throughput(metrics, png, svg)
    assert_valid_png(png)
    ids = svg_ids(svg)
    lines = sorted(i for i in ids if i.startswith("throughput-"))
    assert lines == [
        "throughput-gcp_l4-resnet18-amp",
        "throughput-local-mobilenet_v2-fp32",
        "throughput-local-resnet18-fp32",
    ]
    assert info == {"lines": 3, "failed": 1}
    assert "failed-local-resnet18-fp32-bs64" in ids
    text = svg.read_text()
    assert "Throughput (images/s)" in text and "Batch size" in text
    # the gcp_l4 curve has 2 points, each with an error bar (min..max over 2 repeats)
    line = svg_element(svg, "throughput-gcp_l4-resnet18-amp")
    assert len(line.findall(".//{http://www.w3.org/2000/svg}use")) == 2  # one marker per batch
    bars = svg_element(svg, "errorbar-gcp_l4-resnet18-amp")
    assert len(bars.findall("{http://www.w3.org/2000/svg}path")) == 2  # one bar per batch


def test_throughput_of_no_runs_renders(tmp_path):
    metrics = metrics_frame([])
    info = plot_throughput(metrics, tmp_path / "t.png", tmp_path / "t.svg")
    assert info == {"lines": 0, "failed": 0}
    assert_valid_png(tmp_path / "t.png")


# ----------------------------------------------------------------------------- CLIs


def run_script(name, *args):
    return subprocess.run(
        [sys.executable, str(SCRIPTS / name), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_plot_clis(tmp_path, capsys):
    metrics, pts = build(LOCAL_RUNS)
    metrics.to_csv(tmp_path / "metrics.csv", index=False)
    pts.to_csv(tmp_path / "points.csv", index=False)
    ceil = []
    for env, doc in CEILINGS.items():
        p = tmp_path / env / "ceilings.json"
        p.parent.mkdir()
        p.write_text(json.dumps(doc))
        ceil.append(p)
    out = tmp_path / "plots"
    res = run_script(
        "plot_roofline.py", "--points", tmp_path / "points.csv", "--ceilings", *ceil,
        "--env", "local", "--png", out / "roofline_local.png", "--svg", out / "roofline_local.svg",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert_valid_png(out / "roofline_local.png")
    ids = svg_ids(out / "roofline_local.svg")
    assert len([i for i in ids if i.startswith("point-")]) == 6
    assert not [i for i in ids if i.startswith("roof-gcp_l4")]

    # refusals, in-process (the entry point's main) to keep the suite fast
    rc = plot_roofline_cli.main(
        ["--points", str(tmp_path / "points.csv"), "--ceilings", *map(str, ceil),
         "--env", "nowhere", "--png", str(out / "x.png"), "--svg", str(out / "x.svg")]
    )  # fmt: skip
    assert rc == 2
    assert "--env 'nowhere'" in capsys.readouterr().err
    assert not (out / "x.png").exists()

    res = run_script(
        "plot_throughput.py", "--metrics", tmp_path / "metrics.csv",
        "--png", out / "throughput.png", "--svg", out / "throughput.svg",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert_valid_png(out / "throughput.png")
    assert len([i for i in svg_ids(out / "throughput.svg") if i.startswith("throughput-")]) == 2


def test_ai_range_is_a_bar_through_the_point(tmp_path):
    runs = [make_run("local", "resnet18", "fp32", 8, 1, median=0.5)]
    _, pts = build(runs)
    pts.loc[0, ["ai_low", "ai_high"]] = [pts.loc[0, "ai"] / 3, pts.loc[0, "ai"]]
    svg = tmp_path / "r.svg"
    info = plot_roofline(pts, CEILINGS, tmp_path / "r.png", svg, "t")
    assert info["ai_ranges"] == 1
    bar = svg_element(svg, "ai-range-local-resnet18-fp32-bs8")
    path = next(e for e in bar.iter() if e.tag.endswith("path") and e.get("d"))
    xy = [tuple(map(float, p.split())) for p in path.get("d")[1:].replace("L", "|").split("|")]
    (x0, y0), (x1, y1) = xy[0], xy[-1]
    assert y0 == pytest.approx(y1) and x1 > x0  # horizontal, left to right
    assert AI_RANGE_LABEL in svg.read_text()
    # without a range (NaN): no bar, no legend entry
    pts.loc[0, ["ai_low", "ai_high"]] = [float("nan")] * 2
    info = plot_roofline(pts, CEILINGS, None, tmp_path / "n.svg", "t")
    assert info["ai_ranges"] == 0 and AI_RANGE_LABEL not in (tmp_path / "n.svg").read_text()


# --------------------------------------------------------------------------- roof selection
# model.roofline.env_roofs / roofs_to_draw: the one home of which roofs a roofline draws,
# used by the static, interactive and ncu (kernel, hierarchical) plots alike.

H100_CEILINGS = ROOT / "examples" / "h100" / "results" / "h100" / "ceilings.json"


def test_env_roofs_keeps_the_highest_roof_of_each_source_with_its_note():
    ceil = json.loads(H100_CEILINGS.read_text())
    roofs = roofline.env_roofs(ceil, str(H100_CEILINGS), "h100")
    # the H100 has three measured bandwidths (triad, scale, copy): the highest is drawn
    measured = [r for r in ceil["roofs"] if r["kind"] == "memory" and r["source"] == "measured"]
    best = max(measured, key=lambda r: r["value"])
    assert len(measured) == 3
    assert roofs.memory["measured"].value == best["value"]
    assert roofs.memory["measured"].note == best["method"]
    assert set(roofs.compute) == {
        (r["precision"], r["source"]) for r in ceil["roofs"] if r["kind"] == "compute"
    }
    with pytest.raises(InputError, match=r"c\.json: env 'x' has no memory-bandwidth \(DRAM\)"):
        roofline.env_roofs({"roofs": [roof("compute", "fp32", "measured", 1e12)]}, "c.json", "x")


def test_roofs_to_draw_pairs_roofs_and_keeps_the_precisions_with_points():
    h100 = json.loads(H100_CEILINGS.read_text())
    alone = roofline.roofs_to_draw({"h100": h100}, {"h100": ["bf16"]})
    # one env: all its compute roofs, each meeting the bandwidth roof of its own source
    assert len(alone) == sum(r["kind"] == "compute" for r in h100["roofs"])
    assert all(p.memory.source == p.compute.source for p in alone)
    ceilings = {"h100": h100, **CEILINGS}
    pairs = roofline.roofs_to_draw(ceilings, {"h100": ["bf16"], "gcp_l4": ["amp"]})
    assert [(p.env, p.compute.precision, p.compute.source, p.memory.source) for p in pairs] == [
        ("gcp_l4", "amp", "datasheet", "measured"),  # no datasheet bandwidth: the measured one
        ("h100", "bf16", "datasheet", "datasheet"),
        ("h100", "bf16", "measured", "measured"),
        ("local", "bf16", "datasheet", "datasheet"),  # no points here: every roof
        ("local", "fp32", "datasheet", "datasheet"),
        ("local", "fp32", "measured", "measured"),
    ]
    h100_bf16 = pairs[2]
    assert h100_bf16.ridge == h100_bf16.compute.value / h100_bf16.memory.value
    where = {"local": "results/local/ceilings.json"}
    with pytest.raises(
        InputError,
        match=r"results/local/ceilings\.json: env 'local' has no compute peak for precision 'amp'",
    ):
        roofline.roofs_to_draw(ceilings, {"local": ["amp"]}, where)


def test_static_interactive_and_kernel_plots_draw_the_roofs_selected_once(tmp_path):
    from dnnroofline.ncu.kernels import level_roofs as kernel_plot_roofs
    from dnnroofline.plots.interactive import ROOFS, roofline_chart

    runs = [
        make_run("local", "resnet18", "fp32", 8, 1),
        make_run("gcp_l4", "resnet18", "amp", 8, 1),
    ]
    _, pts = build(runs)
    pairs = roofline.roofs_to_draw(CEILINGS, {"local": ["fp32"], "gcp_l4": ["amp"]})
    selected = {(p.env, p.compute.precision, p.compute.source) for p in pairs}
    svg = tmp_path / "r.svg"
    assert plot_roofline(pts, CEILINGS, None, svg, "t")["roofs"] == len(pairs)
    static = {
        (env, p, s) for _, env, _, p, s in (i.split("-") for i in svg_ids(svg) if "-compute-" in i)
    }
    assert static == selected
    spec = roofline_chart(pts, CEILINGS).to_dict()
    (roofs_layer,) = [lay for lay in spec["layer"] if lay.get("name") == ROOFS]
    rows = spec["datasets"][roofs_layer["data"]["name"]]
    assert {(env, p, s) for env, _, p, s in (r["roof_id"].split(" ") for r in rows)} == selected
    kernel = kernel_plot_roofs(CEILINGS["local"])
    assert kernel.compute == {
        k: r.value for k, r in roofline.env_roofs(CEILINGS["local"]).compute.items()
    }
    assert kernel.memory["dram"] == {
        s: r.value for s, r in roofline.env_roofs(CEILINGS["local"]).memory.items()
    }
