"""The generated report in a real browser: headless Chromium driven by Playwright.

The tiny study (shared session fixture, see conftest.py) is opened as a user would:
the interactive roofline pages on their own, and results/report.html, Snakemake's
single-file report app. Each must load without JavaScript errors and without any
network request; the rooflines must draw one mark per roofline point, and hovering
a point must show its numbers. Screenshots are saved in the test's tmp dir (and the
report's roofline view is copied to /tmp/report_screenshot.png for a look).

Chromium is Debian's package (.ci/run installs it); Playwright only drives it, so
`playwright install` (which downloads a browser) is never needed. Without chromium
the module is skipped with that reason, except in CI (CI set), where it fails.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
from pathlib import Path

import pytest
from workflow_helpers import TINY

from dnnroofline.plots.interactive import MAX_PAGE_BYTES

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists()
IN_CI = bool(os.environ.get("CI"))
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOT_COPY = Path("/tmp/report_screenshot.png")
LOCAL_URL = re.compile(r"^(file|data|blob|about):")

pytestmark = [
    pytest.mark.workflow,
    pytest.mark.browser,
    pytest.mark.skipif(
        not HAVE_CHROMIUM and not IN_CI,
        reason=f"no chromium at {CHROMIUM} (apt-get install chromium; .ci/run installs it)",
    ),
]


@pytest.fixture(scope="module")
def browser():
    assert HAVE_CHROMIUM, f"CI must have chromium ({CHROMIUM}): .ci/run installs it"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Page:
    """A fresh page that records JS errors and every request, with the network cut off."""

    def __init__(self, browser):
        self.context = browser.new_context(viewport={"width": 1400, "height": 950})
        self.context.route(re.compile(r"^(https?|wss?|ftp)://"), lambda route: route.abort())
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on(
            "console",
            lambda m: self.errors.append(f"console.error: {m.text}") if m.type == "error" else None,
        )
        self.page.on("request", lambda r: self.requests.append(r.url))

    def remote_requests(self) -> list[str]:
        return [u[:120] for u in self.requests if not LOCAL_URL.match(u)]


@pytest.fixture
def page(browser):
    p = Page(browser)
    yield p
    p.context.close()


def plotted_points(results: Path, env: str | None = None) -> list[dict]:
    """The points roofline_points.csv has (of ``env``): every one of the tiny study's
    matrix, each with runs that succeeded, so each is drawn (never zero marks for zero
    points)."""
    with open(results / "roofline_points.csv") as fh:
        rows = list(csv.DictReader(fh))
    study = TINY["study"]
    batches = [
        len(
            m.get("batch_sizes", study["batch_sizes"])
            if isinstance(m, dict)
            else study["batch_sizes"]
        )
        for m in study["models"]
    ]
    assert len(rows) == len(TINY["envs"]) * len(study["precisions"]) * sum(batches)
    assert all(int(r["runs_ok"]) > 0 for r in rows), "a tiny-study point without ok runs"
    rows = [r for r in rows if env is None or r["env"] == env]
    assert rows, f"no points of env {env!r} in roofline_points.csv"
    return rows


def tooltip_fields(text: str) -> dict[str, str]:
    """The vega-tooltip table ("key\\tvalue" lines) as a dict."""
    lines = [ln.strip() for ln in text.replace("\t", "\n").splitlines() if ln.strip()]
    return dict(zip(lines[0::2], lines[1::2], strict=False))


def shown_frame(page):
    """The frame of the result the report shows (it puts HTML results in an iframe)."""
    iframe = page.locator("iframe")
    iframe.wait_for(timeout=10_000)
    return iframe.element_handle().content_frame()


def check_roofline(frame, expected: list[dict], shots: Path, name: str, page) -> None:
    """Every point drawn once; hovering each shows its model, batch, GFLOP/s and bound."""
    frame.locator("body[data-rendered=true]").wait_for(timeout=30_000)
    marks = frame.locator("g.points_marks path")
    assert marks.count() == len(expected), f"{name}: {marks.count()} marks, {len(expected)} points"
    # the Vega view holds the same points as the CSV
    drawn = frame.evaluate(
        "rooflineView.data('points_marks').map(d => [d.datum.env, d.datum.model, d.datum.batch])"
    )
    assert sorted(map(tuple, drawn)) == sorted(
        (r["env"], r["model"], int(r["batch_size"])) for r in expected
    )
    by_key = {(r["env"], r["model"], int(r["batch_size"])): r for r in expected}
    tooltip = frame.locator("#vg-tooltip-element")
    for i in range(marks.count()):
        marks.nth(i).hover(force=True)
        frame.locator("#vg-tooltip-element.visible").wait_for(timeout=5_000)
        tip = tooltip_fields(tooltip.inner_text())
        for key in ("env", "model", "precision", "batch", "AI (FLOP/byte)", "GFLOP/s"):
            assert key in tip, f"{name}: tooltip lacks {key!r}: {tip}"
        for key in ("efficiency (of roof)", "bound", "what would move it"):
            assert key in tip, f"{name}: tooltip lacks {key!r}: {tip}"
        row = by_key[(tip["env"], tip["model"], int(tip["batch"]))]
        gflops, ai = (float(tip[k].replace(",", "")) for k in ("GFLOP/s", "AI (FLOP/byte)"))
        assert gflops == pytest.approx(float(row["attained_flops"]) / 1e9, rel=0.01)
        assert ai == pytest.approx(float(row["ai"]), rel=0.01)
        eff = float(tip["efficiency (of roof)"].rstrip("%")) / 100
        assert eff == pytest.approx(float(row["efficiency"]), rel=0.02, abs=1e-3)
        assert tip["bound"] == row["bound"]
        if i == 0:
            page.screenshot(path=str(shots / f"{name}_hover.png"))
        page.mouse.move(0, 0)


def test_interactive_rooflines_render_offline_with_hover_data(tiny_study, page, tmp_path):
    results = tiny_study / "results"
    for name, env in (("roofline_local", "local"), ("roofline_all", None)):
        html = results / "plots" / f"{name}.html"
        assert html.stat().st_size <= MAX_PAGE_BYTES  # else the report's iframe refuses it
        page.page.goto(html.as_uri())
        check_roofline(page.page, plotted_points(results, env), tmp_path, name, page.page)
        page.page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        assert page.errors == [], f"{name}: {page.errors}"
        assert page.remote_requests() == [], f"{name} fetched {page.remote_requests()}"
        # legend and roof labels: the precision, measured and datasheet roofs
        chart_text = page.page.locator("#vis svg").first.text_content()
        for word in ("fp32", "measured", "datasheet", "memory", "model"):
            assert word in chart_text, f"{name}: no {word!r} in the chart"


def test_snakemake_report_loads_and_shows_the_roofline(tiny_study, page, tmp_path):
    results = tiny_study / "results"
    p = page.page
    p.goto((results / "report.html").as_uri())
    p.get_by_text("4. Roofline", exact=True).click()
    # results carry structured labels (figure, env, ...): Snakemake's report offers the
    # env as a menu within each subcategory and the figure as the table's column
    for sub in ("Static rooflines", "Interactive rooflines"):
        assert p.get_by_text(sub, exact=True).count() == 1, f"no {sub!r} in 4. Roofline"
    p.get_by_text("Interactive rooflines", exact=True).click()
    for env in ("local", "all envs"):
        assert p.get_by_text(env, exact=True).count() >= 1, f"no env {env!r} in the menu"
    p.get_by_text("local", exact=True).first.click()
    p.locator("tr", has_text="interactive roofline").first.locator("a[iconname=eye]").click()
    frame = shown_frame(p)
    check_roofline(frame, plotted_points(results, "local"), tmp_path, "report_roofline", p)
    frame.locator("g.points_marks path").first.hover(force=True)
    frame.locator("#vg-tooltip-element.visible").wait_for(timeout=5_000)
    shot = tmp_path / "report_roofline.png"
    p.screenshot(path=str(shot))
    shutil.copyfile(shot, SCREENSHOT_COPY)

    # the written analysis opens too and answers the questions in words
    p.get_by_text("Results", exact=True).first.click()
    p.get_by_text("5. Analysis", exact=True).click()
    p.locator("tr", has_text="analysis").first.locator("a[iconname=eye]").click()
    # a frame locator re-resolves the iframe (the roofline's may be shown a moment more)
    body = p.frame_locator("iframe").last.locator("body")
    # under make test the other worker keeps both cores busy: the page may take a while
    body.locator("h2", has_text="At a glance").wait_for(timeout=90_000)
    text = body.inner_text()
    for heading in ("Across models", "Across environments", "Memory footprint", "Per point"):
        assert heading in text
    p.screenshot(path=str(tmp_path / "report_analysis.png"))
    assert page.errors == [], page.errors
    assert page.remote_requests() == [], page.remote_requests()


def test_per_kernel_points_render_hover_and_hide(page, tmp_path):
    """A GPU env's page from a real ncu CSV: one mark per kernel, its tooltip, the checkbox."""
    import pandas as pd

    from dnnroofline.ncu.parse import parse_ncu_csv
    from dnnroofline.plots.interactive import roofline_page
    from dnnroofline.plots.interactive_data import kernel_frame

    root = Path(__file__).resolve().parent
    ncu = parse_ncu_csv(
        root / "data" / "ncu" / "nnperf_resnet18_cifar10_bs64_L4_details_scaled.csv"
    )
    totals = ncu["totals"]
    ai = totals["flop"]["total"] / totals["bytes"]["dram"]
    attained = totals["flop"]["total"] / 0.012  # a 12 ms uninstrumented step
    peak, bw = 30.3e12, 300e9
    point = {
        "env": "gcp_l4",
        "model": "resnet18",
        "precision": "fp32",
        "batch_size": 64,
        "runs_ok": 3,
        "ai": ai,
        "ai_source": "ncu",
        "attained_flops": attained,
        "roof_flops": min(peak, ai * bw),
        "roof_source": "datasheet",
        "ridge_ai": peak / bw,
        "efficiency": attained / min(peak, ai * bw),
        "bound": "memory",
        "images_per_s": 64 / 0.012,
        "above_roof": False,
    }
    ceilings = {
        "env": "gcp_l4",
        "device_name": "NVIDIA L4",
        "roofs": [
            {"kind": "compute", "precision": "fp32", "source": "datasheet", "value": peak},
            {"kind": "memory", "precision": None, "source": "datasheet", "value": bw},
        ],
    }
    key = ("gcp_l4", "resnet18", "fp32", 64)
    out = tmp_path / "roofline_gcp_l4.html"
    out.write_text(roofline_page(pd.DataFrame([point]), {"gcp_l4": ceilings}, {key: ncu}))
    p = page.page
    p.goto(out.as_uri())
    p.locator("body[data-rendered=true]").wait_for(timeout=30_000)
    n_kernels = len(kernel_frame({key: ncu}, combined=False))
    kernels = p.locator("g.kernels_marks path")
    assert kernels.count() == n_kernels > 10
    assert p.locator("g.points_marks path").count() == 1
    kernels.first.hover(force=True)
    p.locator("#vg-tooltip-element.visible").wait_for(timeout=5_000)
    tip = tooltip_fields(p.locator("#vg-tooltip-element").inner_text())
    assert "kernel" in tip and tip["model"] == "resnet18" and "AI (FLOP/byte, ncu)" in tip
    p.screenshot(path=str(tmp_path / "kernels.png"))
    # the checkbox under the chart hides the kernels; the study's point stays
    p.get_by_label(re.compile("per-kernel points")).uncheck()
    p.wait_for_function("document.querySelectorAll('g.kernels_marks path').length === 0")
    assert p.locator("g.points_marks path").count() == 1
    assert page.errors == [], page.errors
    assert page.remote_requests() == [], page.remote_requests()
