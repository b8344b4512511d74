"""The ncu stage, pure part: the metric set per GPU, the ncu command line, and
what an ncu failure means.

How the step is captured (docs/gpu.md, "The window"): the driver (``run_train.py
--profile-step``) warms up, then brackets exactly one training step (forward,
backward, optimizer) with ``torch.cuda.profiler.start()/stop()``: the kernel pass
runs with ``--profile-from-start off``, and the step pass's range replay takes its
range from those two calls. Every kernel of every CPU thread between start and stop
is profiled, the backward pass included. NVTX push/pop filters
(``--nvtx --nvtx-include``) are never used: push/pop ranges are per CPU thread,
and autograd runs backward on another thread, so such a filter silently drops
the backward pass (the nnperf fixture in tests/data/ncu shows exactly that).

Output format. ncu writes the CSV itself: ``--csv --page raw --print-units base
--log-file <file>``. Reasons, against ``--export x.ncu-rep`` then
``ncu --import x.ncu-rep --csv``:

* one ncu process instead of two, and no binary report of a few hundred MB per
  configuration to keep or delete;
* ``--log-file`` keeps the application's own stdout out of the CSV (it goes to
  the console, i.e. the rule's log), while ncu's ``==PROF==``/``==ERROR==`` lines
  land in the file, where the parser skips them but a failure can quote them;
* the raw page has one row per kernel and one column per metric under its real
  name (no display names, one unit per column), and ``--print-units base``
  stops ncu from rounding values to three digits in auto-scaled units
  (``1.08 Mbyte``). The parser still accepts any page and any units.

A user who wants the GUI report can re-run the printed command with
``--export``; it is recorded in the JSON.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dnnroofline.errors import InputError
from dnnroofline.ncu.hierarchy import HierarchyCounters, all_step_metrics, table_counters
from dnnroofline.ncu.metrics import (
    CUDA_CORE_METRIC_NAMES,
    DRAM_METRIC,
    DRAM_READ_ALT_METRIC,
    DRAM_READ_METRIC,
    DRAM_WRITE_ALT_METRIC,
    DRAM_WRITE_METRIC,
    L1_METRIC,
    L2_METRIC,
    MEMORY_PEAK_METRICS,
    PACKED_FP32_METRIC_NAMES,
    PEAK_METRIC_NAMES,
    SHARED_BYTES_METRIC,
    TENSOR_PIPE_OP_INST_METRICS,
    TIME_METRIC,
)

NCU_PERMISSION_DOC = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
NCU_DOWNLOAD_DOC = "https://developer.nvidia.com/nsight-compute"

# --------------------------------------------------------------------------- metric sets
#
# Sources for the tensor-path counter names (all are "# of math ops executed in
# Tensor path", i.e. 2 per multiply-accumulate; a measured n^3-MAC GEMM reports
# 2*n^3):
# * `ncu --query-metrics | grep sm__ops_` as quoted by NVIDIA staff on the NVIDIA
#   developer forum ("How many FLOPs does one tensor_op_hmma instruction do?",
#   forums.developer.nvidia.com/t/285256): sm__ops_path_tensor_src_bf16_dst_fp32,
#   src_fp16_dst_fp16, src_fp16_dst_fp32, each with _sparsity_off/_sparsity_on.
# * Public profiling scripts and notes run on A100/H100/H200/L4/RTX 40xx (GitHub
#   code search; not an NVIDIA reference): src_tf32_dst_fp32, src_fp64 (DMMA,
#   GA100/GH100 only), src_fp8(_sparsity_off) on Ada/Hopper, and on Hopper the
#   per-instruction counters sm__ops_path_tensor_op_{hmma,hgmma}_src_*_sparsity_off
#   (HGMMA = wgmma). One of them (an H100 study of HGMMA vs HMMA GEMMs) reads the
#   aggregate sm__ops_path_tensor_src_bf16_dst_fp32 as the total over every
#   instruction path. The parser relies on that: it uses the per-instruction
#   counters only where no aggregate of that type exists, so nothing is counted
#   twice, and it warns when a breakdown sums to more than its aggregate.
# * Newer ncu/GPUs (e.g. GB202) name DRAM read/write bytes dram__bytes_op_{read,
#   write}; see ALTERNATE_METRICS.
# * Volta/Turing (7.x) expose no sparsity variants; whether ncu offers
#   sm__ops_path_tensor_* there depends on the ncu version. They are requested,
#   and the stage drops what `ncu --query-metrics` does not list on the GPU at
#   hand (recording it); tensor FLOPs are then null, never a guess. The old
#   "sm__inst_executed_pipe_tensor x 512" rule of the Volta roofline section is
#   a fixed per-instruction multiplier and is not used anywhere.
# * CUDA-core FLOPs and bytes: the NERSC hierarchical roofline metric set
#   (Yang et al., "Hierarchical Roofline Analysis for GPUs"; the gardenia
#   fixture holds it): smsp__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}
#   _pred_on.sum, dram__bytes, lts__t_bytes, l1tex__t_bytes.

BASE_METRICS: tuple[str, ...] = (
    TIME_METRIC,
    # The parser uses dram__bytes.sum and falls back to read + write; all three
    # are asked for, so a GPU that lacks one form still gives DRAM bytes.
    DRAM_METRIC,
    DRAM_READ_METRIC,
    DRAM_WRITE_METRIC,
    L2_METRIC,
    L1_METRIC,
    *(m for m in CUDA_CORE_METRIC_NAMES if m not in PACKED_FP32_METRIC_NAMES),
    # Diagnostic only: tells "tensor pipe busy but no ops counter" apart from
    # "no tensor work". Never turned into FLOPs.
    "smsp__inst_executed_pipe_tensor.sum",
    # Shared-memory bytes of SASS loads/stores: the L1 level's shared part
    # (SASS-patched, so in this pass; dnnroofline.ncu.hierarchy).
    SHARED_BYTES_METRIC,
)

_T = "sm__ops_path_tensor_"
TENSOR_VOLTA_TURING = (f"{_T}src_fp16_dst_fp16.sum", f"{_T}src_fp16_dst_fp32.sum")
TENSOR_AMPERE = (
    f"{_T}src_fp16_dst_fp16_sparsity_off.sum",
    f"{_T}src_fp16_dst_fp32_sparsity_off.sum",
    f"{_T}src_bf16_dst_fp32_sparsity_off.sum",
    f"{_T}src_tf32_dst_fp32_sparsity_off.sum",
)
TENSOR_FP64 = (f"{_T}src_fp64.sum",)  # DMMA: GA100 (8.0), GH100 (9.0), GB100 (10.0)
TENSOR_FP8 = (f"{_T}src_fp8_sparsity_off.sum",)  # Ada (8.9), Hopper (9.0), Blackwell
TENSOR_HOPPER_PER_INSTRUCTION = (
    f"{_T}op_hmma_src_fp16_dst_fp16_sparsity_off.sum",
    f"{_T}op_hmma_src_fp16_dst_fp32_sparsity_off.sum",
    f"{_T}op_hmma_src_bf16_dst_fp32_sparsity_off.sum",
    f"{_T}op_hmma_src_tf32_dst_fp32_sparsity_off.sum",
    f"{_T}op_hgmma_src_fp16_sparsity_off.sum",
    f"{_T}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum",
    f"{_T}op_hgmma_src_tf32_dst_fp32_sparsity_off.sum",
)


def parse_compute_capability(value: object) -> tuple[int, int] | None:
    """``"8.6"``, ``8.6``, ``(8, 6)``, ``"sm_86"``, ``"86"`` -> ``(8, 6)``; None -> None."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)) and len(value) == 2:
        try:
            return int(value[0]), int(value[1])
        except (TypeError, ValueError):
            pass
    text = str(value).strip().lower()
    m = re.fullmatch(r"(?:sm_?|compute_?)?(\d+)\.(\d+)", text) or re.fullmatch(
        r"(?:sm_?|compute_?)?(\d)(\d)", text
    )
    if not m:
        raise InputError(
            f"compute capability {value!r} is not of the form 'MAJOR.MINOR' (e.g. 9.0)"
        )
    return int(m.group(1)), int(m.group(2))


def metrics_for_arch(compute_capability: object) -> list[str]:
    """The ncu metric list for a GPU of this compute capability.

    ``None`` (unknown GPU) gives the union over every architecture; the stage then
    keeps what ``ncu --query-metrics`` lists. CC below 7.0 raises InputError:
    Nsight Compute does not profile Pascal or older GPUs.
    """
    cc = parse_compute_capability(compute_capability)
    if cc is None:
        tensor = (
            *TENSOR_VOLTA_TURING,
            *TENSOR_AMPERE,
            *TENSOR_FP64,
            *TENSOR_FP8,
            *TENSOR_HOPPER_PER_INSTRUCTION,
            *TENSOR_PIPE_OP_INST_METRICS,
        )
    elif cc < (7, 0):
        raise InputError(
            f"compute capability {cc[0]}.{cc[1]}: "
            "Nsight Compute supports Volta (7.0) and newer GPUs only"
        )
    elif cc < (8, 0):  # Volta 7.0, Xavier 7.2, Turing 7.5: no structured sparsity
        tensor = TENSOR_VOLTA_TURING
    elif cc == (8, 0):  # A100: FP64 tensor cores
        tensor = (*TENSOR_AMPERE, *TENSOR_FP64)
    elif cc < (8, 9):  # GA10x 8.6, Orin 8.7
        tensor = TENSOR_AMPERE
    elif cc < (9, 0):  # Ada 8.9: FP8
        tensor = (*TENSOR_AMPERE, *TENSOR_FP8)
    elif cc < (10, 0):  # Hopper 9.0: FP64, FP8, HMMA and HGMMA (wgmma) paths
        tensor = (
            *TENSOR_AMPERE,
            *TENSOR_FP64,
            *TENSOR_FP8,
            *TENSOR_HOPPER_PER_INSTRUCTION,
            *TENSOR_PIPE_OP_INST_METRICS,
        )
    else:  # Blackwell 10.x/12.x: names partly unverified; the query keeps what exists
        tensor = (*TENSOR_AMPERE, *TENSOR_FP8, *(TENSOR_FP64 if cc[0] == 10 else ()))
    # Packed FP32 (FADD2/FMUL2/FFMA2) exists from Blackwell on; an unknown GPU asks
    # too, and the query drops what it lacks.
    packed = PACKED_FP32_METRIC_NAMES if cc is None or cc >= (10, 0) else ()
    return [*BASE_METRICS, *packed, *tensor]


#: The step pass: bytes and time of the whole step as it runs, and the memory
#: roofs (peak bytes per cycle x measured clock) of the same capture. FLOPs are
#: not asked here: they do not depend on the cache state, and the kernel pass
#: counts them (its SASS instruction counters are per-kernel instrumentation).
STEP_METRICS: tuple[str, ...] = (
    TIME_METRIC,
    DRAM_METRIC,
    DRAM_READ_METRIC,
    DRAM_WRITE_METRIC,
    L2_METRIC,
    L1_METRIC,
    *PEAK_METRIC_NAMES,
)


def step_metrics_for_arch(
    compute_capability: object, hierarchy: HierarchyCounters | None = None
) -> list[str]:
    """The step pass's metric list: :data:`STEP_METRICS` and the counters of ncu's
    hierarchical chart (``hierarchy``, read from the installed ncu's section files;
    without it, the table for this compute capability, or every architecture's)."""
    metrics_for_arch(compute_capability)  # the same refusal of pre-Volta GPUs
    cc = parse_compute_capability(compute_capability)
    if hierarchy is None and cc is not None:
        hierarchy = table_counters(cc)
    extra = hierarchy.step_metrics() if hierarchy is not None else all_step_metrics()
    return list(dict.fromkeys([*STEP_METRICS, *extra]))


# --------------------------------------------------------------------------- the two passes
#
# Which pass gives which number (docs/gpu.md, "Two passes"):
# * step pass: application range replay (``--replay-mode app-range``) of the one
#   step between cudaProfilerStart and cudaProfilerStop, caches and clocks left
#   alone. ncu reruns the whole process once per metric pass and measures the
#   range as one unit, so L2 hits between kernels and write-backs of dirty lines
#   inside the step are counted as they really happen. Plain range replay
#   (``--replay-mode range``) captures the API stream and replays it, and refuses
#   ranges with API calls it cannot replay; a PyTorch step has such calls
#   (GradScaler reads its found-inf flag back to the host, the caching allocator
#   may grow), so app-range is used.
# * kernel pass: kernel replay with flushed caches. Per-kernel numbers for the
#   per-kernel roofline (each kernel isolated, cold cache) and the step's FLOPs
#   (instruction counts do not depend on the cache state).
# Only kernel replay takes ``--profile-from-start off``: range replay defines its ranges
# by cudaProfilerStart/Stop already, and ncu rejects the option in range modes.
PASSES: dict[str, dict[str, str]] = {
    "step": {
        "replay_mode": "app-range",
        "cache_control": "none",
        "clock_control": "none",
        "measures": "the whole step as it runs (one range): bytes, time, memory roofs",
    },
    "kernel": {
        "profile_from_start": "off",
        "replay_mode": "kernel",
        "cache_control": "all",
        "clock_control": "none",
        "measures": "each kernel alone, caches flushed (isolated kernels, cold cache): FLOPs "
        "and per-kernel counters",
    },
}

#: Which pass each number of the parsed JSON comes from.
PROVENANCE: dict[str, str] = {
    "totals.flop": "kernel",
    "totals.bytes.shared": "kernel",
    "totals.wgmma": "kernel",
    "totals.bytes": "step",
    "totals.time_s": "step",
    "memory_roofs": "step",
    "kernels": "kernel",
    "kernel_pass_totals": "kernel",
}


# --------------------------------------------------------------------------- query and filter


def query_metrics_command(ncu_exe: str) -> list[str]:
    """``ncu --query-metrics``: the metrics of the installed GPU."""
    return [ncu_exe, "--query-metrics"]


_QUERY_NAME = re.compile(r"^([a-z0-9]+__[A-Za-z0-9_]+)(?:\.[A-Za-z0-9_.]+)?(?:\s|$)")


def parse_query_metrics(text: str) -> set[str]:
    """Base metric names (``dram__bytes_read``) listed by ``ncu --query-metrics``."""
    names = set()
    for line in text.splitlines():
        m = _QUERY_NAME.match(line.strip())
        if m:
            names.add(m.group(1))
    return names


def base_name(metric: str) -> str:
    """``dram__bytes_read.sum`` -> ``dram__bytes_read``."""
    return metric.split(".", 1)[0]


#: Same quantity under another name, used when the GPU/ncu lacks the first.
ALTERNATE_METRICS = {
    DRAM_READ_METRIC: DRAM_READ_ALT_METRIC,
    DRAM_WRITE_METRIC: DRAM_WRITE_ALT_METRIC,
}


@dataclass
class MetricSelection:
    kept: list[str]
    dropped: list[str]
    substituted: dict[str, str]


def filter_supported_metrics(metrics: Sequence[str], available: Iterable[str]) -> MetricSelection:
    """Keep the metrics whose base name ncu lists; record the rest.

    A ``..._sparsity_off`` counter the GPU lacks is replaced by its plain form
    (``sm__ops_path_tensor_src_fp16_dst_fp32.sum``) where that one exists, and
    ``dram__bytes_{read,write}.sum`` by ``dram__bytes_op_{read,write}.sum``.
    """
    avail = set(available)
    kept: list[str] = []
    dropped: list[str] = []
    substituted: dict[str, str] = {}
    for m in metrics:
        if base_name(m) in avail:
            kept.append(m)
            continue
        alt = ALTERNATE_METRICS.get(m) or m.replace("_sparsity_off.", ".")
        if alt != m and base_name(alt) in avail and alt not in metrics:
            kept.append(alt)
            substituted[m] = alt
        else:
            dropped.append(m)
    return MetricSelection(list(dict.fromkeys(kept)), dropped, substituted)


# --------------------------------------------------------------------------- command line


def prepare_driver_argv(driver_argv: Sequence[str], run_json: str | None = None) -> list[str]:
    """The driver command plus ``--profile-step`` (and ``--out run_json`` if it has none)."""
    argv = list(driver_argv)
    if not argv:
        raise InputError(
            "no driver command given (expected: ... -- python run_train.py --arch ...)"
        )
    if "--profile-step" not in argv:
        argv.append("--profile-step")
    has_out = any(a == "--out" or a.startswith("--out=") for a in argv)
    if run_json is not None and not has_out:
        argv += ["--out", str(run_json)]
    return argv


def build_ncu_command(
    ncu_exe: str,
    metrics: Sequence[str],
    driver_argv: Sequence[str],
    *,
    log_file: str | None = None,
    page: str = "raw",
    extra_args: Sequence[str] = (),
    pass_name: str = "kernel",
) -> list[str]:
    """The ncu argv that profiles exactly the driver's bracketed training step.

    ``ncu [--profile-from-start off] --target-processes all --replay-mode <mode>
    --cache-control <c> --clock-control none --metrics <m1,m2,...> --csv --page raw
    --print-units base --log-file <csv> <driver argv> --profile-step``, with the
    settings of ``pass_name`` (:data:`PASSES`): ``app-range`` and ``none`` for the
    step pass, ``--profile-from-start off``, ``kernel`` and ``all`` for the kernel
    pass. No NVTX filter (it would miss backward).
    """
    if pass_name not in PASSES:
        raise InputError(f"ncu pass {pass_name!r}: use one of {sorted(PASSES)}")
    settings = PASSES[pass_name]
    if not metrics:
        raise InputError("no ncu metrics to collect")
    if page not in ("raw", "details"):
        raise InputError(f"ncu page {page!r}: use 'raw' or 'details'")
    bad = [m for m in metrics if "," in m or not m.strip()]
    if bad:
        raise InputError(f"bad ncu metric names: {bad!r}")
    for a in extra_args:
        if a.startswith("--nvtx"):
            raise InputError(
                f"ncu option {a}: NVTX filters miss the backward pass (push/pop ranges are per "
                "thread); the stage brackets the step with cudaProfilerStart/Stop instead"
            )
    start = settings.get("profile_from_start")
    cmd = [
        ncu_exe,
        *(["--profile-from-start", start] if start else []),
        "--target-processes",
        "all",
        "--replay-mode",
        settings["replay_mode"],
        # kernel pass: caches flushed before each replayed kernel (reproducible
        # cold-cache counts); step pass: caches as the step leaves them.
        "--cache-control",
        settings["cache_control"],
        # The clocks the timed runs see, not ncu's default lock to base clocks.
        "--clock-control",
        settings["clock_control"],
        "--metrics",
        ",".join(metrics),
        "--csv",
        "--page",
        page,
        "--print-units",
        "base",
    ]
    if log_file is not None:
        cmd += ["--log-file", str(log_file)]
    cmd += list(extra_args)
    cmd += prepare_driver_argv(driver_argv)
    return cmd


# --------------------------------------------------------------------------- failures


@dataclass
class Diagnosis:
    status: str  # "ok" | "unavailable" | "error"
    reason: str | None
    message: str | None
    unknown_metrics: list[str] = field(default_factory=list)  # base names ncu rejected


_MSG = re.compile(r"^==(ERROR|WARNING|PROF)==\s*(.*)$")
# e.g. "==ERROR== Failed to find metric regex:^flop_count_sp\.(sum|min|max|avg|pct|ratio|max_rate)$"
_UNKNOWN_METRIC = re.compile(
    r"(?:Failed to find metric|[Uu]nknown metric|[Ii]nvalid metric)[:\s]+(?:regex:)?\^?\"?"
    r"([A-Za-z0-9_]+)"
)
_UNSUPPORTED = (
    "not supported on this device",
    "profiling is not supported",
    "unsupported gpu",
    "no supported gpu",
    "device is not supported",
    "architecture is not supported",
)


def ncu_message_lines(text: str, kinds: tuple[str, ...] = ("ERROR", "WARNING")) -> list[str]:
    """ncu's own ``==ERROR==``/``==WARNING==`` (or other ``kinds``) lines in ``text``."""
    out = []
    for line in text.splitlines():
        m = _MSG.match(line.strip().lstrip("\ufeff"))
        if m and m.group(1) in kinds:
            out.append(line.strip())
    return out


def _quote(lines: list[str], limit: int = 12) -> str:
    if not lines:
        return ""
    shown = lines[-limit:]
    return "\nncu said:\n" + "\n".join(f"  {ln}" for ln in shown)


#: ncu failing to start its profiler at all, e.g. "Failed to initialize the profiler:
#: LibraryNotLoaded" (seen on an H200 under gVisor, a sandboxed container runtime).
_PROFILER_INIT = re.compile(
    r"Failed to initialize the profiler(?::[ \t]*(\w+))?|\b(LibraryNotLoaded)\b"
)

#: The reasons that say this machine's counters cannot be read as it is set up: no
#: capture can succeed, so the stage stops at the first sign of one.
COUNTERS_UNAVAILABLE = ("counters_not_permitted", "profiler_not_loaded")


def profiler_init_message(cause: str | None) -> str:
    said = f"Failed to initialize the profiler: {cause}" if cause else "its profiler failed"
    hint = (
        " LibraryNotLoaded has been seen in sandboxed container runtimes (gVisor), which do "
        "not pass the driver's profiling interface through; ncu reads the counters on bare "
        "metal, in a VM, and in a container that runs on the host kernel (runc) with the GPU "
        "passed through."
        if cause == "LibraryNotLoaded"
        else ""
    )
    return (
        f"ncu could not start its profiler on this machine ({said}), so no GPU counter can "
        f"be read here.{hint} The study goes on without counters: the roofline uses the "
        "analytic AI."
    )


def permission_message() -> str:
    return (
        "ncu is not allowed to read the GPU performance counters (ERR_NVGPUCTRPERM). "
        "Fix: run the ncu stage as root or with CAP_SYS_ADMIN (driver R565+: CAP_PERFMON; in a "
        "container, --cap-add=SYS_ADMIN), or let all users profile: put "
        "'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in /etc/modprobe.d/ncu.conf, "
        "rebuild the initramfs and reboot (check /proc/driver/nvidia/params: "
        f"RmProfilingAdminOnly: 0). See {NCU_PERMISSION_DOC}"
    )


#: Where Nsight Compute is installed when it is not on PATH: the CUDA toolkit's bin
#: ($CUDA_HOME, /usr/local/cuda, /usr/local/cuda-X.Y) and the standalone installer's
#: /opt/nvidia/nsight-compute/<version>/. The toolkit's bin is often left off PATH.
NCU_INSTALL_PATTERNS = (
    "{cuda_home}/bin/ncu",
    "/usr/local/cuda/bin/ncu",
    "/opt/nvidia/nsight-compute/*/ncu",
    "/usr/local/cuda-*/bin/ncu",
)


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path))


def find_ncu(
    name: str,
    which: Callable[[str], str | None],
    matches: Callable[[str], list[str]],
    cuda_home: str | None = None,
) -> tuple[str | None, str]:
    """``(path or None, how it was found)`` of the ncu to run.

    A path is taken as given (``matches`` checks it is an executable file). A bare
    name is looked up on PATH (``which``); the default name ``ncu``, not on PATH, in
    :data:`NCU_INSTALL_PATTERNS`, in order, the newest version of a pattern first.
    ``matches(pattern)`` returns the executable files a glob pattern names.
    """
    if "/" in name:
        return (name, "as given") if matches(name) else (None, "not found")
    on_path = which(name)
    if on_path or name != "ncu":
        return on_path, "PATH" if on_path else "not found"
    for pattern in NCU_INSTALL_PATTERNS:
        if "{cuda_home}" in pattern and not cuda_home:
            continue
        found = sorted(matches(pattern.format(cuda_home=cuda_home)), key=_version_key)
        if found:
            return found[-1], "not on PATH; a standard install location"
    return None, "not found"


def not_found_message(ncu_exe: str) -> str:
    return (
        f"ncu executable {ncu_exe!r} not found (not on PATH, nor where the CUDA toolkit and "
        "Nsight Compute install it, or not executable). Install Nsight "
        f"Compute (CUDA toolkit, or {NCU_DOWNLOAD_DOC}) and point the stage at it: config "
        "'ncu: {executable: /usr/local/cuda/bin/ncu}', or profile_ncu.py --ncu PATH"
    )


def diagnose_ncu_output(returncode: int | None, text: str, *, timed_out: bool = False) -> Diagnosis:
    """What an ncu run's output (log file plus console) and exit status mean.

    ``unavailable``: the machine cannot be profiled as it is set up (counter
    permission, a profiler that cannot start, unsupported GPU); ``error``: this run
    failed (the application failed, no kernel was profiled, an unknown metric, a
    timeout, a non-zero exit);
    ``ok``: none of these. Apart from ERR_NVGPUCTRPERM and a profiler that failed to
    start (which ncu may print unprefixed), only ncu's own
    ``==ERROR==``/``==WARNING==`` lines are read: the application may print anything.
    """
    errors = ncu_message_lines(text)
    if "ERR_NVGPUCTRPERM" in text:
        return Diagnosis(
            "unavailable", "counters_not_permitted", permission_message() + _quote(errors)
        )
    init = _PROFILER_INIT.search(text)
    if init:
        message = profiler_init_message(init.group(1) or init.group(2))
        said_line = next(ln.strip() for ln in text.splitlines() if init.group(0) in ln)
        shown = errors if any(said_line in e for e in errors) else [said_line, *errors]
        return Diagnosis("unavailable", "profiler_not_loaded", message + _quote(shown))
    said = "\n".join(errors)
    unknown = sorted(set(_UNKNOWN_METRIC.findall(said)))
    if unknown:
        return Diagnosis(
            "error",
            "unknown_metric",
            f"this ncu/GPU does not know metric(s) {', '.join(unknown)}; the stage drops metrics "
            "that `ncu --query-metrics` does not list, so the query failed or was skipped"
            + _quote(errors),
            unknown_metrics=unknown,
        )
    low = said.lower()
    if any(s in low for s in _UNSUPPORTED):
        return Diagnosis(
            "unavailable",
            "gpu_not_supported",
            "this ncu version does not support profiling this GPU (ncu needs CC 7.0+, and a "
            "version at least as new as the GPU)" + _quote(errors),
        )
    if timed_out:
        return Diagnosis(
            "error",
            "timeout",
            "ncu did not finish within the time limit (profile_ncu.py --timeout)" + _quote(errors),
        )
    app_failed = "application returned an error code" in low or "terminated before" in low
    # kernel replay says "No kernels were profiled", range replay "No ranges were profiled"
    if "no kernels were profiled" in low or "no ranges were profiled" in low:
        why = (
            "the application failed before profiling started"
            if app_failed
            else "the driver never called torch.cuda.profiler.start() "
            "(does it implement --profile-step?)"
        )
        return Diagnosis("error", "no_kernels", f"ncu profiled no kernel: {why}" + _quote(errors))
    if app_failed:
        return Diagnosis("error", "app_failed", "the profiled application failed" + _quote(errors))
    if returncode not in (0, None):
        return Diagnosis(
            "error", "ncu_failed", f"ncu exited with status {returncode}" + _quote(errors)
        )
    return Diagnosis("ok", None, None)


# --------------------------------------------------------------------------- combining the passes


def combine_passes(kernel: Mapping, step: Mapping | None) -> dict:
    """One parsed-ncu result from the kernel pass and the step pass (:data:`PASSES`).

    ``totals.flop`` and ``kernels`` come from the kernel pass, ``totals.bytes``,
    ``totals.time_s`` and ``memory_roofs`` from the step pass (null without one);
    the kernel pass's own totals stay under ``kernel_pass_totals`` (isolated
    kernels, cold cache: not the step's traffic). ``provenance`` says which pass
    gave which number, ``passes`` (added by the stage) with which settings.
    """
    out = dict(kernel)
    ktot = kernel["totals"]
    stot = step["totals"] if step is not None else None
    totals = {
        "kernels": ktot["kernels"],
        "time_s": stot["time_s"] if stot else None,
        "flop": dict(ktot["flop"]),
        "bytes": dict(stot["bytes"]) if stot else dict.fromkeys(ktot["bytes"]),
        "arithmetic_intensity_dram": None,
        # which kernels ran wgmma: per-kernel instruction counts, kernel pass
        "wgmma": ktot.get("wgmma"),
        # kernels lacking a counter, counted in the pass each total comes from
        "incomplete": {
            **{k: n for k, n in (ktot.get("incomplete") or {}).items() if k.startswith("flop")},
            **{
                k: n
                for k, n in ((stot or {}).get("incomplete") or {}).items()
                if k.startswith(("bytes", "time"))
            },
        },
    }
    # Shared-memory bytes are counted by SASS patching, which only the kernel pass
    # has; like FLOPs they do not depend on the cache state.
    totals["bytes"]["shared"] = ktot["bytes"].get("shared")
    flop, dram = totals["flop"]["total"], totals["bytes"]["dram"]
    if flop is not None and dram:
        totals["arithmetic_intensity_dram"] = flop / dram
    out["totals"] = totals
    out["kernel_pass_totals"] = {**ktot, "label": "isolated kernels, cold cache (kernel replay)"}
    out["memory_roofs"] = (
        step.get("memory_roofs") if step is not None else dict.fromkeys(MEMORY_PEAK_METRICS)
    )
    out["provenance"] = dict(PROVENANCE)
    out["step_pass_rows"] = stot["kernels"] if stot else 0
    out["warnings"] = [
        *kernel.get("warnings", []),
        *(f"step pass: {w}" for w in (step.get("warnings", []) if step is not None else [])),
    ]
    return out
