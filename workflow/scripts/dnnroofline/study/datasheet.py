"""Datasheet peaks: NVIDIA GPUs from their datasheets, CPUs derived from cores x clock x FLOP/cycle.

Pure data and functions, no I/O.

GPU figures are *dense* rates (no structured sparsity): NVIDIA datasheets quote
tensor-core rates "with sparsity", twice the dense rate; those are halved here.
Units: FLOP/s and bytes/s, decimal (1 TFLOP/s = 1e12 FLOP/s, 1 GB/s = 1e9 B/s).

Columns, and the pipeline precision each one is the roof for:

========  ==========================================  ===================
column    what it is                                  pipeline precision
========  ==========================================  ===================
fp64      FP64 on CUDA cores (non-tensor)             (none)
fp32      FP32 on CUDA cores (non-tensor)             ``fp32`` (TF32 off)
tf32      TF32 tensor core, dense                     ``tf32``
fp16      FP16 tensor core, FP32 accumulate, dense    ``amp``
bf16      BF16 tensor core, FP32 accumulate, dense    ``bf16``
========  ==========================================  ===================

``None`` means the GPU has no such path (T4 and V100 have no TF32 or BF16 tensor
cores) or its datasheet does not state it. For GeForce cards the FP16/BF16
figure is the one *with FP32 accumulate*, which is what PyTorch's cuBLAS GEMMs
use; the FP16-accumulate rate is twice that and never reached by PyTorch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from dnnroofline.errors import InputError
from dnnroofline.study.precisions import COMPUTE_DTYPE, PRECISIONS, supported

T = 1e12  # TFLOP/s
GBS = 1e9  # GB/s
GIB = 2**30  # a GPU's "80GB" of memory is 80 GiB (the driver reports a little less)

#: Human description of each column (a study precision's column: its compute dtype,
#: precisions.COMPUTE_DTYPE), for citations and notes.
COLUMN_DESCRIPTION: dict[str, str] = {
    "fp64": "FP64 (CUDA cores)",
    "fp32": "FP32 (CUDA cores, non-tensor)",
    "tf32": "TF32 tensor core (dense)",
    "fp16": "FP16 tensor core, FP32 accumulate (dense)",
    "bf16": "BF16 tensor core, FP32 accumulate (dense)",
}

_H100_DS = "NVIDIA H100 Tensor Core GPU Datasheet (2023)"
_H200_DS = "NVIDIA H200 Tensor Core GPU Datasheet (2024)"
_A100_DS = "NVIDIA A100 Tensor Core GPU Datasheet (2021)"
_A10_DS = "NVIDIA A10 Tensor Core GPU Datasheet (2021)"
_L4_DS = "NVIDIA L4 Tensor Core GPU Datasheet (2023)"
_L40S_DS = "NVIDIA L40S GPU Datasheet (2023)"
_T4_DS = "NVIDIA T4 Tensor Core GPU Datasheet (2019)"
_ADA_WP = "NVIDIA Ada Lovelace GPU Architecture Whitepaper v2.1 (2023), Appendix A"
_V100_DS = "NVIDIA Tesla V100 GPU Datasheet (2020)"


@dataclass(frozen=True)
class GpuPeaks:
    """Datasheet peaks of one GPU model (dense rates; ``None`` = no such path or not stated)."""

    key: str
    name: str
    fp64: float | None
    fp32: float | None
    tf32: float | None
    fp16: float | None
    bf16: float | None
    mem_bw: float
    citation: str
    #: Regexes (case-insensitive, ``re.search``) over torch/NVML device names.
    patterns: tuple[str, ...] = field(default=(), repr=False)
    notes: str = ""
    #: NVIDIA architecture (hopper, ampere, ada, turing, volta): a what-if on this GPU
    #: borrows the op-class tables of a measured env of the same one.
    architecture: str = field(kw_only=True)
    #: Device memory in bytes, from the same datasheet (capacity in GiB: the "GB" of GPU
    #: memory sizes is 2^30 bytes); a model's predicted peak memory is checked against it.
    memory_bytes: int = field(kw_only=True)

    def flops(self, precision: str) -> float | None:
        """Peak FLOP/s for a study precision (amp reads the fp16 column) or a column name."""
        col = COMPUTE_DTYPE.get(precision, precision)
        if col not in COLUMN_DESCRIPTION:
            raise InputError(
                f"unknown precision {precision!r}: expected a study precision "
                f"({', '.join(PRECISIONS)}) or a datasheet column ({', '.join(COLUMN_DESCRIPTION)})"
            )
        return getattr(self, col)

    def citation_for(self, precision: str | None) -> str:
        """Citation text for one figure (a compute precision, or None for memory bandwidth)."""
        if precision is None:
            what = f"memory bandwidth {self.mem_bw / GBS:,.0f} GB/s"
        else:
            col = COMPUTE_DTYPE.get(precision, precision)
            val = getattr(self, col)
            shown = "n/a" if val is None else f"{val / T:g} TFLOP/s"
            what = f"{COLUMN_DESCRIPTION[col]} {shown}"
        return f"{self.name}: {what}; {self.citation}" + (f"; {self.notes}" if self.notes else "")


# fmt: off
GPU_PEAKS: tuple[GpuPeaks, ...] = (
    # ---------------------------------------------------------------- Hopper
    # Datasheet: FP64 34, FP32 67, TF32 989*, BF16/FP16 1,979* (* with sparsity): dense
    # TF32 495, BF16/FP16 989 (the Hopper whitepaper's 494.7 / 989.4, rounded as quoted).
    GpuPeaks("h100_sxm5", "NVIDIA H100 SXM5 80GB", 34 * T, 67 * T, 495 * T, 989 * T,
             989 * T, 3350 * GBS, _H100_DS,
             (r"\bH100\b.*\bSXM", r"\bH100 80GB HBM3\b"),
             architecture="hopper", memory_bytes=80 * GIB),
    # Datasheet: FP64 26, FP32 51, TF32 756*, BF16/FP16 1,513* (dense 378 / 756); 2.0 TB/s.
    GpuPeaks("h100_pcie", "NVIDIA H100 PCIe 80GB", 26 * T, 51 * T, 378 * T, 756 * T,
             756 * T, 2000 * GBS, _H100_DS, (r"\bH100\b.*\bPCIe\b",),
             architecture="hopper", memory_bytes=80 * GIB),
    # Datasheet: FP64 30, FP32 60, TF32 835*, BF16/FP16 1,671* (dense 417.5 / 835.5);
    # 94 GB HBM3, 3.9 TB/s per GPU.
    GpuPeaks("h100_nvl", "NVIDIA H100 NVL 94GB", 30 * T, 60 * T, 417.5 * T, 835.5 * T,
             835.5 * T, 3900 * GBS, _H100_DS, (r"\bH100\b.*\bNVL\b",),
             architecture="hopper", memory_bytes=94 * GIB),
    # Datasheet: same compute as H100 SXM; 141 GB HBM3e at 4.8 TB/s.
    GpuPeaks("h200_sxm", "NVIDIA H200 SXM 141GB", 34 * T, 67 * T, 495 * T, 989 * T,
             989 * T, 4800 * GBS, _H200_DS,
             (r"\bH200\b(?!.*\bNVL\b)",),
             architecture="hopper", memory_bytes=141 * GIB),
    # Datasheet: FP64 30, FP32 60, TF32 835*, BF16/FP16 1,671* (dense 417.5 / 835.5); 4.8 TB/s.
    GpuPeaks("h200_nvl", "NVIDIA H200 NVL 141GB", 30 * T, 60 * T, 417.5 * T, 835.5 * T,
             835.5 * T, 4800 * GBS, _H200_DS, (r"\bH200\b.*\bNVL\b",),
             architecture="hopper", memory_bytes=141 * GIB),
    # ---------------------------------------------------------------- Ampere
    # Datasheet: FP64 9.7, FP32 19.5, TF32 156 (312*), BF16/FP16 312 (624*).
    GpuPeaks("a100_sxm_80gb", "NVIDIA A100 SXM4 80GB", 9.7 * T, 19.5 * T, 156 * T, 312 * T,
             312 * T, 2039 * GBS, _A100_DS, (r"\bA100\b.*\bSXM.*80\s*GB",),
             architecture="ampere", memory_bytes=80 * GIB),
    GpuPeaks("a100_pcie_80gb", "NVIDIA A100 PCIe 80GB", 9.7 * T, 19.5 * T, 156 * T, 312 * T,
             312 * T, 1935 * GBS, _A100_DS,
             (r"\bA100\b.*80\s*GB.*\bPCIe\b", r"\bA100\b.*\bPCIe\b.*80\s*GB"),
             architecture="ampere", memory_bytes=80 * GIB),
    GpuPeaks("a100_sxm_40gb", "NVIDIA A100 SXM4 40GB", 9.7 * T, 19.5 * T, 156 * T, 312 * T,
             312 * T, 1555 * GBS, _A100_DS, (r"\bA100\b.*\bSXM.*40\s*GB",),
             architecture="ampere", memory_bytes=40 * GIB),
    GpuPeaks("a100_pcie_40gb", "NVIDIA A100 PCIe 40GB", 9.7 * T, 19.5 * T, 156 * T, 312 * T,
             312 * T, 1555 * GBS, _A100_DS,
             (r"\bA100\b.*\bPCIe\b.*40\s*GB", r"\bA100\b.*40\s*GB.*\bPCIe\b"),
             architecture="ampere", memory_bytes=40 * GIB),
    # Datasheet: FP32 31.2, TF32 62.5 (125*), BF16/FP16 125 (250*); 600 GB/s. Not the A10G.
    GpuPeaks("a10", "NVIDIA A10 24GB", None, 31.2 * T, 62.5 * T, 125 * T, 125 * T,
             600 * GBS, _A10_DS, (r"\bA10\b(?!\d|G)",),
             architecture="ampere", memory_bytes=24 * GIB),
    # ---------------------------------------------------------------- Ada
    # Datasheet: FP32 30.3, TF32 120*, BF16/FP16 242*; 24 GB GDDR6, 300 GB/s.
    GpuPeaks("l4", "NVIDIA L4 24GB", None, 30.3 * T, 60 * T, 121 * T, 121 * T,
             300 * GBS, _L4_DS, (r"\bL4\b",),
             architecture="ada", memory_bytes=24 * GIB),
    # Datasheet: FP32 91.6, TF32 183 (366*), BF16/FP16 362.05 (733*); 864 GB/s.
    GpuPeaks("l40s", "NVIDIA L40S 48GB", None, 91.6 * T, 183 * T, 362.05 * T, 362.05 * T,
             864 * GBS, _L40S_DS, (r"\bL40S\b",),
             architecture="ada", memory_bytes=48 * GIB),
    # Whitepaper: FP32 82.6, TF32 82.6 (165.2*), FP16/BF16 w/ FP32 acc. 165.2 (330.3*);
    # 1,008 GB/s.
    GpuPeaks("rtx_4090", "NVIDIA GeForce RTX 4090", None, 82.6 * T, 82.6 * T, 165.2 * T,
             165.2 * T, 1008 * GBS, _ADA_WP,
             (r"\bRTX 4090\b(?!\s*(D|Laptop|Mobile|Ti))",),
             notes="FP16/BF16 with FP32 accumulate (the FP16-accumulate rate is 2x)",
             architecture="ada", memory_bytes=24 * GIB),
    # Whitepaper: FP32 48.7, TF32 48.7 (97.5*), FP16/BF16 w/ FP32 acc. 97.5 (194.9*);
    # 716.8 GB/s.
    GpuPeaks("rtx_4080", "NVIDIA GeForce RTX 4080 16GB", None, 48.7 * T, 48.7 * T, 97.5 * T,
             97.5 * T, 716.8 * GBS, _ADA_WP,
             (r"\bRTX 4080\b(?!\s*(SUPER|Laptop|Mobile|Ti))",),
             notes="FP16/BF16 with FP32 accumulate (the FP16-accumulate rate is 2x)",
             architecture="ada", memory_bytes=16 * GIB),
    # ---------------------------------------------------------------- Turing
    # Datasheet: FP32 8.1, mixed FP16/FP32 65; 16 GB GDDR6 (256-bit, 10 Gbps) 320 GB/s.
    # No TF32, no BF16.
    GpuPeaks("t4", "NVIDIA T4 16GB", None, 8.1 * T, None, 65 * T, None,
             320 * GBS, _T4_DS, (r"\bT4\b",),
             architecture="turing", memory_bytes=16 * GIB),
    # ---------------------------------------------------------------- Volta
    # Datasheet: FP64 7.8, FP32 15.7, tensor 125 (FP16 mixed precision); 900 GB/s.
    # No TF32, no BF16. 16 or 32 GB HBM2 (one name): the smaller, so "fits" errs safe.
    GpuPeaks("v100_sxm2", "NVIDIA Tesla V100 SXM2", 7.8 * T, 15.7 * T, None, 125 * T, None,
             900 * GBS, _V100_DS, (r"\bV100-SXM2\b", r"\bV100\b.*\bSXM2\b"),
             architecture="volta", memory_bytes=16 * GIB),
    # Datasheet: FP64 7, FP32 14, tensor 112; 900 GB/s; 16 or 32 GB (the smaller here).
    GpuPeaks("v100_pcie", "NVIDIA Tesla V100 PCIe", 7 * T, 14 * T, None, 112 * T, None,
             900 * GBS, _V100_DS, (r"\bV100-PCIE\b", r"\bV100\b(?!S).*\bPCIe\b"),
             architecture="volta", memory_bytes=16 * GIB),
)
# fmt: on


def lookup_gpu(name: str | None) -> GpuPeaks | None:
    """The datasheet row for a torch/NVML device name, or None for an unknown GPU.

    Examples: "NVIDIA H100 80GB HBM3" -> H100 SXM5, "NVIDIA A100-SXM4-40GB",
    "Tesla T4", "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 4090". Variants whose
    peaks differ (RTX 4080 SUPER, laptop parts, A10G, V100S) are *not* matched:
    an unknown GPU gets no datasheet roof rather than a wrong one. Nor does a MIG slice
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb"): it has a fraction of the SMs and bandwidth.
    """
    if not name:
        return None
    norm = re.sub(r"[\s_]+", " ", str(name)).strip()
    if re.search(r"\bMIG\b", norm):
        return None
    for gpu in GPU_PEAKS:
        if any(re.search(p, norm, flags=re.IGNORECASE) for p in gpu.patterns):
            return gpu
    return None


#: The architectures of :data:`GPU_PEAKS`, newest first.
ARCHITECTURES: tuple[str, ...] = ("hopper", "ada", "ampere", "turing", "volta")


def gpu_by_key(key: str) -> GpuPeaks | None:
    """The datasheet row whose ``key`` is ``key`` (e.g. "h200_sxm"), None if none is."""
    return next((gpu for gpu in GPU_PEAKS if gpu.key == key), None)


def architecture_of(gpu_name: str | None) -> str | None:
    """The architecture of a GPU named by a device name ("NVIDIA H100 80GB HBM3") or by
    an env's ``gpu_name`` substring ("H100", "A100"): the one architecture of every
    datasheet row that name matches (lookup_gpu, else each row's name containing it);
    None when it matches none, or rows of different architectures."""
    if not gpu_name:
        return None
    row = lookup_gpu(gpu_name)
    if row is not None:
        return row.architecture
    needle = str(gpu_name).strip().lower()
    found = {gpu.architecture for gpu in GPU_PEAKS if needle and needle in gpu.name.lower()}
    return found.pop() if len(found) == 1 else None


# --------------------------------------------------------------------------- CPUs
#
# Peak FLOP/s of a CPU = cores x clock x FLOP per cycle per core, where FLOP per
# cycle = SIMD lanes x 2 (an FMA is 2 FLOPs) x FMA pipes. For FP32:
#   AVX-512, 2 FMA pipes (Intel Xeon Skylake-SP and later, AMD Zen 5)  16 x 2 x 2 = 64
#   AVX2 + FMA, 2 FMA pipes (Intel Haswell+, AMD Zen 2/3/4)             8 x 2 x 2 = 32
#     AMD Zen 4 executes AVX-512 on 256-bit pipes, so it stays at 32.
#   AVX2 + FMA on 128-bit pipes (AMD Zen 1/Zen+)                         4 x 2 x 2 = 16
#   AVX, no FMA: one 8-wide add + one 8-wide mul per cycle (Sandy Bridge)   8 + 8 = 16
#   SSE only: 4-wide add + 4-wide mul                                       4 + 4 = 8
#   Arm NEON (aarch64), assumed 4 x 128-bit FMA pipes (Neoverse V1/V2,
#     Apple M P-cores)                                                  4 x 2 x 4 = 32
#     (Neoverse N1/N2 have 2 pipes: half that; the assumption errs high, so a
#     point above the roof is flagged rather than hidden under a low roof.)
# BF16: AMX (Sapphire Rapids and later) 1024 FLOP/cycle/core (Intel: 1024 BF16
# ops/cycle/core); AVX512_BF16 dot products (VDPBF16PS) twice the FP32 FMA rate;
# otherwise bf16 is converted and computed in fp32, bounded by the FP32 rate.
# Multi-core AVX-512/AMX clocks are below the max turbo clock, so these peaks are
# upper bounds; in a VM the clock known is often the nominal one, which may be
# below the turbo clock: the peak is then low and a measured point may exceed it
# (flagged, never hidden).

CPU_CITATION_BASE = "derived: cores x clock x FLOP/cycle/core (docs/method.md, Ceilings)"


@dataclass(frozen=True)
class CpuFlopRate:
    flop_per_cycle: float
    isa: str
    reason: str


def cpu_flop_per_cycle(
    precision: str,
    flags: set[str] | frozenset[str] | list[str],
    *,
    arch: str = "x86_64",
    vendor: str = "",
    family: int | None = None,
    model: int | None = None,
) -> CpuFlopRate | None:
    """FLOP per cycle per core for ``precision`` from ISA flags and CPU family.

    Returns None for precisions a CPU has no path for (precisions.supported("cpu")).
    """
    fl = {f.lower() for f in flags}
    arch_l = arch.lower()
    is_amd = "amd" in vendor.lower()
    if precision not in supported("cpu"):
        return None

    if arch_l in ("aarch64", "arm64", "armv8", "arm_8"):
        fp32 = CpuFlopRate(32, "neon", "Arm NEON, assumed 4 x 128-bit FMA pipes: 4 x 2 x 4")
    elif "avx512f" in fl and is_amd and family is not None and family < 0x1A:
        fp32 = CpuFlopRate(
            32, "avx512 (256-bit datapath)", "AMD Zen 4 runs AVX-512 on 2 x 256-bit FMA: 8 x 2 x 2"
        )
    elif "avx512f" in fl:
        fp32 = CpuFlopRate(64, "avx512", "AVX-512 with 2 FMA units: 16 lanes x 2 x 2")
    elif "avx2" in fl and "fma" in fl:
        if is_amd and family == 0x17 and model is not None and model < 0x30:
            fp32 = CpuFlopRate(16, "avx2 (128-bit datapath)", "AMD Zen 1: 2 x 128-bit FMA: 4x2x2")
        else:
            fp32 = CpuFlopRate(32, "avx2+fma", "AVX2 with 2 FMA units: 8 lanes x 2 x 2")
    elif "avx" in fl:
        fp32 = CpuFlopRate(16, "avx", "AVX without FMA: 8-wide add + 8-wide mul per cycle")
    else:
        fp32 = CpuFlopRate(8, "sse", "SSE: 4-wide add + 4-wide mul per cycle")

    if precision == "fp32":
        return fp32
    if "amx_bf16" in fl:
        return CpuFlopRate(1024, "amx_bf16", "AMX BF16 tiles: 1024 FLOP/cycle/core (Intel)")
    if "avx512_bf16" in fl:
        return CpuFlopRate(
            2 * fp32.flop_per_cycle,
            f"avx512_bf16 on {fp32.isa}",
            f"VDPBF16PS: 2x the FP32 FMA rate ({fp32.reason})",
        )
    return CpuFlopRate(
        fp32.flop_per_cycle,
        f"{fp32.isa} (bf16 via fp32)",
        f"no BF16 ISA: FP32 rate ({fp32.reason})",
    )


def cpu_peak_flops(cores: int, clock_hz: float, flop_per_cycle: float) -> float:
    """Peak FLOP/s = cores x clock (Hz) x FLOP per cycle per core."""
    for label, v in (("cores", cores), ("clock_hz", clock_hz), ("flop_per_cycle", flop_per_cycle)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise InputError(f"cpu_peak_flops: {label} must be a positive number, got {v!r}")
    return float(cores) * float(clock_hz) * float(flop_per_cycle)


def cpu_datasheet_roof(
    precision: str,
    *,
    cpu_model: str,
    cores: int,
    clock_hz: float,
    clock_source: str,
    flags: set[str] | frozenset[str] | list[str],
    arch: str = "x86_64",
    vendor: str = "",
    family: int | None = None,
    model: int | None = None,
) -> dict | None:
    """A ceilings ``roofs`` entry (source "datasheet") for a CPU, or None if not derivable."""
    rate = cpu_flop_per_cycle(
        precision, flags, arch=arch, vendor=vendor, family=family, model=model
    )
    if rate is None or not clock_hz or cores < 1:
        return None
    value = cpu_peak_flops(cores, clock_hz, rate.flop_per_cycle)
    citation = (
        f"{CPU_CITATION_BASE}: {cores} cores x {clock_hz / 1e9:.3f} GHz ({clock_source}) x "
        f"{rate.flop_per_cycle:g} {precision.upper()} FLOP/cycle ({rate.reason}) = "
        f"{value / 1e9:.1f} GFLOP/s; CPU {cpu_model!r}"
    )
    return {
        "kind": "compute",
        "precision": precision,
        "source": "datasheet",
        "value": value,
        "citation": citation,
        "inputs": {
            "cores": cores,
            "clock_hz": clock_hz,
            "clock_source": clock_source,
            "flop_per_cycle": rate.flop_per_cycle,
            "isa": rate.isa,
        },
    }
