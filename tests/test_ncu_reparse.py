"""A finished capture parsed again with the current parser: the counters the GPU run wrote
are read anew from its CSVs, and what only the capture knew is kept."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dnnroofline.errors import InputError
from dnnroofline.ncu.reparse import reparse_capture

ROOT = Path(__file__).resolve().parents[1]
NCU = ROOT / "examples" / "h100" / "results" / "h100" / "ncu"
FP32 = NCU / "h100_resnet18_fp32_bs128"


def texts(stem: Path) -> tuple[dict, str, str]:
    capture = json.loads(stem.with_suffix(".json").read_text())
    kernel = gzip.decompress(stem.with_suffix(".csv.gz").read_bytes()).decode()
    return capture, kernel, stem.with_suffix(".step.csv").read_text()


def test_a_reparsed_capture_keeps_the_runs_record_and_recounts_its_flops():
    capture, kernel, step = texts(FP32)
    new = reparse_capture(capture, kernel, step, date="2026-11-25", why="fp16 moves")
    # The committed JSON is itself a re-parse: parsing it again changes no count.
    assert new["totals"]["flop"] == capture["totals"]["flop"]
    assert new["kernels"] == capture["kernels"]
    # The fp32 step (TF32 off) ran no half-precision arithmetic: the moves are gone.
    assert new["totals"]["flop"]["fp16"] == 0
    # Bytes and time come from the step pass, unchanged.
    assert new["totals"]["bytes"]["dram"] == capture["totals"]["bytes"]["dram"]
    assert new["totals"]["time_s"] == capture["totals"]["time_s"]
    for key in ("status", "ncu", "driver_run", "step_driver_run", "step_source_file"):
        assert new[key] == capture[key], key
    assert new["reparsed"] == [*capture["reparsed"], {"date": "2026-11-25", "why": "fp16 moves"}]


def test_only_a_finished_capture_is_reparsed():
    capture, kernel, step = texts(FP32)
    with pytest.raises(InputError, match="status 'error'"):
        reparse_capture({**capture, "status": "error"}, kernel, step, date="d", why="w")
    with pytest.raises(InputError, match="step-pass CSV is missing"):
        reparse_capture(capture, kernel, None, date="d", why="w")


def test_the_entry_script_rewrites_a_copy_in_place(tmp_path):
    for suffix in (".json", ".csv.gz", ".step.csv"):
        shutil.copy(FP32.with_suffix(suffix), tmp_path / FP32.with_suffix(suffix).name)
    target = tmp_path / FP32.with_suffix(".json").name
    script = ROOT / "workflow" / "scripts" / "reparse_ncu.py"
    done = subprocess.run(
        [sys.executable, str(script), str(target), "--why", "test"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "FLOP 953432724339" in done.stdout
    assert json.loads(target.read_text())["reparsed"][-1]["why"] == "test"
    (tmp_path / FP32.with_suffix(".csv.gz").name).unlink()
    failed = subprocess.run(
        [sys.executable, str(script), str(target), "--why", "test"], capture_output=True, text=True
    )
    assert failed.returncode == 1
    assert "no kernel-pass CSV beside it" in failed.stderr
