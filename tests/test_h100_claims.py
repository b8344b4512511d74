"""Every figure the README's H100 section and examples/h100/README.md print is recomputed
from the committed files of examples/h100/ (issue 26, section 6).

A number that no committed file backs (a speedup against a CPU study whose ledger was
never kept, a burst rate from another session) fails here: each numeric token of those
texts is either recomputed from a file or listed below as a setting, a version or a date
read from a file.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h100"
RESULTS = EXAMPLE / "results" / "h100"
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def points() -> dict[tuple[str, str, str], dict]:
    with (EXAMPLE / "roofline_points.csv").open() as f:
        return {(r["model"], r["precision"], r["batch_size"]): r for r in csv.DictReader(f)}


def ceilings() -> dict:
    return json.loads((RESULTS / "ceilings.json").read_text())


def roof(kind: str, source: str, precision: str | None = None, benchmark: str | None = None):
    for r in ceilings()["roofs"]:
        if (r["kind"], r["source"]) != (kind, source):
            continue
        if precision is not None and r.get("precision") != precision:
            continue
        if benchmark is not None and r.get("benchmark") != benchmark:
            continue
        return r
    raise AssertionError(f"ceilings.json has no {source} {kind} roof {precision or benchmark}")


def memory_roof_by_value() -> dict:
    roofs = ceilings()["roofs"]
    measured = [r for r in roofs if (r["kind"], r["source"]) == ("memory", "measured")]
    return max(measured, key=lambda r: r["value"])


def h100_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## On an H100")
    return text[start : text.index("\n## ", start + 1)]


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table(section: str) -> list[dict[str, str]]:
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = cells(lines[0])
    return [dict(zip(header, cells(line), strict=True)) for line in lines[2:]]


def fmt_int(value: float) -> str:
    return f"{round(value):,}"


def run_rates(model: str, precision: str, batch: str) -> list[float]:
    rates = []
    for path in sorted((RESULTS / "runs").glob(f"h100_{model}_{precision}_bs{batch}_run*.json")):
        run = json.loads(path.read_text())
        assert run["status"] == "ok", path
        rates.append(run["images_per_s"])
    return rates


# How each column of the README's H100 table is recomputed from roofline_points.csv and
# the runs: the README must print exactly these strings.
COLUMNS = {
    "model": None,
    "precision": None,
    "batch": None,
    "images/s (3 runs)": lambda p, runs: (
        f"{fmt_int(float(p['images_per_s']))} ({fmt_int(min(runs))}–{fmt_int(max(runs))})"
    ),
    "AI (ncu) FLOP/B": lambda p, runs: f"{float(p['ai']):.1f}",
    "TFLOP/s": lambda p, runs: f"{float(p['attained_flops']) / 1e12:.1f}",
    "of roof": lambda p, runs: f"{100 * float(p['efficiency']):.0f}%",
    "kernel-busy": lambda p, runs: f"{100 * float(p['kernel_busy_share']):.0f}%",
    "bound": lambda p, runs: p["bound"],
}


def test_the_readme_h100_table_is_the_committed_ledger():
    rows = table(h100_section())
    committed = points()
    assert {(r["model"], r["precision"], r["batch"]) for r in rows} == set(committed)
    for row in rows:
        key = (row["model"], row["precision"], row["batch"])
        point = committed[key]
        assert point["ai_source"] == "ncu", key
        runs = run_rates(*key)
        assert len(runs) == int(point["runs_ok"]) == 3, key
        # The table's median is the ledger's, which is the runs' (not a mean of rates).
        assert min(runs) <= float(point["images_per_s"]) <= max(runs), key
        for column, cell in row.items():
            assert column in COLUMNS, f"README H100 table: column {column!r} has no recomputation"
            if COLUMNS[column] is not None:
                assert cell == COLUMNS[column](point, runs), (key, column)


def test_the_readme_h100_roofs_are_the_committed_ceilings():
    section = h100_section()
    measured = {
        p: roof("compute", "measured", p)["value"] / 1e12 for p in ("bf16", "amp", "tf32", "fp32")
    }
    datasheet = {p: roof("compute", "datasheet", p)["value"] / 1e12 for p in measured}
    memory = memory_roof_by_value()
    copy = roof("memory", "measured", benchmark="d2d_copy")
    expected = (
        f"bf16 {measured['bf16']:.0f}, amp (fp16) {measured['amp']:.0f}, "
        f"tf32 {measured['tf32']:.0f}, fp32 {measured['fp32']:.1f} TFLOP/s (best GEMM), "
        f"{memory['value'] / 1e12:.2f} TB/s (STREAM {memory['benchmark']}; device copy "
        f"{copy['value'] / 1e12:.2f}); datasheet {datasheet['bf16']:.0f} / "
        f"{datasheet['amp']:.0f} / {datasheet['tf32']:.0f} / {datasheet['fp32']:.0f} TFLOP/s "
        f"and {roof('memory', 'datasheet')['value'] / 1e12:.2f} TB/s"
    )
    assert expected in " ".join(section.split())


def wall_s(tsv: Path) -> float:
    with tsv.open() as f:
        return float(next(csv.DictReader(f, delimiter="\t"))["s"])


def mb(n_bytes: int) -> float:
    return n_bytes / 1e6


def backed_example_numbers() -> set[str]:
    """The numbers examples/h100/README.md may print: recomputed from its files, or read
    from them (versions, settings, dates)."""
    env = json.loads((RESULTS / "env_info.json").read_text())
    config = yaml.safe_load((EXAMPLE / "config.yaml").read_text())
    gz = sorted((RESULTS / "ncu").glob("h100_*.csv.gz"))
    raw_mb = sum(len(gzip.decompress(p.read_bytes())) for p in gz) / 1e6
    ncu_wall = {p.stem: wall_s(p) for p in (RESULTS / "benchmarks" / "ncu").glob("h100_*.tsv")}
    backed = {
        f"{wall_s(RESULTS / 'benchmarks' / 'ceilings.tsv'):.0f}",  # the ceilings job, s
        f"{wall_s(RESULTS / 'benchmarks' / 'ncu' / 'selftest.tsv'):.0f}",  # the self-test, s
        f"{raw_mb:.1f}",
        f"{sum(mb(p.stat().st_size) for p in gz):.2f}",
        str(len(list((RESULTS / "runs").glob("*.json")))),  # timed runs
        str(len(gz)),  # captures
    }
    telemetry = json.loads(next((RESULTS / "runs").glob("*.json")).read_text())["gpu_telemetry"]
    backed.add(f"{telemetry['limits']['power_limit_w']:.0f}")
    for seconds in (min(ncu_wall.values()), max(ncu_wall.values())):
        backed |= {str(int(seconds // 60)), f"{seconds % 60:.0f}"}
    backed |= set(NUMBER.findall(json.dumps(env)))  # versions
    backed |= set(NUMBER.findall(" ".join(ceilings()["notes"])))
    backed |= set(NUMBER.findall(yaml.safe_dump(config)))
    full_config = ROOT / "config" / "examples" / "h100.yaml"  # the study the lease cut short
    backed |= set(NUMBER.findall(yaml.safe_dump(yaml.safe_load(full_config.read_text()))))
    return backed


# Numbers of examples/h100/README.md that are not measurements: the lease's 30 minutes, the
# GPU's name (H100 80GB), the date, and the counts of metric names in the paragraph that
# lists them.
NOT_MEASUREMENTS = {"30", "80", "2026", "11", "24", "2"}


def test_every_number_in_the_examples_readme_is_backed_by_a_file():
    text = (EXAMPLE / "README.md").read_text()
    # Code spans and links are commands and paths, not figures.
    prose = re.sub(r"`[^`]*`|\]\([^)]*\)|```.*?```", " ", text, flags=re.S)
    backed = backed_example_numbers() | NOT_MEASUREMENTS
    unbacked = sorted({n for n in NUMBER.findall(prose) if n.replace(",", "") not in backed})
    assert unbacked == [], f"examples/h100/README.md prints numbers no file backs: {unbacked}"


@pytest.mark.parametrize("path", ["README.md", "BENCHMARKS.md", "docs/gpu.md"])
def test_the_self_test_copy_is_said_as_measured(path):
    """The self-test's copy reads 512 MiB and writes 512 MiB (ncu_selftest.COPY_BYTES)."""
    from dnnroofline.ncu.selftest import COPY_BYTES

    text = " ".join((ROOT / path).read_text().split())
    assert COPY_BYTES == 512 * 2**20
    assert "1 GiB copy" not in text
    if "self-test" in text.lower() and "copy" in text:
        assert "512 MiB" in text, path
