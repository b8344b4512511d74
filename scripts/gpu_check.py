"""`make gpu-check`: the counter self-test, ceilings, a small GPU study and the report.

    python3 scripts/gpu_check.py detect    # one line; exit 0 with an NVIDIA GPU, 1 without
    python scripts/gpu_check.py run        # the study of config/gpu_check.yaml, then summary
    python scripts/gpu_check.py summary [--env E]   # the summary table of the results there
    python3 scripts/gpu_check.py wheels --dest DIR --python-version 3.12 [--installed FILE]
                 [--part all|measure]      # the locked wheels for a GPU machine without an index

`detect` and `wheels` use the standard library (and pip) only: they run before anything
is installed.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "config/gpu_check.yaml"
ENV = "local"  # the default env: device auto, so cuda on an NVIDIA machine
SUMMARY = "results/gpu_check_summary.md"
# The glibc the lock is resolved for (make lock: x86_64-manylinux_2_28) and all below it:
# pip download matches each --platform exactly.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 16, -1)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
]


def _package_before_setup():
    """``wheels`` runs with the machine's python3, before any venv exists (make gpu-wheels),
    so the installed package (make setup) is not there yet: import it from its folder."""
    sys.path.insert(0, str(ROOT / "workflow" / "scripts"))


def find_gpu() -> str | None:
    """The NVIDIA GPU's name, or None. nvidia-smi first; the driver's /proc entry else."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is not None and out.returncode == 0:
            gpus = [line for line in out.stdout.splitlines() if line.startswith("GPU ")]
            if gpus:
                return gpus[0].split(":", 1)[1].split("(")[0].strip()
    if Path("/proc/driver/nvidia/version").exists():
        return "an NVIDIA GPU (driver loaded; nvidia-smi not found)"
    return None


def detect() -> int:
    gpu = find_gpu()
    if gpu is None:
        print(
            "gpu-check: no NVIDIA GPU on this machine (no nvidia-smi GPU, no NVIDIA driver); "
            "nothing to check."
        )
        return 1
    print(f"gpu-check: found {gpu}")
    return 0


def summary(env: str = ENV) -> int:
    from dnnroofline.report.gpu_summary import summary_markdown

    results = ROOT / "results"
    ceilings = json.loads((results / env / "ceilings.json").read_text())
    ncu_dir = results / env / "ncu"
    selftest_path = ncu_dir / "selftest.json"
    selftest = json.loads(selftest_path.read_text()) if selftest_path.exists() else None
    captures = {path.stem: json.loads(path.read_text()) for path in ncu_dir.glob(f"{env}_*.json")}
    with open(results / "roofline_points.csv", newline="") as fh:
        points = []
        for row in csv.DictReader(fh):
            for key in ("batch_size", "images_per_s", "ai", "executed_flops", "useful_flops"):
                try:
                    row[key] = float(row[key])
                except (KeyError, ValueError):
                    row[key] = None
            if row["env"] == env:
                points.append(row)
    device = ceilings.get("device_name") or "?"
    text = summary_markdown(env, device, ceilings, selftest, points, captures)
    (ROOT / SUMMARY).write_text(text + "\n")
    print(text)
    print(f"\ngpu-check: summary in {SUMMARY}; report in results/report.html")
    return 0


def requirement_lines(path: Path) -> list[str]:
    """The lines of a requirements file, with its ``-r`` includes in their place."""
    lines = []
    for line in path.read_text().splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) == 2 and parts[0] in ("-r", "--requirement"):
            lines += requirement_lines(path.parent / parts[1])
        else:
            lines.append(line)
    return lines


def wheel_roots(part: str, requirements: Path) -> dict[str, list[str]]:
    """What the GPU machine will install, with requirements.txt's bounds: all of
    requirements.txt, or (``measure``) Snakemake and the measuring stages' packages."""
    from dnnroofline import lockfile
    from dnnroofline.tools import gpu_wheels

    bounds = gpu_wheels.parse_requirements(requirement_lines(requirements), str(requirements))
    if part == "all":
        return bounds
    names = {"snakemake"}
    for env_file in gpu_wheels.MEASURE_ENV_FILES:
        deps = gpu_wheels.env_file_dependencies((ROOT / env_file).read_text())
        names |= set(lockfile.conda_pins({"dependencies": deps}, env_file)) - {"python"}
    return {name: bounds.get(name, []) for name in sorted(names)}


def wheels(
    dest: Path,
    python_version: str | None,
    lock: Path,
    installed: Path | None,
    part: str = "all",
    requirements: Path = ROOT / "requirements.txt",
) -> int:
    """Bring, for the GPU machine's Python on x86_64 Linux, the locked wheels it needs to
    install ``part`` (all of requirements.txt, or what ``snakemake measure`` needs): not
    the torch stack (the machine's own), nor a package whose version on the machine
    (INSTALLED) meets every bound on it. Pure-Python sdists are built into wheels, so that
    pip installs them there without an index. DEST/requirements.txt says what to install."""
    _package_before_setup()
    from dnnroofline import lockfile
    from dnnroofline.errors import InputError
    from dnnroofline.tools import gpu_wheels

    python_version = python_version or lockfile.LOCK_PYTHON
    try:
        pins = lockfile.parse_lock(lock.read_text(), str(lock))
        have = {}
        if installed:
            have = gpu_wheels.parse_installed(installed.read_text(), str(installed))
        roots = wheel_roots(part, requirements)
    except (InputError, OSError) as exc:
        print(f"gpu-wheels: error: {exc}", file=sys.stderr)
        return 2
    wanted = gpu_wheels.wheel_pins(pins, have)
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    target = ["--python-version", python_version, "--implementation", "cp"]
    download = [*pip, "download", "--quiet", "--no-deps", "--dest", str(dest), *target]
    download += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    print(f"gpu-wheels: {len(wanted)} of the {len(pins)} pins in {lock} into {dest}", flush=True)
    rc = subprocess.run([*download, *(f"{n}=={v}" for n, v in wanted.items())]).returncode
    if rc != 0:
        print(f"gpu-wheels: pip download failed (exit {rc})", file=sys.stderr)
        return rc
    for sdist in sorted([*dest.glob("*.tar.gz"), *dest.glob("*.zip")]):
        with tempfile.TemporaryDirectory() as built:
            cmd = [*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", built, str(sdist)]
            rc = subprocess.run(cmd).returncode
            made = list(Path(built).glob("*.whl"))
            if rc != 0 or len(made) != 1 or not made[0].name.endswith("-none-any.whl"):
                print(
                    f"gpu-wheels: {sdist.name} has no wheel on PyPI for Python {python_version} "
                    "and did not build into one pure-Python wheel here: build it on the GPU "
                    "machine's Python, or list it in INSTALLED",
                    file=sys.stderr,
                )
                return rc or 1
            shutil.move(made[0], dest / made[0].name)
        sdist.unlink()
    files = {lockfile.canonical_name(f.name.split("-")[0]): f for f in dest.glob("*.whl")}
    requires = {
        name: gpu_wheels.requires_dist(wheel_metadata(path), python_version)
        for name, path in files.items()
        if name in wanted
    }
    bring, missing = gpu_wheels.wheels_to_bring(roots, requires, have)
    if missing:
        needs = "; ".join(f"{n} (for {', '.join(sorted(set(w)))})" for n, w in missing.items())
        print(
            f"gpu-wheels: needed on Python {python_version} but neither locked nor on the "
            f"machine (INSTALLED): {needs}",
            file=sys.stderr,
        )
        return 1
    for name, path in files.items():
        if name not in bring:
            path.unlink()  # the machine's own meets every bound, or part does not need it
    (dest / "requirements.txt").write_text(
        f"# What make setup WHEELS={dest.name} installs (make gpu-wheels PART={part}): the\n"
        "# machine's own packages where they meet the bounds, else these wheels.\n"
        + "".join(f"{name}{','.join(specs)}\n" for name, specs in sorted(roots.items()))
    )
    kept = sorted(dest.glob("*.whl"))
    size = sum(f.stat().st_size for f in kept) / 2**20
    print(f"gpu-wheels: {len(kept)} wheels, {size:.1f} MiB in {dest} (PART={part})")
    return 0


def wheel_metadata(path: Path) -> str:
    """The METADATA text of a wheel."""
    with zipfile.ZipFile(path) as whl:
        name = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        return whl.read(name).decode("utf-8", errors="replace")


#: What the study makes beyond its measurements needs (the complexity, plots and report):
#: a venv from make gpu-wheels PART=measure lacks them.
ANALYSIS_MODULES = ("fvcore", "matplotlib", "altair", "vl_convert")


def run(cores: str) -> int:
    os.chdir(ROOT)
    if find_gpu() is None:
        return detect() and 0
    missing = [m for m in ANALYSIS_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        print(
            f"gpu-check: this venv lacks {', '.join(missing)}, which the complexity, plots and "
            "report need: its wheels were made for measuring only (make gpu-wheels "
            "PART=measure). Run `snakemake measure` here and analyse elsewhere (docs/gpu.md: "
            "Measure there, analyse here), or bring every wheel (make gpu-wheels PART=all).",
            file=sys.stderr,
        )
        return 1
    steps = [
        ["snakemake", "--cores", cores, "--configfile", CONFIG, "--keep-going"],
        ["snakemake", "--configfile", CONFIG, "--report", "results/report.html"],
    ]
    for cmd in steps:
        print("gpu-check: " + " ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            print(f"gpu-check: {cmd[0]} failed (exit {rc}); see results/*/logs/", file=sys.stderr)
            return rc
    return summary()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["detect", "run", "summary", "wheels"])
    ap.add_argument("--cores", default="all")
    ap.add_argument("--env", default=ENV, help="summary: the env to summarise (default: local)")
    wheel_args = ap.add_argument_group("wheels")
    wheel_args.add_argument("--dest", type=Path, default=Path("wheels"))
    wheel_args.add_argument("--python-version", help="the GPU machine's (default: the lock's)")
    wheel_args.add_argument("--lock", type=Path, default=ROOT / "requirements.lock")
    wheel_args.add_argument(
        "--installed",
        type=Path,
        help="its pip freeze (or names): what meets the bounds is left out",
    )
    wheel_args.add_argument(
        "--part",
        choices=["all", "measure"],
        default="all",
        help="all of requirements.txt, or what `snakemake measure` needs",
    )
    wheel_args.add_argument("--requirements", type=Path, default=ROOT / "requirements.txt")
    args = ap.parse_args(argv)
    if args.command == "detect":
        return detect()
    if args.command == "wheels":
        return wheels(
            args.dest, args.python_version, args.lock, args.installed, args.part, args.requirements
        )
    if args.command == "summary":
        return summary(args.env)
    return run(args.cores)


if __name__ == "__main__":
    sys.exit(main())
