"""The study's precisions: their names, what each computes in, and where each can run.

The one place these facts are written: config validation, the driver, the ceilings,
the models, ncu, the plots and the report all import them from here (a test fails
if a precision list is written out anywhere else).
"""

from __future__ import annotations

from collections.abc import Iterable

from dnnroofline.errors import InputError

#: The study's precisions, in its order: fp32 (TF32 off), tf32, amp (fp16 autocast
#: with a GradScaler) and bf16 (bf16 autocast).
PRECISIONS = ("fp32", "tf32", "amp", "bf16")
# The subsets below list their members in the order a step would move down to them:
# bf16 before amp, which adds a GradScaler.
#: Precisions that autocast to 16 bits: activations and the weight copies the step
#: computes with take 2 bytes a value.
HALF_PRECISIONS = ("bf16", "amp")
#: Precisions whose GEMMs and convolutions run on tensor cores on an NVIDIA GPU.
TENSOR_PRECISIONS = ("tf32", "bf16", "amp")
#: What each precision computes in: its column in the datasheet and in ceilings.json,
#: its name in ncu's counters, the dtype of the ncu self-test's GEMM. amp is fp16.
COMPUTE_DTYPE: dict[str, str] = {**{p: p for p in PRECISIONS}, "amp": "fp16"}
#: The torch dtype (by name: no torch import here) of each compute dtype.
TORCH_DTYPE: dict[str, str] = {
    "fp32": "float32",
    "tf32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
}

DEVICES = ("cpu", "cuda", "mps")
#: CPU flags (as /proc/cpuinfo names them) that give bf16 its own arithmetic.
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: Lowest CUDA compute capability for a precision, and what needs it.
CUDA_NEEDS: dict[str, tuple[tuple[int, int], str]] = {
    "amp": ((7, 0), "fp16 tensor cores"),
    "tf32": ((8, 0), "TF32 tensor cores"),
    "bf16": ((8, 0), "bf16 tensor cores"),
}
_TF32_ONLY_NVIDIA = "TF32 is an NVIDIA tensor-core mode (Ampere and later)"
#: Precisions a device never runs here, whatever the machine.
_NEVER_ON: dict[tuple[str, str], str] = {
    ("cpu", "tf32"): _TF32_ONLY_NVIDIA,
    ("cpu", "amp"): "amp is fp16 autocast with GradScaler, which this driver runs on CUDA only",
    ("mps", "tf32"): _TF32_ONLY_NVIDIA,
    ("mps", "amp"): "fp16 autocast with GradScaler on MPS is not supported by this driver",
    ("mps", "bf16"): "bf16 autocast on MPS is not supported by this driver",
}


def require_known(precision: object, where: str | None = None) -> str:
    """``precision`` if it is one of the study's, else an InputError naming ``where``
    (the config key or the option) and the choices."""
    if precision in PRECISIONS:
        return str(precision)
    computed_by = [p for p in PRECISIONS if COMPUTE_DTYPE[p] == precision and p != precision]
    hint = f"; {precision} is what {computed_by[0]} computes in" if computed_by else ""
    what = (
        f"{where} {precision!r}: unknown precision" if where else f"unknown precision {precision!r}"
    )
    raise InputError(f"{what} (choose from {', '.join(PRECISIONS)}{hint})")


def roof_names(precision: str) -> tuple[str, ...]:
    """The names a compute roof of ``precision`` may carry in a ceilings file: the
    precision and its compute dtype (amp's roof may be called fp16). Unknown names
    stand for themselves."""
    p = precision.lower()
    return tuple(dict.fromkeys((p, COMPUTE_DTYPE.get(p, p))))


def precision_of_roof(name: str) -> str:
    """The study precision a ceilings file's compute roof name is the roof of (amp for
    fp16; :func:`roof_names` the other way); an unknown name stands for itself."""
    n = name.lower()
    return next((p for p in PRECISIONS if n in roof_names(p)), n)


def torch_dtype(precision: str) -> str:
    """The torch dtype name a precision's GEMMs take their operands in."""
    return TORCH_DTYPE[COMPUTE_DTYPE[require_known(precision)]]


def dtype_precision(dtype: str) -> str | None:
    """The precision an op computing in torch dtype ``dtype`` (by name) runs at: the
    first of :data:`PRECISIONS` whose GEMMs take that dtype (float32: fp32, not tf32);
    None for a dtype no precision computes in."""
    return next((p for p in PRECISIONS if torch_dtype(p) == dtype), None)


def operand_bytes(precision: str) -> int:
    """Bytes per element of the operands a precision's GEMMs and convolutions read."""
    return 2 if require_known(precision) in HALF_PRECISIONS else 4


def tensor_core_precision(precision: str) -> str:
    """The precision a study precision's tensor-core kernels run in: an fp32 step's are
    TF32 (on GPUs that have it), the others' their own."""
    return "tf32" if require_known(precision) == "fp32" else precision


def autocast_dtype(precision: str) -> str | None:
    """The torch dtype name a precision autocasts to (None: it does not autocast)."""
    return torch_dtype(precision) if precision in HALF_PRECISIONS else None


def cpu_bf16_reason(cpu_flags: Iterable[str]) -> str | None:
    """None when the CPU has native bf16 (AVX512_BF16 or AMX), else why bf16 is refused."""
    if set(CPU_BF16_FLAGS) & {str(f).lower() for f in cpu_flags}:
        return None
    return (
        "bf16 on CPU needs AVX512_BF16 or AMX (flags avx512_bf16 / amx_bf16), which this "
        "CPU lacks; oneDNN would emulate it through fp32, so its roof and runs would "
        "measure fp32 arithmetic under a bf16 label"
    )


def unsupported_reason(
    device: str,
    precision: str,
    *,
    cuda_cc: tuple[int, int] | None = None,
    cpu_flags: Iterable[str] | None = None,
) -> str | None:
    """None when ``device`` can train (and measure the roof of) ``precision``, else why not.

    ``cuda_cc`` is the GPU's compute capability and ``cpu_flags`` the CPU's flags; None
    means unknown (a config checked away from the machine), which refuses nothing.
    """
    if device not in DEVICES:
        raise InputError(f"unknown device {device!r}: expected {', '.join(DEVICES)}")
    require_known(precision)
    never = _NEVER_ON.get((device, precision))
    if never:
        return never
    if device == "cpu" and precision == "bf16" and cpu_flags is not None:
        return cpu_bf16_reason(cpu_flags)
    if device == "cuda" and cuda_cc is not None and precision in CUDA_NEEDS:
        (major, minor), what = CUDA_NEEDS[precision]
        if tuple(cuda_cc) < (major, minor):
            has = ".".join(str(v) for v in cuda_cc)
            return f"{what} need compute capability {major}.{minor}+ (this GPU has {has})"
    return None


def support(
    device: str,
    *,
    cuda_cc: tuple[int, int] | None = None,
    cpu_flags: Iterable[str] | None = None,
) -> dict[str, str | None]:
    """Each precision -> None where ``device`` runs it, else the reason it does not."""
    flags = None if cpu_flags is None else list(cpu_flags)
    return {p: unsupported_reason(device, p, cuda_cc=cuda_cc, cpu_flags=flags) for p in PRECISIONS}


def supported(
    device: str,
    *,
    cuda_cc: tuple[int, int] | None = None,
    cpu_flags: Iterable[str] | None = None,
) -> list[str]:
    """The precisions ``device`` runs, in the study's order."""
    reasons = support(device, cuda_cc=cuda_cc, cpu_flags=cpu_flags)
    return [p for p, why in reasons.items() if why is None]
