"""Machine fingerprint (``results/{env}/env_info.json``) and the env/machine match check.

Collecting is fast (well under 3 s): py-cpuinfo's full probe times a busy loop
(~1 s), so on Linux its /proc/cpuinfo and lscpu readers are used and the full
probe is the fallback only. Nothing here makes a network call: the cloud is read
from DMI (/sys/class/dmi/id) and the zone from environment variables only.

``check_env_matches`` is pure: it compares what an env declares in the config
with a fingerprint, so that results are never filed under the wrong machine.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import re
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from dnnroofline.errors import InputError
from dnnroofline.study.config import CPU_FLAGS_ENV, detect_cpu_flags

DEVICES = ("auto", "cpu", "cuda", "mps")

#: ISA flags of interest, as /proc/cpuinfo (and py-cpuinfo) spell them.
FLAGS_OF_INTEREST = (
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "neon",
    "asimd",
    "sve",
    "sve2",
)

#: Environment variables that may name the cloud zone (or region), in order of preference.
#: Read only: no metadata server is ever queried.
CLOUD_ZONE_VARS = (
    "DNNROOFLINE_CLOUD_ZONE",
    "CLOUDSDK_COMPUTE_ZONE",
    "GOOGLE_CLOUD_ZONE",
    "AWS_AVAILABILITY_ZONE",
    "AZURE_ZONE",
    "CLOUDSDK_COMPUTE_REGION",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AZURE_LOCATION",
)

_DMI = Path("/sys/class/dmi/id")


# --------------------------------------------------------------------------- devices


def available_devices() -> list[str]:
    """The torch devices this process can use: always cpu, plus cuda and/or mps."""
    import torch

    out = ["cpu"]
    if torch.cuda.is_available():
        out.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    return out


def detect_device() -> str:
    """The best device here: cuda if torch sees a GPU, else mps, else cpu."""
    avail = available_devices()
    for dev in ("cuda", "mps"):
        if dev in avail:
            return dev
    return "cpu"


def resolve_device(requested: str, available: list[str] | None = None) -> str:
    """``auto`` -> the best device; an explicit device must be available, else InputError."""
    req = (requested or "auto").lower()
    if req not in DEVICES:
        raise InputError(f"device must be one of {DEVICES}, got {requested!r}")
    avail = available if available is not None else available_devices()
    if req == "auto":
        return next((d for d in ("cuda", "mps") if d in avail), "cpu")
    if req not in avail:
        raise InputError(f"device {req!r} is not available on this machine (it has {avail})")
    return req


# --------------------------------------------------------------------------- CPU


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _parse_size(text: str | None) -> int | None:
    """'32768K' / '32 MiB' / '1024' -> bytes (binary units, as sysfs and lscpu mean them)."""
    if not text:
        return None
    m = re.match(r"^\s*([\d.]+)\s*([KMG]?)(i?B)?\s*$", text, flags=re.IGNORECASE)
    if not m:
        return None
    mult = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def last_level_cache_bytes(sys_cpu: str | Path = "/sys/devices/system/cpu") -> int | None:
    """Total last-level cache of the machine in bytes, from sysfs (None where unknown).

    The highest cache level's size times the number of distinct instances (a 2-socket
    machine has two L3s; some AMD parts have one L3 per CCX).
    """
    root = Path(sys_cpu)
    best_level, per_instance, instances = -1, None, set()
    for cache in sorted(root.glob("cpu[0-9]*/cache/index[0-9]*")):
        level = _read(cache / "level")
        ctype = _read(cache / "type") or ""
        if level is None or ctype.lower() == "instruction":
            continue
        lvl = int(level)
        size = _parse_size(_read(cache / "size"))
        if size is None:
            continue
        shared = _read(cache / "shared_cpu_list") or str(cache.parent.parent.name)
        if lvl > best_level:
            best_level, per_instance, instances = lvl, size, {shared}
        elif lvl == best_level:
            instances.add(shared)
    if per_instance is None:
        return None
    return per_instance * max(1, len(instances))


def _cpuinfo_fast() -> tuple[dict, str]:
    """py-cpuinfo's data, fast: its /proc/cpuinfo + lscpu readers on Linux, else the full probe."""
    import cpuinfo

    info: dict = {}
    source = ""
    mod = getattr(cpuinfo, "cpuinfo", None)
    if platform.system() == "Linux" and mod is not None:
        for fn_name in ("_get_cpu_info_from_lscpu", "_get_cpu_info_from_proc_cpuinfo"):
            fn = getattr(mod, fn_name, None)
            if fn is None:
                continue
            try:
                part = fn() or {}
            except Exception:
                part = {}
            for k, v in part.items():
                if k == "flags":
                    info["flags"] = sorted(set(info.get("flags", [])) | set(v))
                elif v not in (None, "", 0) and k not in info:
                    info[k] = v
        source = "py-cpuinfo (/proc/cpuinfo, lscpu)"
    if not info.get("brand_raw"):
        info = dict(cpuinfo.get_cpu_info())  # full probe (~1 s, runs in a subprocess)
        source = "py-cpuinfo get_cpu_info()"
    return info, source


def max_clock_hz(info: Mapping | None = None) -> tuple[float | None, str]:
    """The CPU's maximum clock in Hz and where it came from.

    Preference: sysfs cpuinfo_max_freq, psutil's max, the '@ x.xxGHz' of the model
    name, py-cpuinfo's advertised clock (from /proc/cpuinfo 'cpu MHz': the nominal
    clock in a VM, which may be below the turbo clock).
    """
    khz = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if khz and khz.isdigit() and int(khz) > 0:
        return int(khz) * 1e3, "sysfs cpuinfo_max_freq"
    try:
        import psutil

        freq = psutil.cpu_freq()
        if freq is not None and freq.max and freq.max > 0:
            return float(freq.max) * 1e6, "psutil cpu_freq().max"
    except Exception:
        pass
    info = info or {}
    m = re.search(r"@\s*([\d.]+)\s*GHz", str(info.get("brand_raw", "")), flags=re.IGNORECASE)
    if m:
        return float(m.group(1)) * 1e9, "CPU model name"
    hz = info.get("hz_advertised") or info.get("hz_actual")
    if hz and hz[0]:
        return float(hz[0]), "py-cpuinfo hz_advertised (/proc/cpuinfo cpu MHz; nominal in a VM)"
    return None, "unknown"


def cpu_model_name(info: Mapping | None = None) -> str:
    """The CPU model as the fingerprint records it (``cpu_model``); fast (no probe loop)."""
    if info is None:
        info, _ = _cpuinfo_fast()
    return str(info.get("brand_raw") or platform.processor() or "unknown")


def cpu_model() -> str:
    """The CPU's model name as a run records it (``device_name``): /proc/cpuinfo, sysctl on
    macOS, else platform. Without py-cpuinfo, so the driver starts fast."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        import subprocess

        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            )
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_info() -> dict:
    """CPU facts the fingerprint and the ceilings need."""
    import psutil

    info, source = _cpuinfo_fast()
    arch = platform.machine()
    # the project's one flag detection (it honours DNNROOFLINE_CPU_FLAGS); py-cpuinfo's
    # where it has none (no /proc/cpuinfo)
    detected = detect_cpu_flags()
    flags = {f.lower() for f in (info.get("flags", []) if detected is None else detected)}
    overridden = CPU_FLAGS_ENV in os.environ  # then its list alone, even on Arm
    if overridden:
        source += f"; flags from {CPU_FLAGS_ENV}"
    if "asimd" in flags or (arch.lower() in ("aarch64", "arm64") and not overridden):
        flags.add("neon")  # NEON (ASIMD) is mandatory on ARMv8-A
    clock, clock_source = max_clock_hz(info)
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    llc = last_level_cache_bytes()
    if llc is None and info.get("l3_cache_size"):
        llc = int(info["l3_cache_size"])
    return {
        "model": cpu_model_name(info),
        "vendor": info.get("vendor_id_raw") or "",
        "family": info.get("family"),
        "model_number": info.get("model"),
        "arch": arch,
        "flags_all": sorted(flags),
        "flags": [f for f in FLAGS_OF_INTEREST if f in flags],
        "cores_physical": int(physical),
        "cores_logical": int(logical),
        "max_clock_hz": clock,
        "clock_source": clock_source,
        "llc_bytes": llc,
        "source": source,
    }


# --------------------------------------------------------------------------- GPUs


def _decode(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _visible_filter(gpus: list[dict]) -> list[dict]:
    """Keep the GPUs CUDA_VISIBLE_DEVICES exposes (indices or UUID prefixes)."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return gpus
    wanted = [t.strip() for t in cvd.split(",") if t.strip()]
    if wanted and re.fullmatch(r"-\d+", wanted[0]):  # "-1": no GPU visible
        return []
    out = []
    for tok in wanted:
        for g in gpus:
            if (tok.isdigit() and g.get("index") == int(tok)) or (
                not tok.isdigit() and g.get("uuid") and g["uuid"].startswith(tok)
            ):
                out.append(g)
    # MIG or other identifiers we cannot map: report every GPU rather than none.
    return out if out or not wanted else gpus


def nvml_gpus() -> tuple[list[dict] | None, str | None]:
    """(GPUs, driver version) from NVML, or (None, None) where NVML is absent."""
    try:
        import pynvml
    except ImportError:
        return None, None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None, None
    try:
        driver = _decode(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                cc = f"{major}.{minor}"
            except Exception:
                cc = None
            try:
                uuid = _decode(pynvml.nvmlDeviceGetUUID(h))
            except Exception:
                uuid = None
            gpus.append(
                {
                    "index": i,
                    "name": _decode(pynvml.nvmlDeviceGetName(h)),
                    "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                    "compute_capability": cc,
                    "uuid": uuid,
                }
            )
        return _visible_filter(gpus), driver
    except Exception:
        return None, None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def torch_gpus() -> list[dict]:
    import torch

    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            {
                "index": i,
                "name": p.name,
                "memory_bytes": int(p.total_memory),
                "compute_capability": f"{p.major}.{p.minor}",
                "uuid": str(getattr(p, "uuid", "")) or None,
            }
        )
    return out


# --------------------------------------------------------------------------- host context


def detect_container(
    root: str | Path = "/", environ: Mapping[str, str] | None = None
) -> str | None:
    """'docker', 'podman', 'apptainer', 'kubernetes', 'lxc', ... or None (no container seen)."""
    env = os.environ if environ is None else environ
    r = Path(root)
    if (r / ".dockerenv").exists():
        return "docker"
    if (r / "run/.containerenv").exists():
        return "podman"
    if env.get("APPTAINER_CONTAINER") or env.get("SINGULARITY_CONTAINER"):
        return "apptainer"
    if env.get("container"):  # set by systemd-nspawn, podman, lxc
        return env["container"]
    if env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    for cg in (r / "proc/1/cgroup", r / "proc/self/cgroup"):
        text = _read(cg) or ""
        for marker, name in (
            ("kubepods", "kubernetes"),
            ("docker", "docker"),
            ("libpod", "podman"),
            ("containerd", "containerd"),
            ("lxc", "lxc"),
        ):
            if marker in text:
                return name
    return None


def detect_cloud(
    dmi: str | Path = _DMI, environ: Mapping[str, str] | None = None
) -> tuple[str | None, str | None, str | None]:
    """(provider, zone, zone_source) from DMI and environment variables only (no network)."""
    env = os.environ if environ is None else environ
    d = Path(dmi)
    dmi_text = " ".join(
        _read(d / f) or "" for f in ("sys_vendor", "product_name", "bios_vendor", "board_vendor")
    ).lower()
    provider = None
    for marker, name in (
        ("google", "gcp"),
        ("amazon", "aws"),
        ("microsoft", "azure"),
        ("oraclecloud", "oci"),
        ("alibaba", "alibaba"),
        ("openstack", "openstack"),
        ("digitalocean", "digitalocean"),
        ("hetzner", "hetzner"),
    ):
        if marker in dmi_text:
            provider = name
            break
    for var in CLOUD_ZONE_VARS:
        if env.get(var):
            return provider, env[var], f"${var}"
    return provider, None, None


def _os_name() -> str:
    try:
        from torch.utils import collect_env

        name = collect_env.get_os(collect_env.run)
        if name:
            return str(name)
    except Exception:
        pass
    return platform.platform()


def installed_version(dist: str) -> str | None:
    """``dist``'s installed version from its metadata (importing torchvision costs seconds),
    or None if it is not installed."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def installed_packages() -> dict[str, str]:
    """``{distribution name: version}`` of every package this interpreter sees: the
    report compares them with the lock (dnnroofline.lockfile)."""
    from importlib import metadata

    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and name not in found:  # the first on sys.path is the one imported
            found[name] = dist.version
    return dict(sorted(found.items(), key=lambda kv: kv[0].lower()))


def _cudnn_version() -> str | None:
    import torch

    try:
        v = torch.backends.cudnn.version()
    except Exception:
        return None
    if not v:
        return None
    if v >= 90000:  # cuDNN 9: major*10000 + minor*100 + patch
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return (
        f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"  # cuDNN <= 8: major*1000 + minor*100 + patch
    )


def collect_fingerprint(env: str, device: str = "auto") -> dict:
    """The ``env_info.json`` object for this machine (contract keys plus a few more).

    ``device`` is the env's declared device; the fingerprint's ``device`` is the
    resolved one (auto -> cuda/mps/cpu). A declared device this machine lacks is
    recorded as ``device_requested`` (``device`` is then the best one it has) and left
    to :func:`check_env_matches` to refuse.
    """
    import psutil
    import torch

    avail = available_devices()
    req = (device or "auto").lower()
    if req not in DEVICES:
        raise InputError(f"--device must be one of {DEVICES}, got {device!r}")
    # A declared device this machine lacks is not recorded as its device.
    resolved = req if req in avail else resolve_device("auto", avail)
    cpu = cpu_info()
    gpus, driver = nvml_gpus()
    gpu_source = "nvml"
    if gpus is None:
        gpus, gpu_source = torch_gpus(), "torch.cuda"
    if driver is None and gpus:
        try:
            from torch.utils import collect_env

            driver = collect_env.get_nvidia_driver_version(collect_env.run)
        except Exception:
            driver = None
    provider, zone, zone_source = detect_cloud()
    now = _dt.datetime.now(_dt.timezone.utc).astimezone()
    return {
        "env": env,
        "device": resolved,
        "device_requested": req,
        "devices_available": avail,
        "date": now.isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "os": _os_name(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "cpu_model": cpu["model"],
        "cpu_vendor": cpu["vendor"],
        "cpu_family": cpu["family"],
        "cpu_model_number": cpu["model_number"],
        "arch": cpu["arch"],
        "cpu_cores_physical": cpu["cores_physical"],
        "cpu_cores_logical": cpu["cores_logical"],
        "cpu_flags": cpu["flags"],
        "cpu_max_clock_hz": cpu["max_clock_hz"],
        "cpu_clock_source": cpu["clock_source"],
        "llc_bytes": cpu["llc_bytes"],
        "ram_bytes": int(psutil.virtual_memory().total),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": installed_version("torchvision"),
        "packages": installed_packages(),
        "cuda": torch.version.cuda,
        "cuda_available": "cuda" in avail,
        "cudnn": _cudnn_version(),
        "driver": driver,
        "gpus": [
            {k: g[k] for k in ("name", "memory_bytes", "compute_capability", "index", "uuid")}
            for g in gpus
        ],
        "gpu_source": gpu_source if gpus else None,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "container": detect_container(),
        "cloud_provider": provider,
        "cloud_zone": zone,
        "cloud_zone_source": zone_source,
        "slurm": (
            {
                k.lower(): os.environ.get(f"SLURM_{k}")
                for k in ("JOB_ID", "JOB_PARTITION", "CLUSTER_NAME", "JOB_NODELIST")
            }
            if os.environ.get("SLURM_JOB_ID")
            else None
        ),
        "cpu_info_source": cpu["source"],
    }


# --------------------------------------------------------------------------- the match check


def _describe_machine(fp: Mapping) -> str:
    gpus = [g.get("name") for g in fp.get("gpus") or [] if g.get("name")]
    avail = fp.get("devices_available") or [fp.get("device")]
    return (
        f"this machine ({fp.get('host', '?')}) has devices {avail}, "
        f"CPU {fp.get('cpu_model', '?')!r}, "
        f"GPUs {gpus if gpus else 'none'}"
    )


def env_mismatches(env_name: str, declared: Mapping, fingerprint: Mapping) -> list[str]:
    """What env ``env_name`` declares that the fingerprinted machine lacks (empty: a match).

    ``declared`` is the env's config entry: ``device`` (auto|cpu|cuda|mps) and
    optional ``gpu_name`` / ``cpu_name``, case-insensitive substrings of the GPU
    and CPU model names. InputError for a device value that is not one of DEVICES.
    """
    dev = str(declared.get("device") or "auto").lower()
    if dev not in DEVICES:
        raise InputError(
            f"env {env_name!r}: envs.{env_name}.device must be one of {DEVICES}, "
            f"got {declared.get('device')!r}"
        )
    problems = []
    avail = list(fingerprint.get("devices_available") or [])
    if not avail:  # an env_info.json from elsewhere: its device, and cpu is always there
        avail = sorted({"cpu", str(fingerprint.get("device") or "cpu")})
    if dev != "auto" and dev not in avail:
        problems.append(f"device {dev!r}")
    gpu_names = [str(g.get("name", "")) for g in fingerprint.get("gpus") or []]
    want_gpu = declared.get("gpu_name")
    if want_gpu and not any(str(want_gpu).lower() in n.lower() for n in gpu_names):
        problems.append(f"gpu_name {want_gpu!r}")
    want_cpu = declared.get("cpu_name")
    cpu_model = str(fingerprint.get("cpu_model") or "")
    if want_cpu and str(want_cpu).lower() not in cpu_model.lower():
        problems.append(f"cpu_name {want_cpu!r}")
    return problems


def check_env_matches(env_name: str, declared: Mapping, fingerprint: Mapping) -> None:
    """Refuse (InputError) when this machine is not the one env ``env_name`` declares.

    ``declared`` is the env's config entry (see :func:`env_mismatches`); ``fingerprint``
    is :func:`collect_fingerprint`'s object. Returns None when they match.
    """
    problems = env_mismatches(env_name, declared, fingerprint)
    if problems:
        raise InputError(
            f"env {env_name!r} declares {', '.join(problems)} (envs.{env_name} in the config), "
            f"but {_describe_machine(fingerprint)}. Refusing to file results under the wrong "
            f"machine: run env {env_name!r} on the machine it describes, or fix envs.{env_name}."
        )
    return None


def check_copied_env(env_name: str, declared: Mapping, fingerprint: Mapping, where: str) -> None:
    """Refuse (InputError) to merge results/{env}/ copied from another machine when its
    env_info.json (``where``) is another env's, or its machine is not what the env declares."""
    recorded = fingerprint.get("env")
    if recorded and recorded != env_name:
        raise InputError(
            f"{where}: results copied in as env {env_name!r} are env {recorded!r}'s "
            f"(its env_info.json and run ids name {recorded!r}). A results folder keeps its "
            f"env name: copy it to results/{recorded}/ and list env {recorded!r} in the config."
        )
    problems = env_mismatches(env_name, declared, fingerprint)
    if problems:
        machine = _describe_machine(fingerprint).replace("this machine", "the machine", 1)
        raise InputError(
            f"{where}: env {env_name!r} declares {', '.join(problems)} (envs.{env_name} in the "
            f"config), but its copied results come from a machine that does not match: "
            f"{machine}. Refusing to merge results filed under the wrong machine: fix "
            f"envs.{env_name} to describe that machine, or move results/{env_name}/ aside."
        )


def machine_here(device: str, gpu_name: str | None = None) -> dict:
    """The few facts a job compares with its env's env_info.json: the device it runs on,
    the CPU model (read as the fingerprint reads it), the GPU it uses and the host."""
    return {
        "device": device,
        "cpu_model": cpu_model_name(),
        "gpu_name": gpu_name,
        "host": socket.gethostname(),
    }


def check_same_machine(env_name: str, recorded: Mapping, here: Mapping, where: str) -> None:
    """Refuse (InputError) a job whose machine is not the one ``where`` fingerprinted.

    ``recorded`` is the env's env_info.json (taken by the env_info stage, which also
    checked it against the config); ``here`` is :func:`machine_here` of this job. They
    must agree on the env, the device, the CPU model and, on CUDA, the GPU: a stale
    env_info.json from another machine (a copied checkout, another Slurm node type)
    must not let this machine's numbers be filed under that env.
    """
    problems = []
    rec_env = recorded.get("env")
    if rec_env and rec_env != env_name:
        problems.append(f"it is the fingerprint of env {rec_env!r}, not {env_name!r}")
    rec_dev, dev = recorded.get("device"), here.get("device")
    if rec_dev and dev and rec_dev != dev:
        problems.append(f"it records device {rec_dev!r}, but this job runs on {dev!r}")
    rec_cpu, cpu = str(recorded.get("cpu_model") or ""), str(here.get("cpu_model") or "")
    if rec_cpu and cpu and rec_cpu.strip().lower() != cpu.strip().lower():
        problems.append(f"it records CPU {rec_cpu!r}, but this machine has {cpu!r}")
    gpu = here.get("gpu_name")
    rec_gpus = [str(g.get("name", "")) for g in recorded.get("gpus") or []]
    if dev == "cuda" and gpu and rec_gpus and gpu not in rec_gpus:
        problems.append(f"it records GPUs {rec_gpus}, but this job runs on {gpu!r}")
    if problems:
        taken = f"host {recorded.get('host', '?')}, {recorded.get('date', '?')}"
        raise InputError(
            f"env {env_name!r}: this machine ({here.get('host', '?')}) is not the one "
            f"{where} describes ({taken}): {'; '.join(problems)}. Refusing to file results "
            f"under the wrong machine: run env {env_name!r} on the machine it describes, or "
            "give this machine an env of its own in the config. If the hardware of env "
            f"{env_name!r} really changed, move results/{env_name}/ aside so that the env "
            "starts afresh (its runs were measured on the old machine)."
        )
