"""Fingerprint this machine for one env: results/{env}/env_info.json.

    python workflow/scripts/env_info.py --env local --device auto --out results/local/env_info.json

Refuses (exit 1, nothing written) when the machine does not match what the env
declares (--device, --gpu-name, --cpu-name), so that results are never filed
under the wrong machine. Every measurement checks its machine against the file again
before it measures (dnnroofline.measure.machine_check).
"""

from __future__ import annotations

import argparse
import sys

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic
from dnnroofline.measure.envinfo import DEVICES, check_env_matches, collect_fingerprint


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--env", required=True, help="env name (the config's envs key)")
    ap.add_argument("--device", default="auto", choices=DEVICES, help="the env's declared device")
    ap.add_argument("--gpu-name", default=None, help="substring the GPU name must contain")
    ap.add_argument("--cpu-name", default=None, help="substring the CPU model must contain")
    ap.add_argument(
        "--no-check", action="store_true", help="write the fingerprint without the match check"
    )
    ap.add_argument("--out", required=True, help="output JSON path")
    args = ap.parse_args(argv)
    try:
        fp = collect_fingerprint(args.env, args.device)
        if not args.no_check:
            declared = {"device": args.device, "gpu_name": args.gpu_name, "cpu_name": args.cpu_name}
            check_env_matches(args.env, declared, fp)
    except InputError as exc:
        print(f"env_info: error: {exc}", file=sys.stderr)
        return 1
    write_json_atomic(args.out, fp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
