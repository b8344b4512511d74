"""examples/compare/: the H200 study compared with the H100 study, rebuilt from committed
files by examples/compare/make.sh, gives the committed files again; its README's table is
compare.csv's; the arrows plot dashes an arrow between AIs of different sources."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from workflow_helpers import run_env

from dnnroofline.plots.compare_roofline import plot_compare_roofline

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "compare"
TABLES = [
    "compare.csv",
    "compare_unmatched.csv",
    "compare_fingerprints.csv",
    "compare_ops.csv",
    "compare_kernels.csv",
    "compare_roofs.csv",
]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("compare_example")
    proc = subprocess.run(
        ["bash", str(EXAMPLE / "make.sh"), str(out)],
        capture_output=True,
        text=True,
        env=run_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the gate passes too
    assert "regression_gate: 5 point(s) passed" in proc.stdout
    return out


@pytest.mark.parametrize("name", TABLES)
def test_make_sh_gives_the_committed_tables_again(rebuilt, name):
    assert (rebuilt / name).read_text() == (EXAMPLE / name).read_text()


def test_the_readme_table_is_compare_csv(rebuilt):
    rows = pd.read_csv(EXAMPLE / "compare.csv")
    readme = (EXAMPLE / "README.md").read_text()
    for r in rows.itertuples():
        line = (
            f"| {r.model} | {r.precision} | {r.batch} | {r.baseline_images_per_s:,.0f} | "
            f"{r.images_per_s:,.0f} | {r.change_pct:+.1f}% | {r.ci_low_pct:+.1f}% … "
            f"{r.ci_high_pct:+.1f}% | {r.verdict} | {r.baseline_runs} / {r.runs} |"
        )
        assert line in readme, line


def arrow_styles(svg: str) -> dict[str, bool]:
    """Each arrow's gid -> whether it is dashed."""
    groups = re.findall(r'<g id="(arrow-[^"]+)">(.*?)</g>', svg, re.S)
    return {gid: "stroke-dasharray" in body for gid, body in groups}


def test_arrows_between_ais_of_different_sources_are_dashed(rebuilt, tmp_path):
    # the H100's AIs are ncu's, the H200's analytic: every arrow dashed
    styles = arrow_styles((rebuilt / "compare_roofline.svg").read_text())
    assert len(styles) == 5 and all(styles.values()), styles
    # the same baseline with analytic AIs: solid arrows
    compare = pd.read_csv(EXAMPLE / "compare.csv")
    points = pd.read_csv(ROOT / "examples" / "h200" / "roofline_points.csv")
    baseline = pd.read_csv(ROOT / "examples" / "h100" / "roofline_points.csv")
    ceilings = json.loads((ROOT / "examples/h200/results/h200/ceilings.json").read_text())
    info = plot_compare_roofline(
        compare,
        points,
        baseline.assign(ai_source="analytic"),
        {"h200": ceilings},
        None,
        tmp_path / "solid.svg",
        env_map={"h200": "h100"},
        label="H100",
    )
    assert info["arrows"] == 5 and info.get("ai-source", 0) == 0
    assert info["faster"] == 4 and info["same"] == 1 and info["only-current"] == 7
    solid = arrow_styles((tmp_path / "solid.svg").read_text())
    assert len(solid) == 5 and not any(solid.values()), solid
