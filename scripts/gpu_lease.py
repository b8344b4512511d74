"""`make gpu-lease`: a short GPU allocation spent on the most valuable targets first.

    python scripts/gpu_lease.py --plan PLAN --budget-s 600 --out lease \\
        [--configfile CONFIG ...] [--cores all] [--reserve-s 20] [--dry-run]
    python scripts/gpu_lease.py --out lease --take-out results/predictions.csv DEST

PLAN lists groups of Snakemake targets in priority order (docs/gpu.md, "A short
allocation"). Each group runs as one snakemake under the budget left minus the reserve;
after each, results/{env}/ of the measured envs is packed into OUT/results.tar.gz, and
OUT/lease.json and OUT/lease.log say what ran. --take-out copies one file target out of
the archive, refused unless its sha256 is the one lease.json recorded (a prediction to
commit before the next call measures). The logic is dnnroofline.tools.lease.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import sys
from pathlib import Path

import yaml

from dnnroofline.errors import InputError
from dnnroofline.tools import lease

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def study_matrix(configs: list[str], workdir: Path) -> lease.Matrix:
    """The measured envs, their points and run indices, as the Snakefile's STUDY has them
    for these config files (merged in order, with the schema's defaults) on this machine."""
    from snakemake.utils import update_config

    from dnnroofline.study.config import Study
    from dnnroofline.study.schema import checked_config

    config: dict = {}
    for path in configs:
        try:
            update_config(config, yaml.safe_load(Path(path).read_text()) or {})
        except (OSError, yaml.YAMLError) as err:
            raise InputError(f"{path}: cannot read the config: {err}") from None
    checked_config(config, ROOT / "config" / "schema.yaml", configs)
    return matrix_of(Study.here(config, path_exists=lambda p: (workdir / p).exists()))


def matrix_of(study) -> lease.Matrix:
    """The study's measured envs, each env's points and the run indices."""
    envs = tuple(study.measure_envs)
    points = {env: tuple(c.config_key for c in study.configs([env])) for env in envs}
    runs = tuple(sorted({r.run for r in study.runs(envs)}))
    return lease.Matrix(envs, points, runs)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", help="the groups of targets, in priority order")
    p.add_argument("--budget-s", type=float, help="seconds of the allocation")
    p.add_argument("--out", required=True, help="folder for results.tar.gz, lease.json, .log")
    p.add_argument("--configfile", nargs="+", default=[], help="snakemake config files")
    p.add_argument("--cores", default="all")
    p.add_argument("--reserve-s", type=float, default=lease.RESERVE_S, help="kept for packing")
    p.add_argument("--grace-s", type=float, default=lease.GRACE_S, help="SIGINT->TERM->KILL")
    p.add_argument("--directory", default=str(ROOT), help="snakemake's working directory")
    p.add_argument("--snakemake", help="the command in place of snakemake (tests)")
    p.add_argument("--dry-run", action="store_true", help="print the groups, run nothing")
    p.add_argument(
        "--take-out",
        nargs=2,
        metavar=("TARGET", "DEST"),
        help="copy file target TARGET out of OUT's archive to DEST, checked against lease.json",
    )
    args = p.parse_args(argv)
    if not args.take_out and (args.plan is None or args.budget_s is None):
        p.error("--plan and --budget-s are required (unless --take-out)")
    return args


def take_out(out: Path, target: str, dest: str) -> int:
    try:
        sha = lease.take_out(out, target, Path(dest))
    except InputError as err:
        print(f"gpu-lease: error: {err}", file=sys.stderr)
        return 2
    print(f"gpu-lease: {dest}: {target} from {out / lease.ARCHIVE}, sha256 {sha}")
    return 0


def interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.take_out:
        return take_out(Path(args.out), *args.take_out)
    # a scheduler's SIGTERM at its time limit: stop the group, pack, skip the rest
    signal.signal(signal.SIGTERM, interrupt)
    workdir = Path(args.directory).resolve()
    configs = [str(Path(c).resolve()) for c in args.configfile]
    try:
        groups = lease.load_plan(args.plan)
        matrix = study_matrix(configs or [str(workdir / "config" / "config.yaml")], workdir)
    except InputError as err:
        print(f"gpu-lease: error: {err}", file=sys.stderr)
        return 2
    expanded = [(group, lease.expand_group(group, matrix)) for group in groups]
    if args.dry_run:
        print(lease.dry_run(expanded))
        return 0
    if args.snakemake:
        snakemake = shlex.split(args.snakemake)
    else:
        snakemake = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(workdir)]
    record = {
        "host": socket.gethostname(),
        "directory": str(workdir),
        "configs": args.configfile,
        "plan": {"path": args.plan, "groups": [g.__dict__ for g in groups]},
        "envs": list(matrix.envs),
    }
    rows = lease.run_lease(
        lease.Lease(
            groups=expanded,
            budget_s=args.budget_s,
            out=Path(args.out),
            workdir=workdir,
            folders=[f"results/{env}" for env in matrix.envs],
            command=lambda targets: lease.snakemake_command(
                snakemake, configs, targets, args.cores
            ),
            record=record,
            reserve_s=args.reserve_s,
            grace_s=args.grace_s,
            # stages run `python`: this venv's, first on PATH
            env=dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"),
        )
    )
    print(lease.table(rows))
    print(f"gpu-lease: {Path(args.out) / lease.ARCHIVE}, {lease.RECORD}, {lease.LOG}")
    return 0 if lease.lease_ok(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
