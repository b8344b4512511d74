"""The locks: requirements.txt, the lock files, the conda env files and the Makefile agree,
and the report says whether a machine's versions match the lock."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from dnnroofline import lockfile
from dnnroofline.errors import InputError
from dnnroofline.tools import gpu_wheels

ROOT = Path(__file__).resolve().parents[1]
LOCK = lockfile.parse_lock((ROOT / "requirements.lock").read_text(), "requirements.lock")
DEV_LOCK = lockfile.parse_lock(
    (ROOT / "requirements-dev.lock").read_text(), "requirements-dev.lock"
)
ENV_FILES = sorted((ROOT / "envs").glob("*.yaml"))


def requirements(path: Path) -> list[Requirement]:
    """The requirements of a requirements*.txt, following its -r includes."""
    out = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-r "):
            out += requirements(path.parent / line[3:].strip())
        elif line:
            out.append(Requirement(line))
    return out


def env_file_disagreements(spec: dict, pins: dict[str, str], where: str) -> list[str]:
    """How a conda env file disagrees with the lock: a locked package left unpinned or
    pinned to another version (python is the lock's LOCK_PYTHON). Empty: it agrees."""
    problems = []
    for name, version in lockfile.conda_pins(spec, where).items():
        conda = lockfile.CONDA_NAMES.get(name, name)
        if name == "python":
            if version != lockfile.LOCK_PYTHON:
                problems.append(
                    f"{where}: python={version} but the lock is for {lockfile.LOCK_PYTHON}"
                )
        elif name not in pins:
            problems.append(f"{where}: {conda} is not in the lock")
        elif version is None:
            problems.append(f"{where}: {conda} is not pinned (the lock has =={pins[name]})")
        elif version != pins[name]:
            problems.append(f"{where}: {conda}=={version} but the lock has =={pins[name]}")
    return problems


# --------------------------------------------------------------------------- the files agree


@pytest.mark.parametrize(
    ("txt", "pins"), [("requirements.txt", LOCK), ("requirements-dev.txt", DEV_LOCK)]
)
def test_lock_satisfies_requirements(txt, pins):
    reqs = requirements(ROOT / txt)
    assert len(reqs) >= 15  # the file was read, includes followed
    for req in reqs:
        name = lockfile.canonical_name(req.name)
        assert name in pins, f"{txt}: {req.name} is not in the lock (run make lock)"
        assert Version(pins[name]) in req.specifier, (
            f"{txt}: {req} but the lock has {name}=={pins[name]} (run make lock)"
        )


def test_dev_lock_extends_the_runtime_lock_with_the_same_versions():
    assert {k: DEV_LOCK.get(k) for k in LOCK} == LOCK
    assert {"pytest", "ruff", "snakefmt", "snakemake-executor-plugin-slurm"} <= set(DEV_LOCK)
    assert "pytest" not in LOCK


def test_lock_holds_torch_at_the_tested_release():
    held = dict(
        line.split("==")
        for line in (ROOT / "lock-constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert held == {"torch": LOCK["torch"], "torchvision": LOCK["torchvision"]}
    # torch's Linux x86_64 wheel brings its CUDA libraries: the lock covers that platform
    assert any(name.startswith("nvidia-") for name in LOCK)


@pytest.mark.parametrize("env_file", ENV_FILES, ids=[p.name for p in ENV_FILES])
def test_env_file_pins_the_locked_versions(env_file):
    spec = yaml.safe_load(env_file.read_text())
    assert env_file_disagreements(spec, LOCK, env_file.name) == []
    assert lockfile.conda_pins(spec, env_file.name)["python"] == lockfile.LOCK_PYTHON


def test_env_file_disagreements_name_each_problem():
    spec = {
        "dependencies": [
            "python=3.12",
            "pytorch>=2.4",
            "numpy==1.26.4",
            "pandas=3.1.1",
            "scipy",
            {"pip": ["x"]},
        ]
    }
    pins = {"torch": "2.14.1", "numpy": "2.4.6", "pandas": "3.1.1"}
    assert env_file_disagreements(spec, pins, "train.yaml") == [
        "train.yaml: python=3.12 but the lock is for 3.11",
        "train.yaml: pytorch is not pinned (the lock has ==2.14.1)",
        "train.yaml: numpy==1.26.4 but the lock has ==2.4.6",
        "train.yaml: scipy is not in the lock",
    ]
    with pytest.raises(InputError, match="bad.yaml: no 'dependencies' list"):
        lockfile.conda_pins({"channels": []}, "bad.yaml")


def _make_n(*args: str) -> str:
    proc = subprocess.run(
        ["make", "-n", "--no-print-directory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_make_installs_from_the_locks(tmp_path):
    venv = f"VENV={tmp_path / 'v'}"
    dev = _make_n("setup-dev", venv)
    assert "pip install -q --require-hashes -r requirements.lock" in dev
    assert "pip install -q --require-hashes -r requirements-dev.lock" in dev
    assert "-r requirements.txt" not in dev
    # a GPU machine's own torch (WHEELS=dir): the bounds, from dir only, and said so
    wheels = _make_n("setup", venv, f"WHEELS={tmp_path}")
    assert f"--no-index --find-links {tmp_path} -r requirements.txt" in wheels
    assert "requirements.lock is not applied" in wheels
    assert "--require-hashes" not in wheels
    # wheels made by make gpu-wheels say what they are for (PART=measure: measuring only)
    (tmp_path / "requirements.txt").write_text("snakemake<10,>=9.19\n")
    wheels = _make_n("setup", venv, f"WHEELS={tmp_path}")
    assert f"--no-index --find-links {tmp_path} -r {tmp_path}/requirements.txt" in wheels


def test_plain_make_lists_the_targets_and_builds_nothing(tmp_path):
    proc = subprocess.run(
        ["make", "--no-print-directory", f"VENV={tmp_path / 'v'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "v").exists()  # the default goal is the list, not a venv
    listed = re.findall(r"^make ([a-z-]+)$", proc.stdout, re.M)
    assert listed[:2] == ["study", "test"]  # the README's two commands first
    assert set(listed) == {
        "study", "test", "check", "gpu-check", "gpu-wheels", "gpu-lease", "lint", "setup",
        "setup-dev", "help", "lock", "clean",
    }  # fmt: skip
    # each with its own text, from the ## lines above it (gpu-wheels: variables between)
    assert "make study\n    The default study on this machine" in proc.stdout
    assert "make gpu-wheels\n    For a GPU machine without a package index" in proc.stdout
    assert "make lock\n    Rewrite the locks" in proc.stdout


@pytest.mark.build
def test_wheels_venv_sees_the_packages_of_a_python_that_is_itself_a_venv(tmp_path):
    # a GPU image's python is often a venv (/opt/torch/.venv): --system-site-packages alone
    # gives the base interpreter's packages, not that venv's torch
    host = tmp_path / "host"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(host)], check=True)
    host_site = subprocess.run(
        [host / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(host_site) / "host_only_marker.py").write_text("WHERE = 'host venv'\n")
    venv = tmp_path / "v"
    make = ["make", "--no-print-directory", f"VENV={venv}", f"PYTHON={host / 'bin' / 'python'}"]
    for wheels, found in ((f"WHEELS={tmp_path}", "host venv"), ("WHEELS=", "missing")):
        subprocess.run(["rm", "-rf", str(venv)], check=True)
        subprocess.run(
            [*make, wheels, f"{venv}/bin/python"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            timeout=120,
        )
        seen = subprocess.run(
            [
                venv / "bin" / "python",
                "-c",
                "import importlib.util as u; print('host venv' if u.find_spec('host_only_marker') "
                "else 'missing')",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert seen == found, wheels


def test_make_gpu_wheels_passes_its_settings_on(tmp_path):
    out = _make_n("gpu-wheels", f"WHEELS={tmp_path}", "GPU_PYTHON=3.12", "INSTALLED=freeze.txt")
    assert f"wheels --dest {tmp_path} --lock requirements.lock" in out
    assert "--python-version 3.12 --part all --installed freeze.txt" in out
    assert "--part measure" in _make_n("gpu-wheels", "PART=measure")
    assert f"--python-version {lockfile.LOCK_PYTHON} --part all \n" in _make_n("gpu-wheels") + "\n"


def test_make_dev_setup_with_wheels_stays_off_the_index(tmp_path):
    out = _make_n("setup-dev", f"VENV={tmp_path / 'v'}", f"WHEELS={tmp_path}")
    assert f"--no-index --find-links {tmp_path} -r requirements-dev.txt" in out


def test_make_lock_targets_the_locked_python_and_platform(tmp_path):
    out = _make_n("lock", f"LOCK_TOOLS={tmp_path / 'tools'}")
    compiles = [line for line in out.splitlines() if " pip compile " in line]
    assert len(compiles) == 2
    for line in compiles:
        assert f"--python-version {lockfile.LOCK_PYTHON} " in line
        assert "--python-platform x86_64-manylinux_2_28" in line
        assert "--generate-hashes" in line and "-c lock-constraints.txt" in line
    assert compiles[0].endswith("requirements.txt -o requirements.lock")
    assert compiles[1].endswith(
        "requirements-dev.txt -c requirements.lock -o requirements-dev.lock"
    )
    assert "--upgrade" not in out
    assert "--upgrade" in _make_n("lock", f"LOCK_TOOLS={tmp_path / 'tools'}", "UPGRADE=1")


# --------------------------------------------------------------------------- parse_lock


GOOD = """\
# This file was autogenerated by uv via the following command:
#    make lock
PyYAML==6.0.3 \\
    --hash=sha256:aa \\
    --hash=sha256:bb
    # via -r requirements.txt
torch==2.14.1 --hash=sha256:cc
"""


def test_parse_lock_reads_hashed_pins():
    assert lockfile.parse_lock(GOOD) == {"pyyaml": "6.0.3", "torch": "2.14.1"}
    assert LOCK["torch"] == "2.14.1" and len(LOCK) > 50


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("numpy>=1.26 \\\n    --hash=sha256:aa\n", r"x.lock line 1: 'numpy>=1.26' is not an exact"),
        ("numpy==2.4.6\n", r"x.lock: no --hash for numpy; pip --require-hashes refuses it"),
        ("--hash=sha256:aa\n", r"x.lock line 1: a --hash before any requirement"),
        (
            "numpy==2.4.6 --hash=sha256:a\n--index-url https://x\n",
            r"x.lock line 2: option '--index-url' in a lock file",
        ),
        (
            "numpy==1 --hash=sha256:a\nNumPy==2 --hash=sha256:b\n",
            r"x.lock line 2: numpy is pinned twice",
        ),
        ("# only a comment\n", r"x.lock: no pinned packages"),
    ],
)
def test_parse_lock_refuses_what_pip_would_not_install_exactly(text, message):
    with pytest.raises(InputError, match=message):
        lockfile.parse_lock(text, "x.lock")


# --------------------------------------------------------------------------- gpu wheels


def test_parse_installed_reads_pip_freeze_and_bare_names():
    freeze = (
        "PyYAML==6.0.3\nfoo @ file:///wheels/foo.whl\n-e git+https://x#egg=y\n"
        "bar[cli] == 1.0\n# c\n\nnumpy\n"
    )
    assert gpu_wheels.parse_installed(freeze, "freeze.txt") == {
        "pyyaml": "6.0.3",
        "foo": None,
        "bar": "1.0",
        "numpy": None,
    }
    with pytest.raises(InputError, match=r"freeze.txt line 2: 'numpy>=2' is not a package name"):
        gpu_wheels.parse_installed("six==1.17\nnumpy>=2\n", "freeze.txt")


def test_wheel_pins_download_all_but_the_torch_stack_and_what_the_machine_has_at_that_version():
    pins = {
        "torch": "2.14.1",
        "torchvision": "0.29.1",
        "triton": "3.7",
        "nvidia-cublas": "13",
        "cuda-bindings": "13",
        "snakemake": "9.27.1",
        "packaging": "25.0",
        "numpy": "2.4.6",
        "pandas": "3.1.1",
    }
    installed = {"numpy": "2.4.6", "packaging": "26.3", "pandas": None, "torch": "2.11.0"}
    # candidates: whether packaging 26.3 or an unknown pandas will do is for wheels_to_bring
    assert gpu_wheels.wheel_pins(pins, installed) == {
        "packaging": "25.0",
        "pandas": "3.1.1",
        "snakemake": "9.27.1",
    }
    wanted = gpu_wheels.wheel_pins(LOCK, {})
    assert {"snakemake", "fvcore", "altair", "vl-convert-python"} <= set(wanted)
    assert not {"torch", "torchvision", "triton"} & set(wanted)
    assert not any(n.startswith(("nvidia-", "cuda-")) for n in wanted)


METADATA = """Metadata-Version: 2.1
Name: snakemake
Requires-Dist: packaging<26,>=24.0
Requires-Dist: pulp<3.4,>=2.3.1
Requires-Dist: tomli; python_version < "3.11"
Requires-Dist: pytest; extra == "tests"
Requires-Dist: pywin32; sys_platform == "win32"
Requires-Dist: numpy>=1.20
"""


def test_requires_dist_keeps_what_applies_on_that_python_on_linux():
    assert gpu_wheels.requires_dist(METADATA, "3.12") == [
        ("packaging", "<26,>=24.0"),
        ("pulp", "<3.4,>=2.3.1"),
        ("numpy", ">=1.20"),
    ]
    assert ("tomli", "") in gpu_wheels.requires_dist(METADATA, "3.10")


def test_machine_meets_bounds_and_an_unknown_version_meets_floors_not_caps():
    assert gpu_wheels.machine_meets("2.5.2", [">=1.26", ">=1.20"])
    assert gpu_wheels.machine_meets("2.11.0+cu130", [">=2.4"])  # a local label is a build
    assert not gpu_wheels.machine_meets("26.3", ["<26,>=24.0"])
    assert gpu_wheels.machine_meets(None, [">=1.26", ""])
    assert not gpu_wheels.machine_meets(None, ["<26,>=24.0"])
    assert not gpu_wheels.machine_meets(None, ["!=3.0"])


def test_parse_requirements_reads_names_and_bounds_and_names_a_bad_line():
    lines = ["# c", "snakemake>=9.19,<10    # 9.19: x", "torch>=2.4", "-r other.txt", "", "PyYAML"]
    assert gpu_wheels.parse_requirements(lines, "r.txt") == {
        "snakemake": ["<10,>=9.19"],
        "torch": [">=2.4"],
        "pyyaml": [],
    }
    with pytest.raises(InputError, match=r"r.txt line 2: 'numpy >>= 2' is not a requirement"):
        gpu_wheels.parse_requirements(["six", "numpy >>= 2"], "r.txt")


def test_env_file_dependencies_read_as_yaml_does():
    for path in sorted((ROOT / "envs").glob("*.yaml")):
        text = path.read_text()
        assert gpu_wheels.env_file_dependencies(text) == yaml.safe_load(text)["dependencies"]


REQUIRES = {
    "snakemake": [("packaging", "<26,>=24.0"), ("pulp", "<3.4,>=2.3.1"), ("pyyaml", "")],
    "packaging": [],
    "pulp": [],
    "pyyaml": [],
    "fvcore": [("numpy", ""), ("yacs", ">=0.1.6")],
    "yacs": [("pyyaml", "")],
    "numpy": [],
}
ROOTS = {"snakemake": ["<10,>=9.19"], "fvcore": [], "numpy": [">=1.26"], "torch": [">=2.4"]}


def test_wheels_to_bring_leave_out_what_the_machine_meets_the_bounds_with():
    # the GPU image: numpy 2.5.2 (not the locked 2.4.6) meets every bound; packaging 26.3
    # breaks snakemake's <26; torch is the machine's own whatever it is
    machine = {"numpy": "2.5.2", "packaging": "26.3", "pyyaml": "6.0.4", "torch": "2.11.0"}
    bring, missing = gpu_wheels.wheels_to_bring(ROOTS, REQUIRES, machine)
    assert bring == {"snakemake", "packaging", "pulp", "fvcore", "yacs"} and missing == {}
    # nothing known of the machine: everything but the torch stack
    bring, _ = gpu_wheels.wheels_to_bring(ROOTS, REQUIRES, {})
    assert bring == set(REQUIRES)
    # names without versions (the GPU image's package list): floors met, caps not
    names = dict.fromkeys(["numpy", "packaging", "pyyaml", "pulp", "yacs"])
    bring, _ = gpu_wheels.wheels_to_bring(ROOTS, REQUIRES, names)
    assert bring == {"snakemake", "fvcore", "packaging", "pulp"}


def test_wheels_to_bring_follow_only_what_is_brought_and_name_what_cannot_be():
    # fvcore on the machine (meets its bounds): its yacs is the machine's concern
    machine = {"fvcore": "0.1.5", "numpy": "2.5.2", "torch": "2.11.0"}
    bring, _ = gpu_wheels.wheels_to_bring({"fvcore": [], "numpy": []}, REQUIRES, machine)
    assert bring == set()
    # a dependency that is neither locked (downloadable) nor on the machine
    roots = {"snakemake": []}
    requires = {"snakemake": [("tomli", ""), ("torch", ">=3")]}
    bring, missing = gpu_wheels.wheels_to_bring(roots, requires, {})
    assert bring == {"snakemake"} and missing == {"tomli": ["snakemake"]}


# --------------------------------------------------------------------------- machine vs lock

PINS = {"torch": "2.14.1", "numpy": "2.4.6", "pyyaml": "6.0.3", "snakemake": "9.27.1"}


def test_version_differences_lists_each_package_that_differs():
    info = {
        "python": "3.12.1",
        "packages": {"torch": "2.14.1+cpu", "NumPy": "2.4.6", "PyYAML": "6.0.2", "extra": "1"},
    }
    diffs, compared = lockfile.version_differences(info, PINS)
    # snakemake is not installed in this env (a per-stage conda env): not compared
    assert compared == 3  # numpy, pyyaml, torch (and python, not counted)
    assert diffs == [
        ("python", "3.12.1", "3.11.*"),
        ("pyyaml", "6.0.2", "6.0.3"),
        ("torch", "2.14.1+cpu", "2.14.1"),
    ]


def test_old_env_info_compares_torch_release_only():
    # no `packages`: torch's __version__ carries +cu130 on PyPI's own wheel
    info = {"python": "3.11.7", "torch": "2.14.1+cu130", "torchvision": "0.28.0"}
    assert lockfile.machine_versions(info) == (
        {"torch": "2.14.1", "torchvision": "0.28.0"},
        False,
    )
    diffs, compared = lockfile.version_differences(info, {**PINS, "torchvision": "0.29.1"})
    assert (diffs, compared) == ([("torchvision", "0.28.0", "0.29.1")], 2)


def lock_part(env_infos, pins):
    from dnnroofline.report.render import fragment

    return str(fragment("parts/lock_match.html", lock=lockfile.lock_match(env_infos, pins)))


def test_lock_match_says_match_or_lists_differences():
    same = {"python": "3.11.4", "packages": dict(PINS)}
    html = lock_part({"local": same}, PINS)
    assert "Env <b>local</b>: Python 3.11.4 and all 4 locked packages it has match" in html
    assert "<table>" not in html
    other = {"python": "3.11.4", "packages": {**PINS, "torch": "2.13.0"}}
    html = lock_part({"local": same, "gcp_l4": other}, PINS)
    assert "Env <b>gcp_l4</b>: 1 version differs from the lock (4 locked packages and " in html
    assert "<td>gcp_l4</td><td>torch</td><td>2.13.0</td><td>2.14.1</td>" in html
    assert "No lock file was given" in lock_part({"local": same}, None)
