"""Ceilings of one env: measured (microbenchmarks) and datasheet roofs -> ``ceilings.json``.

Measured compute: per precision the *best* of several microbenchmarks, each at
its best repeat: GEMMs of several sizes and shapes through ``torch.matmul`` (the
BLAS torch uses; FLOPs = 2*M*N*K) and convolutions through ``conv2d`` (oneDNN on
CPU, cuDNN on CUDA; nominal FLOPs, as the study counts them). On CUDA only the
GEMMs may set the roof (the study's FLOPs there are ncu's executed FLOPs, which a
Winograd convolution's nominal rate overstates). Every candidate is recorded (method,
times, FLOP/s) with the one that set the roof. GEMM inputs
rotate among a few sets so that no run finds its operands in cache. On CUDA the
kernels are timed with CUDA events; fp32 runs with TF32 off. On CUDA the GEMMs are a
sweep (:mod:`dnnroofline.measure.gemm_sweep`): squares 2048-16384 and transformer- and
convolution-like shapes, each through cuBLAS and cuBLASLt, each with the SM clock and
power NVML read during its timed repeats; one shape is not the machine's roof.

Measured memory: on CPU a STREAM triad ``a = b + s*c`` (``torch.add(b, c,
alpha=s, out=a)``, no temporaries) and a STREAM copy over float64 arrays of at
least 4x the last-level cache; bytes counted per STREAM: triad 3 arrays, copy 2
(read + write; write-allocate traffic is not counted). On CUDA a large
device-to-device copy (bytes read + bytes written) and the same triad. Per STREAM
convention the roof is the *best* (fastest) repeat; the median is recorded too.

Datasheet roofs: GPUs from :mod:`dnnroofline.study.datasheet`; CPUs derived as cores x
clock x FLOP/cycle (no datasheet memory roof for a CPU: its bandwidth depends on
the DIMMs and channels populated, which the machine does not tell reliably).

Energy (``energy``): where the machine has an energy counter (NVML on a GPU, RAPL on a
CPU), an idle window, each precision's roof GEMM and the large copy are metered for a
window each, and pJ per FLOP per precision, pJ per DRAM byte and the static power are
fitted from them (:mod:`dnnroofline.measure.energy_kernels`); elsewhere the record says
why not, and nothing runs.

The pipeline picks a point's roof with :func:`dnnroofline.estimate.roofline.select_roof`
(measured first, then datasheet) and refuses when there is none (never a guess).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Iterable, Mapping

from dnnroofline.measure import contention
from dnnroofline.measure.ceiling_kernels import measure_compute
from dnnroofline.measure.energy import energy_meter
from dnnroofline.measure.energy_kernels import QUICK_WINDOW_S, WINDOW_S, measure_energy
from dnnroofline.measure.memory_kernels import measure_memory
from dnnroofline.measure.perf_run import probe
from dnnroofline.study.precisions import COMPUTE_DTYPE, require_known, support

KINDS = ("compute", "memory")
SOURCES = ("measured", "datasheet")
#: A measured roof this far above its datasheet roof is flagged (a wrong peak or a bug).
ABOVE_DATASHEET_RTOL = 0.0


# --------------------------------------------------------------------------- selection (pure)


def percent_of(measured: float, datasheet: float | None) -> float | None:
    if not datasheet or datasheet <= 0:
        return None
    return 100.0 * measured / datasheet


# --------------------------------------------------------------------------- datasheet roofs


def datasheet_roofs(
    device: str,
    device_name: str,
    precisions: Iterable[str],
    *,
    cpu: Mapping | None = None,
    threads: int = 1,
) -> tuple[list[dict], list[str]]:
    """Datasheet roofs for ``precisions`` (and memory), plus notes on what is missing."""
    from dnnroofline.study import datasheet as ds

    roofs: list[dict] = []
    notes: list[str] = []
    if device == "cuda":
        row = ds.lookup_gpu(device_name)
        if row is None:
            notes.append(
                f"no datasheet row for GPU {device_name!r}: datasheet roofs omitted "
                "(add it to dnnroofline/study/datasheet.py with its citation)"
            )
            return roofs, notes
        for p in precisions:
            v = row.flops(p)
            if v is None:
                notes.append(f"{row.name} datasheet has no {COMPUTE_DTYPE[p]} figure ({p})")
                continue
            roofs.append(
                {
                    "kind": "compute",
                    "precision": p,
                    "source": "datasheet",
                    "value": v,
                    "citation": row.citation_for(p),
                    "datasheet_row": row.key,
                    "datasheet_column": COMPUTE_DTYPE[p],
                }
            )
        roofs.append(
            {
                "kind": "memory",
                "precision": None,
                "source": "datasheet",
                "value": row.mem_bw,
                "citation": row.citation_for(None),
                "datasheet_row": row.key,
            }
        )
    elif device == "cpu" and cpu is not None:
        cores_phys = int(cpu.get("cores_physical") or 1)
        cores = max(1, min(int(threads), cores_phys))
        clock = cpu.get("max_clock_hz")
        if not clock:
            notes.append("CPU clock unknown: no derived datasheet compute roof")
        for p in precisions:
            if not clock:
                break
            roof = ds.cpu_datasheet_roof(
                p,
                cpu_model=str(cpu.get("model", "?")),
                cores=cores,
                clock_hz=float(clock),
                clock_source=str(cpu.get("clock_source", "?")),
                flags=cpu.get("flags_all") or cpu.get("flags") or [],
                arch=str(cpu.get("arch", "")),
                vendor=str(cpu.get("vendor", "")),
                family=cpu.get("family"),
                model=cpu.get("model_number"),
            )
            if roof is not None:
                roofs.append(roof)
        if threads > cores_phys:
            notes.append(
                f"{threads} threads on {cores_phys} physical cores: the derived peak counts "
                "physical cores (SMT siblings share the FMA units)"
            )
        notes.append(
            "no datasheet memory roof for a CPU: bandwidth depends on the memory channels "
            "populated; the measured STREAM roof is the memory ceiling"
        )
    else:
        notes.append(f"no datasheet roofs for device {device!r} ({device_name})")
    return roofs, notes


def annotate_vs_datasheet(roofs: list[dict]) -> list[str]:
    """Add ``percent_of_datasheet`` / ``above_datasheet`` to measured roofs; return warnings."""
    warnings = []
    for r in roofs:
        if r.get("source") != "measured":
            continue
        ds_roofs = [
            d
            for d in roofs
            if d.get("source") == "datasheet"
            and d.get("kind") == r["kind"]
            and d.get("precision") == r.get("precision")
        ]
        if not ds_roofs:
            r["percent_of_datasheet"] = None
            continue
        ds = max(ds_roofs, key=lambda d: d["value"])
        ds_v = ds["value"]
        r["percent_of_datasheet"] = percent_of(r["value"], ds_v)
        r["above_datasheet"] = r["value"] > ds_v * (1 + ABOVE_DATASHEET_RTOL)
        if r["above_datasheet"]:
            label = r.get("precision") or "memory"
            msg = (
                f"measured {r['kind']} {label} ({r['value']:.4g}) is ABOVE the datasheet roof "
                f"({ds_v:.4g}): a wrong datasheet peak or a measurement bug"
            )
            inputs = ds.get("inputs") or {}
            if inputs.get("cores") and inputs.get("flop_per_cycle") and inputs.get("clock_hz"):
                implied = r["value"] / (inputs["cores"] * inputs["flop_per_cycle"])
                r["implied_clock_hz"] = implied
                msg += (
                    f"; it implies a sustained clock of {implied / 1e9:.2f} GHz against the "
                    f"{inputs['clock_hz'] / 1e9:.2f} GHz used ({inputs.get('clock_source')}): "
                    "the derived CPU peak's clock is likely the nominal, not the turbo, clock"
                )
            warnings.append(msg)
    return warnings


# --------------------------------------------------------------------------- assembly


def device_facts(device: str) -> dict:
    import torch

    if device == "cuda":
        idx = torch.cuda.current_device()
        p = torch.cuda.get_device_properties(idx)
        free, _total = torch.cuda.mem_get_info(idx)
        l2 = getattr(p, "L2_cache_size", None)
        return {"name": p.name, "cc": (p.major, p.minor), "free_bytes": int(free), "l2_bytes": l2}
    return {"name": None, "cc": None, "free_bytes": None, "l2_bytes": None}


def build_ceilings(
    env: str,
    device: str = "auto",
    precisions: Iterable[str] = ("fp32",),
    *,
    quick: bool = False,
    expect_threads: int | None = None,
    perf_executable: str = "perf",
) -> dict:
    """Measure and assemble the ``ceilings.json`` object of this machine for ``env``.

    ``expect_threads``: the threads the env's runs use; a job that got fewer or more is
    refused, since the roofs of other threads are not the runs' roofs.
    ``perf_executable``: the perf binary a CPU env's counters are probed with (the
    config's ``perf.executable``, the one the perf jobs run).
    """
    import torch

    from dnnroofline.measure.envinfo import cpu_info, resolve_device
    from dnnroofline.measure.train_config import check_threads, parse_omp_threads

    start_time = time.time()
    t0 = time.monotonic()
    requested = [require_known(p, "--precisions") for p in dict.fromkeys(precisions)]
    dev = resolve_device(device)
    cpu0 = contention.snapshot()
    omp = os.environ.get("OMP_NUM_THREADS")
    omp_threads = parse_omp_threads(omp)
    if omp_threads is not None:
        torch.set_num_threads(omp_threads)
    threads = torch.get_num_threads()
    check_threads(expect_threads, threads, omp)
    cpu = cpu_info()
    facts = device_facts(dev)
    if dev == "cuda":
        device_name = facts["name"]
    elif dev == "mps":
        device_name = f"Apple MPS ({cpu['model']})"
    else:
        device_name = cpu["model"]

    why_not = support(dev, cuda_cc=facts["cc"], cpu_flags=cpu["flags_all"])
    skipped, measured_ok, notes = [], [], []
    for p in requested:
        if why_not[p]:
            skipped.append({"precision": p, "reason": f"{dev}: {why_not[p]}"})
        else:
            measured_ok.append(p)

    roofs: list[dict] = []
    for p in measured_ok:
        try:
            roofs.append(measure_compute(dev, p, quick=quick, threads=threads))
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            skipped.append({"precision": p, "reason": f"{dev}: GEMM failed: {exc}"})
    roofs.extend(
        measure_memory(
            dev,
            quick=quick,
            llc_bytes=cpu["llc_bytes"],
            ram_bytes=_ram_bytes(),
            free_device_bytes=facts["free_bytes"],
            threads=threads,
        )
    )
    energy = ceilings_energy(dev, roofs, quick=quick, llc_bytes=cpu["llc_bytes"], facts=facts)
    # every precision the device runs, a failed GEMM's too: its runs still need a roof
    ds_roofs, ds_notes = datasheet_roofs(dev, device_name, measured_ok, cpu=cpu, threads=threads)
    roofs.extend(ds_roofs)
    notes.extend(ds_notes)
    notes.extend(annotate_vs_datasheet(roofs))
    # CPU counters: probed once per env, recorded with the roofs
    perf_probe = probe(perf_executable) if dev == "cpu" else None
    other_load = contention.other_load(cpu0, contention.snapshot())
    notes.extend(_closing_notes(perf_probe, quick, other_load, cpu["cores_logical"], energy))
    return {
        "schema_version": 1,
        "env": env,
        "device": dev,
        "device_name": device_name,
        "threads": threads,
        "omp_num_threads": omp,
        "precisions_requested": requested,
        "llc_bytes": facts["l2_bytes"] if dev == "cuda" else cpu["llc_bytes"],
        "quick": quick,
        "roofs": roofs,
        "perf": perf_probe,
        "energy": energy,
        "skipped": skipped,
        "notes": notes,
        "other_load": other_load,
        "torch": torch.__version__,
        "date": _dt.datetime.fromtimestamp(start_time).astimezone().isoformat(timespec="seconds"),
        "start_time": start_time,
        "end_time": time.time(),
        "wall_s": round(time.monotonic() - t0, 3),
    }


def ceilings_energy(
    device: str, roofs: list[dict], *, quick: bool, llc_bytes: int | None, facts: Mapping
) -> dict:
    """The ``energy`` record of the ceilings (:func:`dnnroofline.measure.energy_kernels.
    measure_energy`): the GEMMs of the measured compute roofs in ``roofs`` and the copy,
    metered by NVML on the ceilings' GPU (cuda) or RAPL (cpu); elsewhere unavailable."""
    measured = [r for r in roofs if r["kind"] == "compute" and r["source"] == "measured"]
    index = 0
    if device == "cuda":
        import torch

        index = torch.cuda.current_device()
    return measure_energy(
        device,
        [r["precision"] for r in measured],
        measured,
        lambda: energy_meter(device, index),
        QUICK_WINDOW_S if quick else WINDOW_S,
        quick=quick,
        llc_bytes=llc_bytes,
        ram_bytes=_ram_bytes(),
        free_device_bytes=facts["free_bytes"],
    )


def _closing_notes(
    perf_probe: dict | None,
    quick: bool,
    other_load: dict | None,
    logical_cpus: int | None,
    energy: Mapping,
) -> list[str]:
    """The notes on how far the roofs can be trusted: no perf counters, no energy costs,
    quick mode, other processes busy meanwhile."""
    notes = []
    if perf_probe is not None and perf_probe["status"] != "ok":
        notes.append(f"perf counters unavailable: {perf_probe['reason']}")
    if energy["costs"] is None:
        notes.append(f"energy costs not fitted: {energy['costs_reason']}")
    if quick:
        notes.append("QUICK mode: tiny sizes for tests; these are not real ceilings")
    taken = contention.contended_cpus(other_load)
    if taken is not None:
        notes.append(contended_note(taken, logical_cpus))
    return notes


def _ram_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def contended_note(
    taken_cpus: float,
    logical_cpus: int | None,
    stage: str = "ceilings",
    effect: str = "measured roofs may be low, and points above them",
) -> str:
    """A measurement's note when other processes (or the hypervisor) took CPUs meanwhile:
    ``stage`` names its rule, ``effect`` what the contention does to its numbers."""
    of = f" of its {logical_cpus} logical CPUs" if logical_cpus else ""
    return (
        f"the machine was busy while the {stage} ran: other processes kept {taken_cpus:.2f}"
        f"{of} busy on average: {effect}; re-run them alone (snakemake --forcerun {stage})"
    )
