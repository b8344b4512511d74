"""`make gpu-check`: one line and exit 0 without a GPU; the summary table's numbers."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dnnroofline.errors import InputError
from dnnroofline.report.gpu_summary import (
    capture_cell,
    point_rows,
    roof_rows,
    selftest_rows,
    summary_markdown,
)

ROOT = Path(__file__).resolve().parents[1]


def _no_gpu_machine() -> bool:
    return not Path("/proc/driver/nvidia/version").exists()


@pytest.mark.skipif(not _no_gpu_machine(), reason="this machine has an NVIDIA driver")
def test_make_gpu_check_without_a_gpu_says_so_in_one_line_and_exits_0(tmp_path):
    # an empty PATH dir first: no nvidia-smi can be found, and nothing gets installed
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}", VENV=str(tmp_path / "venv"))
    out = subprocess.run(
        ["make", "--no-print-directory", "gpu-check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and "no NVIDIA GPU on this machine" in lines[0], out.stdout
    assert not (tmp_path / "venv").exists()  # nothing installed on a machine without a GPU


def test_detect_names_the_gpu_that_nvidia_smi_lists(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0b1c)'\n")
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "detect"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0
    assert out.stdout.strip() == "gpu-check: found NVIDIA H100 80GB HBM3"


def test_gpu_check_refuses_a_venv_made_for_measuring_only(tmp_path):
    # python -S: no site-packages, as a venv from make gpu-wheels PART=measure lacks the
    # analysis packages; the study would fail at its first plot after the measurements
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0b1c)'\n")
    smi.chmod(0o755)
    out = subprocess.run(
        [sys.executable, "-S", str(ROOT / "scripts" / "gpu_check.py"), "run"],
        env=dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "this venv lacks fvcore, matplotlib, altair, vl_convert" in out.stderr
    assert "snakemake measure" in out.stderr
    assert "gpu-check: snakemake" not in out.stdout  # refused before the study started


# --------------------------------------------------------------------------- gpu-wheels

SETUP_PY_PLATFORM_WHEEL = """\
from setuptools import setup
from setuptools.dist import Distribution


class Binary(Distribution):  # a wheel tagged for this CPython, as a C extension gives
    def has_ext_modules(self):
        return True


setup(name="tinybin", version="1.0", py_modules=["tinybin"], distclass=Binary)
"""


def _sdist(links: Path, name: str, setup_py: str | None = None, version="1.0", requires=()) -> None:
    """An sdist of a one-module package, as PyPI serves one that has no wheel."""
    src = links / f"{name}-{version}"
    src.mkdir(parents=True)
    (src / f"{name}.py").write_text("X = 1\n")
    (src / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if setup_py:
        (src / "setup.py").write_text(setup_py)
    else:
        (src / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
            f'[project]\nname = "{name}"\nversion = "{version}"\n'
            f"dependencies = {json.dumps(list(requires))}\n"
        )
    subprocess.run(["tar", "czf", f"{src.name}.tar.gz", src.name], cwd=links, check=True)


def _wheels(
    tmp_path: Path, lock_text: str, *extra: str, requirements: str | None = None
) -> subprocess.CompletedProcess:
    """gpu_check.py wheels against a local package dir (no index; this venv's setuptools).
    The requirements file is the lock's names, unless given."""
    (tmp_path / "lock").write_text(lock_text)
    if requirements is None:
        requirements = "".join(line.split("==")[0] + "\n" for line in lock_text.splitlines())
    (tmp_path / "requirements.txt").write_text(requirements)
    env = dict(
        os.environ,
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(tmp_path / "links"),
        PIP_NO_BUILD_ISOLATION="0",  # pip's inverted spelling: build without isolation
    )
    cmd = [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "wheels"]
    cmd += ["--dest", str(tmp_path / "out"), "--lock", str(tmp_path / "lock"), *extra]
    cmd += ["--requirements", str(tmp_path / "requirements.txt")]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.build
def test_gpu_wheels_turn_a_pure_sdist_into_a_wheel_and_leave_out_torch_and_the_installed(
    tmp_path,
):
    links = tmp_path / "links"
    _sdist(links, "tinypkg")
    _sdist(links, "tinyhave")
    (tmp_path / "freeze.txt").write_text("tinyhave==1.0\ntorchvision==0.1\n")
    lock = "".join(
        f"{pin} --hash=sha256:aa\n"
        for pin in ("tinypkg==1.0", "tinyhave==1.0", "torch==2.14.1", "nvidia-nccl-cu13==2.28")
    )
    out = _wheels(
        tmp_path, lock, "--python-version", "3.12", "--installed", str(tmp_path / "freeze.txt")
    )
    assert out.returncode == 0, out.stderr
    made = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert made == ["requirements.txt", "tinypkg-1.0-py3-none-any.whl"]
    assert "1 of the 4 pins" in out.stdout and "1 wheels" in out.stdout
    # what make setup WHEELS=out installs: the requirements, the machine's or these wheels
    listed = (tmp_path / "out" / "requirements.txt").read_text().splitlines()
    assert [ln for ln in listed if not ln.startswith("#")] == [
        "nvidia-nccl-cu13",
        "tinyhave",
        "tinypkg",
        "torch",
    ]


@pytest.mark.build
def test_gpu_wheels_bring_a_machine_package_only_where_it_breaks_a_bound(tmp_path):
    # tinyapp caps tinycap below the machine's 2.0 (brought at the locked 1.0), while the
    # machine's tinyfloor 5.0 meets tinyapp's floor (left out); tinyextra only an extra needs
    links = tmp_path / "links"
    _sdist(links, "tinyapp", requires=["tinycap<2", "tinyfloor>=1", "tinyextra; extra == 'x'"])
    for name in ("tinycap", "tinyfloor", "tinyextra"):
        _sdist(links, name)
    (tmp_path / "freeze.txt").write_text("tinycap==2.0\ntinyfloor==5.0\ntorch==2.11.0\n")
    lock = "".join(
        f"{n}==1.0 --hash=sha256:aa\n" for n in ("tinyapp", "tinycap", "tinyfloor", "tinyextra")
    )
    out = _wheels(
        tmp_path,
        lock,
        "--installed",
        str(tmp_path / "freeze.txt"),
        requirements="tinyapp>=1\ntorch>=2.4\n",
    )
    assert out.returncode == 0, out.stderr
    made = sorted(p.name for p in (tmp_path / "out").glob("*.whl"))
    assert made == ["tinyapp-1.0-py3-none-any.whl", "tinycap-1.0-py3-none-any.whl"]
    assert "2 wheels" in out.stdout
    # a dependency that is neither in the lock nor on the machine is named
    (tmp_path / "freeze.txt").write_text("tinycap==1.0\n")
    gap = _wheels(
        tmp_path, "tinyapp==1.0 --hash=sha256:aa\n", "--installed", str(tmp_path / "freeze.txt")
    )
    assert gap.returncode == 1
    assert "neither locked nor on the machine (INSTALLED): tinyfloor (for tinyapp)" in gap.stderr


def test_gpu_wheels_refuse_an_sdist_that_builds_only_for_this_python(tmp_path):
    _sdist(tmp_path / "links", "tinybin", SETUP_PY_PLATFORM_WHEEL)
    out = _wheels(tmp_path, "tinybin==1.0 --hash=sha256:aa\n", "--python-version", "3.12")
    assert out.returncode == 1
    assert "tinybin-1.0.tar.gz has no wheel on PyPI for Python 3.12" in out.stderr
    assert "did not build into one pure-Python wheel" in out.stderr


def test_gpu_wheels_name_what_is_wrong(tmp_path):
    (tmp_path / "links").mkdir()
    missing = _wheels(tmp_path, "tinynone==1.0 --hash=sha256:aa\n")
    assert missing.returncode != 0 and "pip download failed" in missing.stderr
    (tmp_path / "freeze.txt").write_text("numpy>=2\n")
    bad = _wheels(
        tmp_path, "tinynone==1.0 --hash=sha256:aa\n", "--installed", str(tmp_path / "freeze.txt")
    )
    assert bad.returncode == 2
    assert f"{tmp_path / 'freeze.txt'} line 1: 'numpy>=2' is not a package name" in bad.stderr


CEILINGS = {
    "device_name": "NVIDIA H100 80GB HBM3",
    "roofs": [
        {"kind": "compute", "precision": "bf16", "source": "measured", "value": 7.5e14},
        {"kind": "compute", "precision": "bf16", "source": "datasheet", "value": 989.4e12},
        {"kind": "compute", "precision": "amp", "source": "measured", "value": 6.0e14},
        {"kind": "memory", "precision": None, "source": "measured", "value": 2.8e12},
        {"kind": "memory", "precision": None, "source": "datasheet", "value": 3.35e12},
    ],
}
SELFTEST = {
    "cases": [
        {"case": "gemm_bf16", "ratio": 1.0004},
        {"case": "gemm_fp16", "ratio": 0.91},
        {"case": "copy", "ratio": 1.03},
    ],
    "verdicts": {
        "bf16": {"trusted": True, "gemm_case": "gemm_bf16", "reason": None},
        "amp": {
            "trusted": False,
            "gemm_case": "gemm_fp16",
            "reason": "gemm_fp16: FLOPs 0.910 of 2*M*N*K, outside ±2%",
        },
    },
}
POINTS = [
    {
        "env": "local",
        "model": "resnet50",
        "precision": "bf16",
        "batch_size": 128.0,
        "images_per_s": 3012.4,
        "ai": 85.3,
        "ai_source": "ncu",
        "executed_flops": 4.0e14,
        "useful_flops": 3.8e14,
    },
    {
        "env": "local",
        "model": "resnet50",
        "precision": "amp",
        "batch_size": 128.0,
        "images_per_s": 2950.0,
        "ai": 120.0,
        "ai_source": "analytic",
        "executed_flops": float("nan"),
        "useful_flops": 3.7e14,
    },
]


def test_roof_rows_compare_measured_with_datasheet():
    rows = {r[0]: r for r in roof_rows(CEILINGS)}
    assert rows["bf16 compute"] == ["bf16 compute", "750.0 TFLOP/s", "989.4 TFLOP/s", "76%"]
    assert rows["amp compute"][2:] == ["n/a", "n/a"]  # no datasheet row: no share invented
    assert rows["memory bandwidth"] == ["memory bandwidth", "2.80 TB/s", "3.35 TB/s", "84%"]


def test_selftest_rows_give_the_verdict_and_the_failing_counter():
    rows = {r[0]: r for r in selftest_rows(SELFTEST)}
    assert rows["bf16"][1] == "trusted"
    assert "gemm_bf16 ratio 1.000" in rows["bf16"][2] and "copy ratio 1.030" in rows["bf16"][2]
    assert rows["amp"][1].startswith("NOT trusted")
    assert "0.910" in rows["amp"][2]
    assert selftest_rows(None)[0][1] == "not run"


CAPTURES = {
    "local_resnet50_bf16_bs128": {
        "status": "ok",
        "ncu": {"passes": {"kernel": {"wall_s": 212.4}, "step": {"wall_s": 41.6}}},
    },
    "local_resnet50_amp_bs128": {"status": "unavailable", "reason": "profiler_not_loaded"},
}


def test_point_rows_give_analytic_over_ncu_flops_and_what_the_capture_cost():
    rows = point_rows(POINTS, CAPTURES)
    assert rows[0] == [
        "local resnet50 bf16 bs128",
        "3012.4",
        "85.3 (ncu)",
        "0.950",
        "ok, 254 s (kernel pass 212 s, step pass 42 s)",
    ]
    assert rows[1][3:] == ["n/a (no ncu count)", "unavailable: profiler_not_loaded"]
    assert point_rows(POINTS)[0][4] == "not profiled"  # no capture at that batch


def test_capture_cell_without_pass_times_still_says_ok():
    assert capture_cell({"status": "ok", "ncu": {"passes": {"kernel": {"wall_s": 3.0}}}}) == "ok"


def test_summary_has_the_three_tables():
    text = summary_markdown("local", "NVIDIA H100", CEILINGS, SELFTEST, POINTS, CAPTURES)
    assert text.startswith("# gpu-check: env local on NVIDIA H100")
    assert "| ncu capture |" in text and "kernel pass 212 s" in text
    assert sum(line.startswith("|---|") for line in text.splitlines()) == 3


def test_summary_lists_the_ceilings_energy_kernels_and_costs_or_why_none():
    energy = {
        "available": True, "source": "nvml",
        "kernels": [
            {"kind": "idle", "precision": None, "flop": 0, "bytes": 0, "seconds": 1.0,
             "joules": 98.0, "mean_power_w": 98.0},
            {"kind": "gemm", "precision": "bf16", "flop": 7.0e14, "bytes": 2.0e10,
             "seconds": 1.01, "joules": 690.0, "mean_power_w": 683.2},
        ],
        "costs": {"pj_per_flop": {"bf16": 0.84}, "pj_per_byte": 41.0, "static_power_w": 98.0,
                  "max_residual_pct": 0.4},
    }  # fmt: skip
    text = summary_markdown("h100", "H100", {**CEILINGS, "energy": energy}, None, [], {})
    assert "## Energy: the ceilings' metered kernels and the costs fitted on them" in text
    assert "| gemm | bf16 | 700,000 GFLOP | 20.0 GB | 1.01 s | 690.0 J | 683 W |" in text
    assert "Fitted (nvml): pJ/FLOP bf16 0.84; 41 pJ/B; static 98 W; worst residual 0.4%" in text
    off = {"available": False, "reason": "NVML: NVMLError_NotSupported: Not Supported"}
    text = summary_markdown("h100", "H100", {**CEILINGS, "energy": off}, None, [], {})
    assert "Energy not recorded: NVML: NVMLError_NotSupported: Not Supported" in text
    assert "## Energy" not in summary_markdown("h100", "H100", CEILINGS, None, [], {})


def test_ceilings_without_roofs_is_refused_with_the_file_named():
    with pytest.raises(InputError, match="ceilings.json: no 'roofs' list"):
        roof_rows({})


def test_summary_of_another_env_reads_its_ceilings_selftest_and_captures(tmp_path):
    # `gpu_check.py summary --env h100` after the H100 example study: the GPU table's
    # figures from that env's files, in a checkout laid out as this one
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "gpu_check.py").write_text(
        (ROOT / "scripts" / "gpu_check.py").read_text()
    )
    (tmp_path / "workflow").mkdir()
    (tmp_path / "workflow" / "scripts").symlink_to(ROOT / "workflow" / "scripts")
    ncu = tmp_path / "results" / "h100" / "ncu"
    ncu.mkdir(parents=True)
    (ncu.parent / "ceilings.json").write_text(json.dumps(CEILINGS))
    (ncu / "selftest.json").write_text(json.dumps(SELFTEST))
    for stem, capture in CAPTURES.items():
        (ncu / f"{stem.replace('local', 'h100')}.json").write_text(json.dumps(capture))
    header = list(POINTS[0])
    rows = [{**p, "env": "h100"} for p in POINTS] + [{**POINTS[0], "model": "resnet18"}]
    with open(tmp_path / "results" / "roofline_points.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, header)
        writer.writeheader()
        writer.writerows(rows)
    out = subprocess.run(
        [sys.executable, str(tmp_path / "scripts" / "gpu_check.py"), "summary", "--env", "h100"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "results" / "gpu_check_summary.md").read_text()
    assert text.startswith("# gpu-check: env h100 on NVIDIA H100 80GB HBM3")
    assert "| h100 resnet50 bf16 bs128 | 3012.4 | 85.3 (ncu) | 0.950 | ok, 254 s" in text
    assert "unavailable: profiler_not_loaded" in text
    assert "resnet18" not in text  # the other env's point
