"""The counter self-test, pure part: kernels whose answer is known, and the verdict.

Before the study's captures, the ncu stage profiles, with the same metric set
and the same two passes (:data:`dnnroofline.ncu.command.PASSES`):

* one large GEMM per precision of the study: ``C = A @ B`` with A of M x K and B
  of K x N. It does 2*M*N*K FLOPs (one multiply and one add per term). fp32 runs
  with TF32 off (CUDA cores, FFMA), tf32/fp16/bf16 on tensor cores
  (``sm__ops_path_tensor_*``). Checked: ``totals.flop.total`` of the kernel pass,
  within :data:`FLOP_TOLERANCE`.
* a copy of N bytes by a kernel on the SMs (``torch.neg(src, out=dst)``): DRAM bytes
  = N read + N written. Checked: ``totals.bytes.dram`` of the step pass (the pass the
  study's bytes come from), within :data:`DRAM_TOLERANCE`. Not ``dst.copy_(src)``: on
  CUDA that is a ``cudaMemcpyAsync``, no kernel, which ncu's kernel pass never sees
  (``No kernels were profiled``), so the case would fail on every GPU.

A study precision's counters are trusted when its GEMM and the copy pass. When
not, the study's ncu points of that precision fall back to the analytic AI, and
the reason names the failed counter and by how much (:func:`verdict_for`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from dnnroofline.errors import InputError
from dnnroofline.study.precisions import COMPUTE_DTYPE, TORCH_DTYPE, require_known

FLOP_TOLERANCE = 0.02
DRAM_TOLERANCE = 0.10

GEMM_SIZE = 4096  # M = N = K: 1.37e11 FLOPs, tens of ms even in fp32 on a T4
COPY_BYTES = 512 * 2**20  # 512 MiB read + 512 MiB written: ten times any L2


def case_name(kind: str, precision: str | None = None) -> str:
    return f"gemm_{precision}" if kind == "gemm" else "copy"


def cases_for(study_precisions: Sequence[str]) -> list[dict]:
    """The self-test cases for a study's precisions: one GEMM each, then the copy."""
    gemms = []
    for p in study_precisions:
        g = COMPUTE_DTYPE[require_known(p, "self-test")]
        if g not in gemms:
            gemms.append(g)
    cases = [
        {
            "case": case_name("gemm", g),
            "kind": "gemm",
            "precision": g,
            "m": GEMM_SIZE,
            "n": GEMM_SIZE,
            "k": GEMM_SIZE,
        }
        for g in gemms
    ]
    cases.append({"case": "copy", "kind": "copy", "precision": None, "bytes": COPY_BYTES})
    return cases


def expected(case: Mapping) -> tuple[str, float, float]:
    """(quantity checked, expected value, relative tolerance) of one case."""
    if case["kind"] == "gemm":
        return "flop", 2.0 * case["m"] * case["n"] * case["k"], FLOP_TOLERANCE
    if case["kind"] == "copy":
        return "dram_bytes", 2.0 * case["bytes"], DRAM_TOLERANCE
    raise InputError(f"self-test case {case.get('case')!r}: unknown kind {case.get('kind')!r}")


def check_case(case: Mapping, parsed: Mapping | None) -> dict:
    """One case's record: what was expected, what ncu counted, and whether it is within tolerance.

    ``parsed`` is the stage's JSON for the case (both passes combined). A capture
    that is not ``ok`` fails the case with ncu's reason.
    """
    quantity, want, tol = expected(case)
    rec = {
        **case,
        "quantity": quantity,
        "expected": want,
        "measured": None,
        "ratio": None,
        "rel_error": None,
        "tolerance": tol,
        "pass": "kernel" if quantity == "flop" else "step",
        "ok": False,
        "reason": None,
    }
    if parsed is None:
        rec["reason"] = "no capture"
        return rec
    status = parsed.get("status", "ok")
    totals = parsed.get("totals") or {}
    got = (totals.get("flop") or {}).get("total") if quantity == "flop" else None
    if quantity == "dram_bytes":
        got = (totals.get("bytes") or {}).get("dram")
    if quantity == "flop":
        rec["flop_by_path"] = dict(totals.get("flop") or {})
    else:
        rec["kernel_pass_dram_bytes"] = (
            (parsed.get("kernel_pass_totals") or {}).get("bytes") or {}
        ).get("dram")
    if got is None:
        why = parsed.get("message") or "the counter is null"
        rec["reason"] = f"capture {status}: {why}" if status != "ok" else why
        return rec
    rec["measured"] = float(got)
    rec["ratio"] = float(got) / want
    rec["rel_error"] = rec["ratio"] - 1.0
    what = "FLOPs" if quantity == "flop" else "DRAM bytes"
    if status not in ("ok", "missing_counters") and status is not None:
        rec["reason"] = f"capture {status}: {parsed.get('message')}"
        return rec
    rec["ok"] = abs(rec["rel_error"]) <= tol
    if not rec["ok"]:
        rec["reason"] = (
            f"{case['case']}: ncu {what} {got:.6g} vs expected {want:.6g} "
            f"({rec['rel_error']:+.1%}, tolerance +-{tol:.0%})"
        )
    return rec


def evaluate(
    study_precisions: Sequence[str], records: Sequence[Mapping], env: str | None = None
) -> dict:
    """The self-test JSON: every case, and a verdict per study precision."""
    by_case = {r["case"]: r for r in records}
    copy = by_case.get("copy")
    verdicts = {}
    for p in study_precisions:
        gemm = by_case.get(case_name("gemm", COMPUTE_DTYPE[p]))
        failed = [r for r in (gemm, copy) if r is None or not r["ok"]]
        reasons = []
        for r in failed:
            if r is None:
                reasons.append("case not run")
            else:
                reasons.append(r["reason"] or f"{r['case']} failed")
        verdicts[p] = {
            "trusted": not failed,
            "gemm_case": case_name("gemm", COMPUTE_DTYPE[p]),
            "reason": "; ".join(reasons) or None,
        }
    return {
        "env": env,
        "tolerances": {"flop": FLOP_TOLERANCE, "dram_bytes": DRAM_TOLERANCE},
        "cases": list(records),
        "verdicts": verdicts,
    }


#: In the work dir while a self-test runs: the cases it finished, and under what.
PROGRESS_FILE = "progress.json"


def progress_key(ncu: str, python: str, fingerprint: str | None, cc: str | None) -> dict:
    """What a finished case must share with this run to be kept: the same ncu, the same
    driver python, and the same machine (its env_info.json's digest, or the given CC)."""
    return {"ncu": ncu, "python": python, "fingerprint": fingerprint, "compute_capability": cc}


def kept_cases(progress: object, key: Mapping, cases: Sequence[Mapping]) -> set[str]:
    """The cases an interrupted self-test finished under ``key`` (its ``progress``): their
    captures are read again, not re-measured. A self-test that ended leaves no progress,
    so a forced re-run measures every case afresh."""
    if not isinstance(progress, Mapping) or progress.get("key") != dict(key):
        return set()
    done = progress.get("cases")
    if not isinstance(done, Mapping):
        return set()
    return {c["case"] for c in cases if done.get(c["case"]) == dict(c)}


def verdict_for(selftest: Mapping | None, precision: str, where: str = "selftest.json") -> dict:
    """``{"trusted": bool, "reason": str | None}`` for a study precision.

    No self-test at all (``None``) is trusted with a note, so a capture made by
    hand still parses; a self-test that lacks the precision is not trusted.
    """
    if selftest is None:
        return {"trusted": True, "reason": None, "checked": False}
    verdicts = selftest.get("verdicts")
    if not isinstance(verdicts, Mapping):
        raise InputError(f"{where}: no 'verdicts' object")
    v = verdicts.get(precision)
    if not isinstance(v, Mapping):
        return {
            "trusted": False,
            "reason": f"{where} has no verdict for precision {precision!r}",
            "checked": True,
        }
    return {"trusted": bool(v.get("trusted")), "reason": v.get("reason"), "checked": True}


# --------------------------------------------------------------------------- the known kernels


def driver_argv(python: str, script: str, case: Mapping) -> list[str]:
    """The command that runs one case (``--profile-step --out`` are added by the ncu stage)."""
    argv = [python, script, "--case", case["case"], "--kind", case["kind"]]
    if case["kind"] == "gemm":
        argv += ["--precision", case["precision"]]
        argv += ["--m", str(case["m"]), "--n", str(case["n"]), "--k", str(case["k"])]
    else:
        argv += ["--bytes", str(case["bytes"])]
    return argv


def known_op(case: Mapping, device) -> Callable[[], None]:
    """The case's known work on ``device``, as a call: ``C = A @ B``, or a copy kernel."""
    import torch

    if case["kind"] == "gemm":
        prec = case["precision"]
        if prec not in TORCH_DTYPE:
            raise InputError(f"self-test GEMM dtype {prec!r}: use one of {sorted(TORCH_DTYPE)}")
        # fp32 means CUDA cores: TF32 off for matmul; tf32 means tensor cores.
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        dtype = getattr(torch, TORCH_DTYPE[prec])
        a = torch.randn(case["m"], case["k"], device=device, dtype=dtype)
        b = torch.randn(case["k"], case["n"], device=device, dtype=dtype)
        c = torch.empty(case["m"], case["n"], device=device, dtype=dtype)
        return lambda: torch.mm(a, b, out=c)
    if case["kind"] == "copy":
        src = torch.randn(int(case["bytes"]) // 4, device=device, dtype=torch.float32)
        dst = torch.empty_like(src)
        # An elementwise kernel that reads and writes every byte once. dst.copy_(src) is a
        # cudaMemcpyAsync on CUDA: no kernel, so ncu's kernel pass would profile nothing.
        return lambda: torch.neg(src, out=dst)
    raise InputError(f"self-test case kind {case['kind']!r}: use gemm or copy")


def run_case(case: Mapping, warmup: int = 2, profile: bool = True) -> dict:
    """Run one known kernel on the GPU: ``warmup`` untimed calls, then exactly one
    between cudaProfilerStart and cudaProfilerStop. Returns a small run record.

    Raises InputError without CUDA: the self-test is for NVIDIA GPUs only.
    """
    import torch

    if not torch.cuda.is_available():
        raise InputError("the ncu self-test needs a CUDA GPU (torch.cuda.is_available() is False)")
    dev = torch.device("cuda")
    op = known_op(case, dev)
    for _ in range(warmup):
        op()
    torch.cuda.synchronize()
    if profile:
        torch.cuda.profiler.start()
    op()
    torch.cuda.synchronize()
    if profile:
        torch.cuda.profiler.stop()
    return {
        "status": "ok",
        "message": None,
        "case": dict(case),
        "device_name": torch.cuda.get_device_name(dev),
        "allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "warmup": warmup,
    }
