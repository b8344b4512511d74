"""The study's kernels that beat a measured roof: proof that the roof is wrong.

A measured roof is the best rate the env's microbenchmarks reached. A kernel of the
study that runs faster on the same units shows that the microbenchmarks missed the
machine's peak (one GEMM shape, one library, a clock that dropped), so the roof is
too low. Each kernel is held to the measured roof of its FLOP class: tensor-core
kernels to the run's tensor precision (tf32 for an fp32 run, as
:func:`dnnroofline.ncu.kernels.kernel_roof_at`), CUDA-core fp32 kernels to the fp32
roof, each the roof :func:`dnnroofline.estimate.roofline.select_roof` gives from the
measured roofs alone (a datasheet roof is no proof of anything here). CUDA-core fp16
and fp64 have no measured roof and are not compared.

A kernel's rate is its FLOPs of that class over ncu's own kernel duration (replayed
alone with caches flushed, at the clocks the GPU runs). Pure: a parsed ncu JSON and a
ceilings object in, a list out.
"""

from __future__ import annotations

from collections.abc import Mapping

from dnnroofline.estimate import roofline
from dnnroofline.formatting import positive_number
from dnnroofline.ncu.kernels import class_precision, kernel_path, short_name

#: At most this many kernels are named on the per-kernel plot (all are in the lists).
NAMED_ON_PLOT = 3


def measured_roof(
    roofs: list[roofline.Roof], path: str | None, precision: str
) -> roofline.Roof | None:
    """The measured compute roof a kernel of FLOP class ``path`` in a ``precision`` run is
    held to; None for a class no microbenchmark measures, or without a measured roof."""
    roof_precision = class_precision(path, precision)
    if roof_precision is None:
        return None
    return roofline.select_roof(roofs, "compute", roof_precision, sources=("measured",))


def kernels_above_measured_roof(
    ncu: Mapping, ceilings: Mapping, precision: str, where: str = "ceilings"
) -> list[dict]:
    """The kernels of a parsed ncu capture (of a ``precision`` run) whose attained FLOP/s
    exceed the measured roof of their class, fastest first: index and id in ncu's
    ``kernels`` list, name and short name, class, rate, the roof and what set it."""
    roofs = roofline.parse_roofs(dict(ceilings), where)
    out = []
    for i, kernel in enumerate(ncu.get("kernels") or []):
        if not isinstance(kernel, Mapping):
            continue
        flop = kernel.get("flop") or {}
        path = kernel_path(flop)
        roof = measured_roof(roofs, path, precision)
        t = positive_number(kernel.get("time_s"))
        class_flop = positive_number(flop.get(path)) if path else None
        if roof is None or t is None or class_flop is None:
            continue
        rate = class_flop / t
        if not roofline.is_above_roof(rate, roof.value):
            continue
        out.append(
            {
                "index": i,
                "id": kernel.get("id"),
                "name": str(kernel.get("name", "")),
                "short_name": short_name(str(kernel.get("name", "")), 90),
                "path": path,
                "roof_precision": class_precision(path, precision),
                "time_s": t,
                "flops": rate,
                "roof": roof.value,
                "roof_set_by": roof.set_by,
                "above_by": rate / roof.value - 1.0,
            }
        )
    return sorted(out, key=lambda k: -k["flops"])


def summary_line(above: list[dict], precision: str) -> str:
    """One sentence: how many kernels beat which measured roof, and the fastest."""
    if not above:
        return f"No kernel of this {precision} capture beats its class's measured roof."
    top = above[0]
    roofs = ", ".join(
        f"{p} {roof / 1e12:.1f} TFLOP/s"
        for p, roof in dict.fromkeys((k["roof_precision"], k["roof"]) for k in above)
    )
    return (
        f"{len(above)} kernel(s) of this {precision} capture beat the measured roof "
        f"({roofs}), so that roof is too low: fastest {top['short_name']} at "
        f"{top['flops'] / 1e12:.1f} TFLOP/s ({top['above_by']:.1%} above; ncu kernel time)."
    )


def above_by_capture(
    docs: Mapping[tuple, Mapping], ceilings_by_env: Mapping[str, Mapping]
) -> dict[tuple, list[dict]]:
    """{(env, model, precision, batch): its kernels above their measured roof} for each ok
    capture whose env's ceilings are at hand."""
    out = {}
    for key, doc in docs.items():
        env, _model, precision, _batch = key
        if env in ceilings_by_env and str(doc.get("status") or "ok") == "ok":
            where = f"results/{env}/ceilings.json"
            out[key] = kernels_above_measured_roof(doc, ceilings_by_env[env], precision, where)
    return out
