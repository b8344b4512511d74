"""One known kernel for the ncu counter self-test: a GEMM (2*M*N*K FLOPs) or a copy
kernel (bytes read + bytes written), warmed up, then run once between
cudaProfilerStart and cudaProfilerStop (the window the ncu stage profiles).

    python workflow/scripts/selftest_kernels.py --case gemm_bf16 --kind gemm \\
        --precision bf16 --m 4096 --n 4096 --k 4096 --profile-step --out run.json

Exit 0 with a run JSON (status ok or error), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic
from dnnroofline.ncu.selftest import run_case


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", required=True)
    ap.add_argument("--kind", required=True, choices=["gemm", "copy"])
    ap.add_argument("--precision", help="gemm: fp32 (TF32 off) | tf32 | fp16 | bf16")
    ap.add_argument("--m", type=int)
    ap.add_argument("--n", type=int)
    ap.add_argument("--k", type=int)
    ap.add_argument("--bytes", type=int, help="copy: bytes read (and written)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile-step", action="store_true", help="bracket the measured call")
    ap.add_argument("--out", required=True, help="run JSON to write")
    args = ap.parse_args(argv)
    case: dict = {"case": args.case, "kind": args.kind}
    if args.kind == "gemm":
        if not (args.precision and args.m and args.n and args.k):
            ap.error("--kind gemm needs --precision, --m, --n and --k")
        case.update(precision=args.precision, m=args.m, n=args.n, k=args.k)
    else:
        if not args.bytes:
            ap.error("--kind copy needs --bytes")
        case.update(precision=None, bytes=args.bytes)
    try:
        record = run_case(case, warmup=args.warmup, profile=args.profile_step)
    except InputError as exc:
        record = {"status": "error", "message": str(exc), "case": case}
    except Exception as exc:  # noqa: BLE001 - recorded, the stage reads the status
        record = {
            "status": "error",
            "message": f"{type(exc).__name__}: {exc}",
            "case": case,
            "traceback": traceback.format_exc(limit=6),
        }
    write_json_atomic(args.out, record)
    print(f"selftest_kernels: {args.case}: {record['status']} -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
