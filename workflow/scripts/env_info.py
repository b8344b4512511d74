"""Fingerprint this machine for one env: results/{env}/env_info.json.

    python workflow/scripts/env_info.py --env local --device auto --out results/local/env_info.json

Refuses (exit 1, nothing written) when the machine does not match what the env
declares (--device, --gpu-name, --cpu-name), so that results are never filed
under the wrong machine.

    python workflow/scripts/env_info.py --env local --device cpu \\
        --verify results/local/env_info.json

checks, writing nothing, that this machine is the one an existing env_info.json
describes (and still what the env declares): measurement jobs run it first, so a
stale env_info.json from another machine never lets them file results under it.
"""

from __future__ import annotations

import argparse
import sys

from dnnroofline.errors import InputError
from dnnroofline.io import read_json, write_json_atomic
from dnnroofline.measure.envinfo import (
    DEVICES,
    check_env_matches,
    check_same_machine,
    collect_fingerprint,
)


def verify(env: str, path: str, fp: dict) -> None:
    """InputError unless this machine (fingerprint ``fp``) is the one ``path`` describes."""
    try:
        recorded = read_json(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"--verify {path!r}: cannot read it: {exc}") from exc
    if not isinstance(recorded, dict):
        raise InputError(f"--verify {path!r}: not a JSON object")
    gpus = fp.get("gpus") or []
    here = {
        "device": fp.get("device"),
        "cpu_model": fp.get("cpu_model"),
        "gpu_name": gpus[0].get("name") if gpus and fp.get("device") == "cuda" else None,
        "host": fp.get("host"),
    }
    check_same_machine(env, recorded, here, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--env", required=True, help="env name (the config's envs key)")
    ap.add_argument("--device", default="auto", choices=DEVICES, help="the env's declared device")
    ap.add_argument("--gpu-name", default=None, help="substring the GPU name must contain")
    ap.add_argument("--cpu-name", default=None, help="substring the CPU model must contain")
    ap.add_argument(
        "--no-check", action="store_true", help="write the fingerprint without the match check"
    )
    out = ap.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", help="output JSON path")
    out.add_argument(
        "--verify",
        metavar="ENV_INFO_JSON",
        help="write nothing; refuse unless this machine is the one this env_info.json describes",
    )
    args = ap.parse_args(argv)
    try:
        fp = collect_fingerprint(args.env, args.device)
        if not args.no_check:
            declared = {"device": args.device, "gpu_name": args.gpu_name, "cpu_name": args.cpu_name}
            check_env_matches(args.env, declared, fp)
        if args.verify:
            verify(args.env, args.verify, fp)
    except InputError as exc:
        print(f"env_info: error: {exc}", file=sys.stderr)
        return 1
    if args.verify:
        print(f"env_info: this machine ({fp['host']}) is env {args.env!r} of {args.verify}")
        return 0
    write_json_atomic(args.out, fp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
