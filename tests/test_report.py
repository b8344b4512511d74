"""The report package: each section is a page, escaping, and the write_report_sections.py CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from report_fixtures import (
    make_ceilings,
    make_complexity,
    make_config,
    make_env_infos,
    make_metrics,
    make_points,
    study_matrix,
)

from dnnroofline.report import SECTION_FILES
from dnnroofline.report.sections import all_sections

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "workflow" / "scripts" / "write_report_sections.py"


def test_every_section_is_a_page(sections):
    assert list(sections) == list(SECTION_FILES)
    for name, html in sections.items():
        assert html.startswith("<!DOCTYPE html>"), name
        assert html.rstrip().endswith("</html>"), name


def test_html_is_escaped(sections):
    for name, html in sections.items():
        assert "<script>" not in html, name
    assert "&lt;script&gt;" in sections["analysis.html"]
    assert "box&lt;1&gt;" in sections["reproducibility.html"]


def test_empty_inputs_do_not_crash():
    cfg = make_config()
    sections = all_sections(cfg, pd.DataFrame(), pd.DataFrame(), expected_runs=study_matrix(cfg))
    assert "No successful runs yet" in sections["measurement.html"]
    assert "No roofline points yet" in sections["roofline.html"]
    assert "12 of 12 expected runs are absent" in sections["analysis.html"]


def test_schema_accepts_report_baseline_env():
    import jsonschema

    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    cfg = make_config()
    cfg["report"] = {"baseline_env": "local"}
    jsonschema.validate(cfg, schema)
    cfg["report"] = {"baseline": "local"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(cfg, schema)


def test_cli_writes_a_page_per_section(tmp_path):
    res = tmp_path / "results"
    (res / "complexity").mkdir(parents=True)
    (res / "local").mkdir()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(make_config()))
    make_metrics().to_csv(res / "metrics.csv", index=False)
    make_points().to_csv(res / "roofline_points.csv", index=False)
    cx_paths = []
    for c in make_complexity():
        p = res / "complexity" / f"{c['arch']}_bs{c['batch_size']}.json"
        p.write_text(json.dumps(c))
        cx_paths.append(str(p))
    ceil = make_ceilings()["local"]
    del ceil["env"]  # the env comes from the folder name then
    (res / "local" / "ceilings.json").write_text(json.dumps(ceil))
    (res / "local" / "env_info.json").write_text(json.dumps(make_env_infos()["local"]))
    expected = tmp_path / "expected.json"
    run = {"env": "local", "model": "resnet50", "precision": "fp32", "batch_size": 8}
    expected.write_text(json.dumps([{**run, "run": 1}, {**run, "run": 9}]))
    out = tmp_path / "sections"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--config",
            str(cfg),
            "--metrics",
            str(res / "metrics.csv"),
            "--points",
            str(res / "roofline_points.csv"),
            "--complexity",
            *cx_paths,
            "--ceilings",
            str(res / "local" / "ceilings.json"),
            "--env-info",
            str(res / "local" / "env_info.json"),
            "--expected-runs",
            str(expected),
            "--lock",
            str(REPO / "requirements.lock"),
            "--outdir",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(SECTION_FILES)
    for name in SECTION_FILES:
        assert (out / name).read_text().startswith("<!DOCTYPE html>")
    roof = (out / "roofline.html").read_text()
    assert "sgemm 4096^3" in roof  # ceilings filed under env "local" from the folder
    analysis = (out / "analysis.html").read_text()
    assert "1 of 2 expected runs are absent" in analysis
    assert "local_resnet50_fp32_bs8_run9" in analysis
    # an env_info without a package list: torch and torchvision against the lock
    repro = (out / "reproducibility.html").read_text()
    assert "Env <b>local</b>: 2 versions differ from the lock (2 locked packages and " in repro
    assert "predates the package list: torch and torchvision only" in repro
    assert "<td>local</td><td>torch</td><td>2.3.0</td>" in repro


def test_cli_reports_bad_input(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(make_config()))
    bad = tmp_path / "ceilings.json"
    bad.write_text("{not json")
    make_metrics().to_csv(tmp_path / "m.csv", index=False)
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--config",
            str(cfg),
            "--metrics",
            str(tmp_path / "m.csv"),
            "--points",
            str(tmp_path / "nope.csv"),
            "--outdir",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "--points: no such file" in proc.stderr and "nope.csv" in proc.stderr
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--config",
            str(cfg),
            "--metrics",
            str(tmp_path / "m.csv"),
            "--points",
            str(tmp_path / "m.csv"),
            "--ceilings",
            str(bad),
            "--outdir",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "ceilings.json line 1" in proc.stderr
    assert not (tmp_path / "o").exists()
    unlocked = tmp_path / "requirements.lock"
    unlocked.write_text("torch>=2.4\n")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--config", str(cfg), "--metrics", str(tmp_path / "m.csv")]
        + ["--points", str(tmp_path / "m.csv"), "--lock", str(unlocked)]
        + ["--outdir", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "requirements.lock line 1: 'torch>=2.4' is not an exact name==version pin" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_templates_autoescape_names_from_data(inputs):
    """A model, env or message with markup in it is shown as text, never run as markup."""
    evil = "<script>alert('x')</script>"
    cfg = make_config(envs={f"lab{evil}": {"device": "cpu", "threads": 2}})
    cfg["study"]["models"] = [f"net{evil}"]
    metrics = make_metrics().assign(env=f"lab{evil}", model=f"net{evil}")
    points = make_points().assign(env=f"lab{evil}", model=f"net{evil}")
    pages = all_sections(cfg, metrics, points, env_infos={f"lab{evil}": {"host": evil}})
    for name, html in pages.items():
        assert "<script>" not in html, name
    escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
    assert f"<strong>net{escaped}</strong>" in pages["design.html"]
    assert f"<h3>lab{escaped} · fp32</h3>" in pages["design.html"]
    assert f"<caption>lab{escaped}</caption>" in pages["roofline.html"]
    assert f"<td>{escaped}</td>" in pages["reproducibility.html"]  # the host
    # escaped once: no entity is escaped again
    assert all("&amp;lt;" not in html for html in pages.values())


def test_python_fragments_are_escaped_once():
    from markupsafe import Markup

    from dnnroofline.report.render import esc, page, table

    html = table(["a<b"], [["<i>", Markup("<em>ok</em>")], [esc("x&y"), None]], num_cols=[0])
    assert '<th scope="col" class=num>a&lt;b</th>' in html
    assert "<td class=num>&lt;i&gt;</td>" in html and "<em>ok</em>" in html
    assert "x&amp;y" in html and "&amp;amp;" not in html
    assert "<td></td>" in html  # None is empty, not "None"
    doc = page("T<1>", html)
    assert doc.startswith("<!DOCTYPE html>") and "<title>T&lt;1&gt;</title>" in doc
    assert "<style>" in doc and "x&amp;y" in doc and "&amp;amp;" not in doc


def test_report_front_page_names_the_models_and_their_own_batch_sizes():
    # report/workflow.rst, as snakemake --report renders it (Jinja2, snakemake.config)
    import types

    import jinja2

    config = {
        "envs": {"h100": {"device": "cuda"}},
        "study": {
            "models": [{"name": "resnet50", "batch_sizes": [64, 256]}, "resnet18"],
            "precisions": ["fp32", "amp"],
            "batch_sizes": [128],
            "runs": 3,
            "iters": 30,
            "warmup_iters": 5,
        },
    }
    rst = Path(__file__).resolve().parents[1] / "report" / "workflow.rst"
    template = jinja2.Template(rst.read_text())
    text = " ".join(template.render(snakemake=types.SimpleNamespace(config=config)).split())
    assert "Envs: h100. Models: resnet50, resnet18; precisions: fp32, amp;" in text
    assert "batch sizes: 128 (resnet50: 64, 256); 3 repeats of 30" in text


def test_the_sections_are_listed_once_and_the_rules_read_that_list():
    from dnnroofline.report import SECTION_NAMES, SECTIONS
    from dnnroofline.report.sections import BUILDERS

    assert list(BUILDERS) == list(SECTION_NAMES)
    assert tuple(f"{name}.html" for name in SECTION_NAMES) == SECTION_FILES
    for name, category in SECTIONS:
        assert (REPO / "report" / f"{name}.rst").is_file(), name
        assert category.split(". ", 1)[0].isdigit(), category
    rules = "".join((REPO / "rules" / f).read_text() for f in ("report.smk", "common.smk"))
    for name in SECTION_NAMES:  # no rule spells a section out again
        assert f'"{name}"' not in rules and f"{name}.html" not in rules, name


def test_the_report_builds_no_html_in_python():
    tag = re.compile(r"<(p|div|ul|li|h[1-6]|span|strong|code|table|tr|td)\b")
    for path in sorted((REPO / "workflow/scripts/dnnroofline/report").glob("*.py")):
        found = [n for n, line in enumerate(path.read_text().splitlines(), 1) if tag.search(line)]
        assert not found, f"{path.name}: HTML at lines {found}: move it into a template"
