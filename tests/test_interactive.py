"""Interactive rooflines (dnnroofline.plots.interactive) and the plot_interactive.py CLI."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dnnroofline.errors import InputError
from dnnroofline.ncu.parse import parse_ncu_csv
from dnnroofline.plots import interactive as it
from dnnroofline.plots import interactive_labels as chart_labels
from dnnroofline.plots.interactive_data import kernel_frame

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "workflow" / "scripts" / "plot_interactive.py"
NCU_CSV = REPO / "tests" / "data" / "ncu" / "nnperf_resnet18_cifar10_bs64_L4_details_scaled.csv"
BUNDLE = "/* vega bundle stand-in */ window.vegaEmbed = function () {};"


def ceilings(env="local", peak=100e9, bw=10e9):
    return {
        "env": env,
        "device_name": "Test device",
        "roofs": [
            {"kind": "compute", "precision": "fp32", "source": "measured", "value": peak},
            {"kind": "compute", "precision": "fp32", "source": "datasheet", "value": 2 * peak},
            {"kind": "compute", "precision": "fp16", "source": "datasheet", "value": 8 * peak},
            {"kind": "memory", "precision": None, "source": "measured", "value": bw},
            {"kind": "memory", "precision": None, "source": "datasheet", "value": 2 * bw},
        ],
    }


def point(env, model, bs, ai, attained, precision="fp32", peak=100e9, bw=10e9, runs_ok=2):
    roof = min(peak, ai * bw)
    return {
        "env": env,
        "model": model,
        "precision": precision,
        "batch_size": bs,
        "runs_ok": runs_ok,
        "runs_failed": 0,
        "flop_per_step": ai * 1e9,
        "bytes_per_step": 1e9,
        "ai": ai,
        "ai_source": "analytic",
        "step_median_s": 0.5,
        "step_spread_s": 0.01,
        "images_per_s": 10.0 * bs,
        "images_per_s_min": 9.0 * bs,
        "images_per_s_max": 11.0 * bs,
        "attained_flops": attained,
        "roof_flops": roof,
        "roof_source": "measured",
        "peak_flops": peak,
        "peak_bandwidth": bw,
        "ridge_ai": peak / bw,
        "efficiency": attained / roof,
        "bound": "memory" if ai < peak / bw else "compute",
        "above_roof": attained > roof,
    }


@pytest.fixture
def points():
    return pd.DataFrame(
        [
            point("local", "resnet50", 8, 40.0, 62.5e9),
            point("local", "resnet50", 16, 42.0, 120e9),  # above its roof
            point("local", "mobilenet_v2", 8, 4.0, 10e9),
            point("local", "mobilenet_v2", 16, 4.5, 1e9, runs_ok=0),  # every run failed
        ]
    )


def layer(spec: dict, name: str) -> dict:
    return next(lay for lay in spec["layer"] if lay.get("name") == name)


def layer_rows(spec: dict, name: str) -> list[dict]:
    return spec["datasets"][layer(spec, name)["data"]["name"]]


def test_points_layer_has_one_row_per_plottable_point_and_full_tooltips(points):
    spec = it.roofline_chart(points, {"local": ceilings()}).to_dict()
    rows = layer_rows(spec, it.POINTS)
    assert len(rows) == 3  # the point without an ok run is not drawn
    by = {(r["model"], r["batch"]): r for r in rows}
    r = by[("resnet50", 8)]
    assert r["gflops"] == pytest.approx(62.5)
    assert r["efficiency"] == pytest.approx(0.625)
    assert r["bound"] == "compute" and r["env"] == "local" and r["precision"] == "fp32"
    assert by[("resnet50", 16)]["above_roof"] is True
    assert "above its roof" in by[("resnet50", 16)]["lever"]
    assert (
        "raise AI" in by[("mobilenet_v2", 8)]["lever"]
        or "overheads" in by[("mobilenet_v2", 8)]["lever"]
    )
    tips = {t["field"] for t in layer(spec, it.POINTS)["encoding"]["tooltip"]}
    for field in ("model", "precision", "batch", "ai", "gflops", "efficiency", "bound", "env"):
        assert field in tips
    # the above-roof point gets its red ring
    assert len(layer_rows(spec, "above_roof")) == 1


def test_roofs_per_precision_measured_and_datasheet(points):
    spec = it.roofline_chart(points, {"local": ceilings()}).to_dict()
    roofs = layer_rows(spec, it.ROOFS)
    ids = {r["roof_id"] for r in roofs}
    # one env alone: every compute roof it has, each from its ridge to the right edge
    assert ids == {
        "local compute fp32 measured",
        "local compute fp32 datasheet",
        "local compute fp16 datasheet",
    }
    fp32m = [r for r in roofs if r["roof_id"] == "local compute fp32 measured"]
    assert min(r["x"] for r in fp32m) == pytest.approx(10.0)  # ridge = 100e9 / 10e9
    assert {r["y"] for r in fp32m} == {100e9}
    mem = layer_rows(spec, "memory_roofs")
    assert {r["source"] for r in mem} == {"measured", "datasheet"}
    dash = layer(spec, it.ROOFS)["encoding"]["strokeDash"]["scale"]
    assert dash["domain"] == ["measured", "datasheet"]


def test_missing_peak_refused():
    pts = pd.DataFrame([point("local", "resnet50", 8, 40.0, 50e9, precision="bf16")])
    with pytest.raises(InputError, match="no compute peak for precision 'bf16'"):
        it.roofline_chart(pts, {"local": ceilings()})


def test_combined_chart_colours_by_env_and_precision(points):
    other = points.assign(env="gcp_l4")
    both = pd.concat([points, other], ignore_index=True)
    spec = it.roofline_chart(both, {"local": ceilings(), "gcp_l4": ceilings("gcp_l4")}).to_dict()
    rows = layer_rows(spec, it.POINTS)
    assert len(rows) == 6
    assert {r["series"] for r in rows} == {"local · fp32", "gcp_l4 · fp32"}
    # several envs: only the precisions that have points get roofs
    assert not any("fp16" in r["roof_id"] for r in layer_rows(spec, it.ROOFS))


def test_each_precision_keeps_its_own_colour_with_measured_and_datasheet_roofs():
    # a GPU env: both roofs for every precision. Vega pairs the deduplicated domain with
    # the colour list as given, so a repeated name shifted every colour after it
    precs = ["fp32", "tf32", "amp", "bf16"]
    gpu = {
        "env": "gpu",
        "roofs": [
            {"kind": "compute", "precision": p, "source": src, "value": v * 1e12}
            for p, v in zip(precs, (60, 400, 800, 800), strict=True)
            for src in ("measured", "datasheet")
        ]
        + [{"kind": "memory", "precision": None, "source": "measured", "value": 3e12}],
    }
    pts = pd.DataFrame([point("gpu", "resnet50", 64, 100.0, 1e13, precision=p) for p in precs])
    spec = it.roofline_chart(pts, {"gpu": gpu}).to_dict()
    (scale,) = {  # roofs, labels, ridges and points share one colour scale
        json.dumps(layer["encoding"]["color"]["scale"])
        for layer in spec["layer"]
        if "scale" in layer.get("encoding", {}).get("color", {})
    }
    scale = json.loads(scale)
    assert sorted(scale["domain"]) == sorted(precs)  # each once
    assert scale["range"] == [it._color(p) for p in scale["domain"]]


def test_two_envs_of_one_machine_share_a_roof_label_and_keep_close_ones_apart(points):
    # an eager and a compiled env: one datasheet, two measurements 2% apart
    ceil = {"local": ceilings(), "local_compiled": ceilings("local_compiled", peak=98e9)}
    for c in ceil.values():  # the datasheet roofs coincide
        c["roofs"][1]["value"] = 200e9
    both = pd.concat([points, points.assign(env="local_compiled")], ignore_index=True)
    spec = it.roofline_chart(both, ceil).to_dict()
    shared = layer_rows(spec, "shared_roof_labels")
    assert [r["text"] for r in shared] == [
        "local, local_compiled fp32 datasheet: 200 GFLOP/s · ridge 10 FLOP/B"
    ]
    own = {r["text"].split(" fp32")[0]: r for r in layer_rows(spec, "roof_labels")}
    assert set(own) == {"local", "local_compiled"}
    # pixel offsets (Vega: down is positive) from lines < 1 px apart: the labels are a
    # label's height apart, the higher roof's (local) on top
    dy = {e: r["dy"] for e, r in own.items()}
    assert dy["local_compiled"] - dy["local"] >= chart_labels.LABEL_HEIGHT_PX - 1
    assert layer(spec, "roof_labels")["mark"]["dy"] == {"expr": "datum.dy"}
    # their memory roofs coincide too: labelled once each, one step apart up the diagonal
    mem = layer_rows(spec, "memory_labels")
    assert sorted(r["text"] for r in mem) == [
        "local, local_compiled memory datasheet: 20 GB/s",
        "local, local_compiled memory measured: 10 GB/s",
    ]


def test_per_kernel_points_from_parsed_ncu(points):
    ncu = parse_ncu_csv(NCU_CSV)
    kern = kernel_frame({("local", "resnet50", "fp32", 8): ncu}, combined=False)
    drawable = [
        k
        for k in ncu["kernels"]
        if k["flop"]["total"] and k["bytes"]["dram"] and k["time_s"] and k["flop"]["total"] >= 1
    ]
    assert len(kern) == len(drawable) > 10
    assert kern.attrs["skipped"] == len(ncu["kernels"]) - len(drawable)
    k0 = drawable[0]
    row = kern.iloc[0]
    assert row["ai"] == pytest.approx(k0["flop"]["total"] / k0["bytes"]["dram"])
    assert row["gflops"] == pytest.approx(k0["flop"]["total"] / k0["time_s"] / 1e9)
    assert kern["time_share"].sum() < 1.0 + 1e-9
    spec = it.roofline_chart(
        points, {"local": ceilings()}, {("local", "resnet50", "fp32", 8): ncu}
    ).to_dict()
    assert len(layer_rows(spec, it.KERNELS)) == len(drawable)
    params = spec.get("params", []) + layer(spec, it.KERNELS).get("params", [])
    assert any(p.get("name") == "show_kernels" for p in params)


def test_page_thins_kernels_to_fit_the_report(points):
    ncu = parse_ncu_csv(NCU_CSV)
    many = dict(ncu, kernels=ncu["kernels"] * 40)  # ~2,400 drawable launches
    key = ("local", "resnet50", "fp32", 8)
    budget = 300_000
    html = it.roofline_page(
        points, {"local": ceilings()}, {key: many}, bundle=BUNDLE, max_bytes=budget
    )
    assert len(html.encode()) <= budget < it.MAX_PAGE_BYTES
    m = re.search(r"only the (\d+) longest kernels are drawn, (\d+)% of the profiled", html)
    assert m and 0 < int(m.group(1)) < 2400 and int(m.group(2)) > 50
    spec = json.loads(re.search(r"var spec = (\{.*\});\n", html).group(1))
    assert len(layer_rows(spec, it.KERNELS)) == int(m.group(1))
    assert len(layer_rows(spec, it.POINTS)) == 3  # the study's points are never thinned
    # within budget nothing is dropped
    small = it.roofline_page(
        points, {"local": ceilings()}, {key: ncu}, bundle=BUNDLE, max_bytes=budget
    )
    assert "longest kernels are drawn" not in small


def test_page_is_self_contained(points):
    evil = "</script><script>alert(1)</script>"
    points.loc[0, "model"] = evil
    html = it.roofline_page(points, {"local": ceilings()}, title="Roofline <local>", bundle=BUNDLE)
    assert html.startswith("<!DOCTYPE html>")
    assert BUNDLE in html
    assert "Roofline &lt;local&gt;" in html
    assert not re.search(r"<script[^>]+src=", html)
    assert not re.search(r"<link[^>]+href=", html)
    # the spec is inlined as script-safe JSON: data never closes the script element
    assert evil not in html and html.count("<script") == 2 and html.count("</script") == 2
    spec = json.loads(re.search(r"var spec = (\{.*\});\n", html).group(1))
    assert evil in {r["model"] for r in layer_rows(spec, it.POINTS)}
    assert "1 point(s) above their roof" in html


def test_real_bundle_has_no_cdn(points):
    html = it.roofline_page(points, {"local": ceilings()})
    assert len(html) > 500_000  # vega, vega-lite and vega-embed are inlined
    for cdn in ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com"):
        assert cdn not in html
    assert not re.search(r"<script[^>]+src=", html)
    assert "window.vegaEmbed" in html


def load_cli():
    spec = importlib.util.spec_from_file_location("plot_interactive", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_writes_env_and_combined_pages(tmp_path, points, capsys):
    x = tmp_path / "x.html"
    pts = pd.concat([points, points.assign(env="gcp_l4")], ignore_index=True)
    pts.to_csv(tmp_path / "points.csv", index=False)
    for env in ("local", "gcp_l4"):
        (tmp_path / f"{env}.json").write_text(json.dumps(ceilings(env)))
    # a capture says which run it profiled (its identity), as the ncu stage writes it
    run = {"env": "gcp_l4", "config": {"arch": "resnet50", "precision": "fp32", "batch_size": 8}}
    ncu = {**parse_ncu_csv(NCU_CSV), **run}
    (tmp_path / "gcp_l4_resnet50_fp32_bs8.json").write_text(json.dumps(ncu))
    base = [sys.executable, str(SCRIPT), "--points", str(tmp_path / "points.csv")]
    ceil = ["--ceilings", str(tmp_path / "local.json"), str(tmp_path / "gcp_l4.json")]
    out = tmp_path / "roofline_gcp_l4.html"
    ncu_arg = ["--ncu", str(tmp_path / "gcp_l4_resnet50_fp32_bs8.json")]
    proc = subprocess.run(
        [*base, *ceil, "--env", "gcp_l4", *ncu_arg, "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    assert "Roofline: gcp_l4" in html and "per-kernel points (ncu)" in html
    # in-process from here on (the same main(); no interpreter start-up to pay)
    cli = load_cli()
    assert cli.main([*base[2:], *ceil, *ncu_arg, "--out", str(tmp_path / "all.html")]) == 0
    assert "Roofline: gcp_l4, local" in (tmp_path / "all.html").read_text()
    # a point whose env has no ceilings is refused, naming it
    rc = cli.main([*base[2:], "--ceilings", str(tmp_path / "local.json"), "--out", str(x)])
    assert rc == 2 and "gcp_l4" in capsys.readouterr().err
    assert not x.exists()


def test_no_successful_runs_draws_only_the_roofs(points):
    failed = points.assign(runs_ok=0)
    html = it.roofline_page(failed, {"local": ceilings()}, bundle=BUNDLE)
    assert "No successful runs yet: only the roofs are drawn." in html
    spec = json.loads(re.search(r"var spec = (\{.*\});\n", html).group(1))
    names = {lay.get("name") for lay in spec["layer"]}
    assert it.ROOFS in names and it.POINTS not in names


def test_ai_range_bars_span_low_to_high(points):
    points["ai_low"] = [20.0, float("nan"), 2.5, float("nan")]
    points["ai_high"] = [40.0, float("nan"), 4.0, float("nan")]
    points.loc[0, "bound"] = "inconclusive"
    spec = it.roofline_chart(points, {"local": ceilings()}).to_dict()
    rows = layer_rows(spec, it.AI_RANGES)
    assert sorted((r["model"], r["ai_low"], r["ai_high"]) for r in rows) == [
        ("mobilenet_v2", 2.5, 4.0),
        ("resnet50", 20.0, 40.0),
    ]
    enc = layer(spec, it.AI_RANGES)["encoding"]
    assert enc["x"]["field"] == "ai_low" and enc["x2"]["field"] == "ai_high"
    assert enc["y"]["field"] == "flops"  # through the point, at its attained FLOP/s
    by = {(r["model"], r["batch"]): r for r in layer_rows(spec, it.POINTS)}
    assert "straddles the ridge" in by[("resnet50", 8)]["lever"]


def test_ai_axis_widens_so_that_roof_labels_clear_a_high_ai_point(points):
    def x_domain(pts):
        spec = it.roofline_chart(pts, {"local": ceilings()}).to_dict()
        return layer(spec, "memory_roofs")["encoding"]["x"]["scale"]["domain"]

    # AI 5000 just under the fp32 measured roof (100 GFLOP/s), whose label sits below it
    # at the right edge: the edge moves right a decade at a time until the label clears it
    high = pd.concat([points, pd.DataFrame([point("local", "resnet50", 32, 5e3, 95e9)])])
    low = pd.concat([points, pd.DataFrame([point("local", "resnet50", 32, 5e3, 2e9)])])
    assert x_domain(low)[1] == 1e5  # the same AI far below the labels: no widening
    assert x_domain(high)[1] > 1e5


def test_batch_labels_keep_apart_and_coincident_points_share_one(points):
    # fp16 at resnet50 bs8 runs as fp32 does: one "bs8" for the pair, not two overlaid;
    # bs32 lands right next to them: its label takes another spot
    extra = [
        point("local", "resnet50", 8, 40.0, 62.5e9, precision="fp16", peak=800e9),
        point("local", "resnet50", 32, 41.0, 66e9),
    ]
    chart = it.roofline_chart(pd.concat([points, pd.DataFrame(extra)]), {"local": ceilings()})
    spec = chart.to_dict()
    rows = layer_rows(spec, "batch_labels")
    assert sorted(r["label"] for r in rows) == ["bs16", "bs32", "bs8", "bs8"]
    by = {(r["ai"], r["label"]): (r["dx"], r["dy"]) for r in rows}
    assert by[(40.0, "bs8")] != by[(41.0, "bs32")]
    mark = layer(spec, "batch_labels")["mark"]
    assert mark["dx"] == {"expr": "datum.dx"} and mark["align"] == {"expr": "datum.align"}


def test_close_memory_roofs_are_labelled_side_by_side_along_their_diagonals(points):
    # an H100's datasheet 3.35 TB/s and measured 3.0 TB/s: diagonals a few pixels apart
    ceil = ceilings(peak=700e12, bw=3.0e12)
    ceil["roofs"][4]["value"] = 3.35e12
    spec = it.roofline_chart(points, {"local": ceil}).to_dict()
    rows = {r["text"].split(":")[0]: r for r in layer_rows(spec, "memory_labels")}
    measured, datasheet = rows["memory measured"], rows["memory datasheet"]
    assert measured["x"] == datasheet["x"]  # one x, across the diagonals from each other
    # written along the diagonal (Vega turns text clockwise; the diagonal rises)
    domain = layer(spec, "memory_roofs")["encoding"]["x"]["scale"]["domain"]
    ydomain = layer(spec, "memory_roofs")["encoding"]["y"]["scale"]["domain"]
    slope = (chart_labels.HEIGHT / math.log10(ydomain[1] / ydomain[0])) / (
        chart_labels.WIDTH / math.log10(domain[1] / domain[0])
    )
    assert measured["angle"] == pytest.approx(-math.degrees(math.atan(slope)))
    # their centres a label's height apart across the lines, datasheet's above: a label
    # is offset (dx, dy) = along (cos, -sin) + up (-sin, -cos) in Vega's downward y
    theta = math.atan(slope)
    up = [-(r["dx"] * math.sin(theta) + r["dy"] * math.cos(theta)) for r in (measured, datasheet)]
    assert up[1] - up[0] >= chart_labels.LABEL_HEIGHT_PX - 1
    mark = layer(spec, "memory_labels")["mark"]
    assert mark["angle"] == {"expr": "datum.angle"} and mark["dy"] == {"expr": "datum.dy"}
