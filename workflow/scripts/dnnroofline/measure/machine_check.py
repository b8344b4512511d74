"""The check every measurement makes before it measures: this machine is what its env
declares and the one the env's env_info.json describes.

A stale env_info.json (a checkout copied with its results, another Slurm node type) must
never let this machine's numbers be filed under another machine's env. ceilings.py and
op_class_sweep.py run it in their own process (--env-info), which saves each of those jobs a
second Python and torch start; the driver reads the file with :func:`read_env_info`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping

from dnnroofline.errors import InputError
from dnnroofline.measure.envinfo import (
    DEVICES,
    check_env_matches,
    check_same_machine,
    collect_fingerprint,
)


def read_env_info(path: str) -> dict:
    """The env's env_info.json given as --env-info, or an InputError naming it."""
    try:
        with open(path) as fh:
            recorded = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"--env-info {path!r}: cannot read it: {exc}") from exc
    if not isinstance(recorded, dict):
        raise InputError(f"--env-info {path!r}: not a JSON object")
    return recorded


def check_env_info_file(env: str, path: str, fingerprint: Mapping) -> None:
    """InputError unless this machine (its ``fingerprint``) is the one ``path`` describes."""
    recorded = read_env_info(path)
    gpus = fingerprint.get("gpus") or []
    here = {
        "device": fingerprint.get("device"),
        "cpu_model": fingerprint.get("cpu_model"),
        "gpu_name": gpus[0].get("name") if gpus and fingerprint.get("device") == "cuda" else None,
        "host": fingerprint.get("host"),
    }
    check_same_machine(env, recorded, here, path)


def verify_machine(env: str, declared: Mapping, env_info_path: str) -> dict:
    """This machine's fingerprint, after refusing (InputError) a machine that is not what
    env ``env`` declares (``declared``: device, gpu_name, cpu_name) or not the one its
    env_info.json (``env_info_path``) describes."""
    fingerprint = collect_fingerprint(env, declared.get("device") or "auto")
    check_env_matches(env, declared, fingerprint)
    check_env_info_file(env, env_info_path, fingerprint)
    return fingerprint


def add_machine_check_args(ap: argparse.ArgumentParser) -> None:
    """A measurement script's flags for :func:`verify_machine` (rules/common.smk's
    declared_machine_flags writes the declared ones)."""
    ap.add_argument(
        "--env-info",
        metavar="ENV_INFO_JSON",
        help="refuse to measure unless this machine is the one this env_info.json describes",
    )
    ap.add_argument(
        "--declared-device", default="auto", choices=DEVICES, help="the env's declared device"
    )
    ap.add_argument("--gpu-name", default=None, help="substring the GPU name must contain")
    ap.add_argument("--cpu-name", default=None, help="substring the CPU model must contain")


def verify_machine_from_args(env: str, args: argparse.Namespace) -> None:
    """:func:`verify_machine` with :func:`add_machine_check_args`' flags; nothing to check
    without --env-info (a measurement run by hand)."""
    if args.env_info:
        declared = {
            "device": args.declared_device,
            "gpu_name": args.gpu_name,
            "cpu_name": args.cpu_name,
        }
        verify_machine(env, declared, args.env_info)
