"""The one roof policy (dnnroofline.estimate.roofline.select_roof) and every stage that picks
a roof going through it: the points, the plots, the model's tables and predictions, the
prediction check, the above-roof check of ncu's kernels, the gpu-check summary and the
report."""

from __future__ import annotations

import pytest

from dnnroofline.aggregate import check, predictions
from dnnroofline.aggregate.points import _point_roofs
from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.ncu import kernels as ncu_kernels
from dnnroofline.ncu.above_roof import kernels_above_measured_roof
from dnnroofline.perfmodel import op_class_tables
from dnnroofline.report import data, gpu_summary

T = 1e12


def compute(precision, source, value):
    return {"kind": "compute", "precision": precision, "source": source, "value": value}


def memory(source, value, benchmark=None):
    entry = {"kind": "memory", "precision": None, "source": source, "value": value}
    return entry | ({"benchmark": benchmark} if benchmark else {})


def roofs(*entries):
    return roofline.parse_roofs({"roofs": list(entries)})


# --------------------------------------------------------------------------- the rule


def test_measured_is_preferred_over_a_higher_datasheet_roof():
    r = roofs(compute("fp32", "datasheet", 67 * T), compute("fp32", "measured", 52 * T))
    assert roofline.select_roof(r, "compute", "fp32").value == 52 * T


def test_the_highest_of_one_source_wins_whatever_its_place_in_the_file():
    r = roofs(compute("bf16", "measured", 700 * T), compute("bf16", "measured", 760 * T))
    assert roofline.select_roof(r, "compute", "bf16").value == 760 * T


def test_without_a_measured_roof_the_datasheet_one_is_taken():
    r = roofs(compute("tf32", "datasheet", 495 * T), memory("datasheet", 3.35 * T))
    assert roofline.select_roof(r, "compute", "tf32").source == "datasheet"
    assert roofline.select_roof(r, "memory").value == 3.35 * T


def test_amp_takes_the_highest_of_its_amp_and_fp16_roofs():
    r = roofs(compute("amp", "measured", 600 * T), compute("fp16", "measured", 700 * T))
    assert roofline.select_roof(r, "compute", "amp").value == 700 * T


def test_no_precision_borrows_another_ones_roof():
    r = roofs(compute("fp32", "measured", 52 * T), compute("bf16", "measured", 760 * T))
    assert roofline.select_roof(r, "compute", "tf32") is None
    assert roofline.select_roof(r, "compute", "amp") is None


def test_the_memory_roof_is_the_fastest_dram_benchmark_of_its_source():
    r = roofs(
        memory("measured", 2.99 * T, "triad"),
        memory("measured", 2.96 * T, "scale"),
        memory("measured", 3.01 * T, "d2d_copy"),
        memory("datasheet", 3.35 * T),
    )
    assert roofline.select_roof(r, "memory").value == 3.01 * T


def test_one_source_asked_for_never_gives_the_other():
    r = roofs(compute("fp32", "datasheet", 67 * T), memory("measured", 3 * T))
    assert roofline.select_roof(r, "compute", "fp32", sources=("measured",)) is None
    assert roofline.select_roof(r, "memory", sources=("datasheet",)) is None
    # the order of sources is the preference
    both = roofs(compute("fp32", "datasheet", 67 * T), compute("fp32", "measured", 52 * T))
    pick = roofline.select_roof(both, "compute", "fp32", sources=("datasheet", "measured"))
    assert pick.source == "datasheet"


@pytest.mark.parametrize("sources", [(), ("ncu-theoretical",), ("measured", "guess")])
def test_an_unknown_source_is_refused(sources):
    with pytest.raises(InputError, match="roof sources must be among"):
        roofline.select_roof([], "memory", sources=sources)


def test_roof_precisions_compute_peak_and_higher_roofs():
    r = roofs(
        compute("fp32", "measured", 52 * T),
        compute("tf32", "measured", 54 * T),  # within 5% of fp32: no higher roof
        compute("fp16", "datasheet", 989 * T),
        compute("bf16", "measured", 760 * T),
    )
    assert roofline.roof_precisions(r) == ("fp32", "tf32", "amp", "bf16")
    higher = roofline.higher_compute_roofs(r, "fp32")
    assert [(p, roof.value) for p, roof in higher] == [("amp", 989 * T), ("bf16", 760 * T)]
    assert roofline.precision_roof({"fp16": 7.0, "amp": 6.0}, "amp") == 7.0
    assert roofline.precision_roof({"fp32": 1.0}, "tf32") is None


# --------------------------------------------------------------------------- every stage

#: A file where the first-listed roof of each kind is not the one the policy takes: amp's
#: measured roof is named twice (amp lower, fp16 higher), the d2d copy beats the triad.
CEILINGS = {
    "env": "gpu",
    "device": "cuda",
    "roofs": [
        compute("fp32", "measured", 52 * T),
        compute("amp", "measured", 600 * T),
        compute("fp16", "measured", 700 * T),
        compute("bf16", "datasheet", 989 * T),
        memory("measured", 2.90 * T, "triad"),
        memory("measured", 3.01 * T, "d2d_copy"),
        compute("fp32", "datasheet", 67 * T),
        compute("amp", "datasheet", 989 * T),
        memory("datasheet", 3.35 * T),
    ],
}
AMP_MEASURED, MEMORY_MEASURED = 700 * T, 3.01 * T


def test_the_point_the_plot_the_model_and_the_checks_use_one_roof():
    selected = roofline.select_roof(roofs(*CEILINGS["roofs"]), "compute", "amp")
    bw = roofline.select_roof(roofs(*CEILINGS["roofs"]), "memory")
    assert (selected.value, bw.value) == (AMP_MEASURED, MEMORY_MEASURED)

    # the roofline point (roofline_points.csv)
    point_compute, point_memory = _point_roofs("gpu", "amp", {"gpu": CEILINGS}, {})
    assert (point_compute, point_memory) == (selected, bw)

    # the plot draws that roof, with that memory roof
    pairs = roofline.roofs_to_draw({"gpu": CEILINGS}, {"gpu": ["amp"]})
    drawn = {(p.compute.value, p.memory.value) for p in pairs}
    assert (AMP_MEASURED, MEMORY_MEASURED) in drawn

    # the model's tables and its prediction
    tables_roofs, _ = roofline.roofs_from_ceilings(CEILINGS)
    assert tables_roofs == {
        "compute": {"fp32": 52 * T, "amp": AMP_MEASURED, "bf16": 989 * T},
        "memory": MEMORY_MEASURED,
    }
    doc = op_class_tables.tables_from_ceilings(CEILINGS)
    machine = predictions.machine_of(doc, "derived")
    assert (machine.compute_roof("amp"), machine.memory) == (AMP_MEASURED, MEMORY_MEASURED)
    files = predictions.EnvFiles("gpu", CEILINGS)
    assert predictions.study_env_of(files).roof_precisions == ("fp32", "amp", "bf16")

    # the prediction check's measured and datasheet baselines
    assert check.roof_of(CEILINGS, "compute", "measured", "amp", "f") == AMP_MEASURED
    assert check.roof_of(CEILINGS, "memory", "measured", None, "f") == MEMORY_MEASURED
    assert check.roof_of(CEILINGS, "compute", "datasheet", "amp", "f") == 989 * T
    with pytest.raises(check.NoRoof, match="no datasheet compute roof for bf16"):
        only_measured = {"roofs": [compute("bf16", "measured", 1.0)]}
        check.roof_of(only_measured, "compute", "datasheet", "bf16", "f")

    # the report's ridge (no point placed yet) and its ceilings table
    ridge = data.ridge_for("gpu", "amp", [], {"gpu": CEILINGS})
    assert (ridge["peak"], ridge["bw"]) == (AMP_MEASURED, MEMORY_MEASURED)

    # the gpu-check summary shows that roof as the measured one
    rows = {r[0]: r for r in gpu_summary.roof_rows(CEILINGS)}
    assert rows["amp compute"][1:] == ["700.0 TFLOP/s", "989.0 TFLOP/s", "71%"]
    assert rows["memory bandwidth"][1] == "3.01 TB/s"
    assert "fp16 compute" not in rows  # a name of amp's roof, not a precision of its own


def test_the_above_roof_check_holds_a_kernel_to_the_measured_roof_the_point_uses():
    def kernel(name, tflop):
        flop = {"fp64": 0, "fp32": 0, "fp16": 0, "tensor": tflop * T}
        return {"id": name, "name": f"void {name}<1>(int)", "time_s": 1.0, "flop": flop}

    ncu = {"kernels": [kernel("between", 650), kernel("over", 720)]}
    above = kernels_above_measured_roof(ncu, CEILINGS, "amp")
    # 650 beats amp's lower entry (600) but not its roof (700): not above
    assert [(k["id"], k["roof"]) for k in above] == [("over", AMP_MEASURED)]


def test_the_kernel_plot_holds_a_tensor_kernel_to_its_own_precisions_roofs():
    env = ncu_kernels.level_roofs(CEILINGS)
    # amp's roofs (fp16 named or not), not bf16's higher datasheet peak
    assert ncu_kernels.kernel_roof_at(env, 1e9, "tensor", "amp") == 989 * T
    fp16, bf16 = compute("fp16", "measured", 700 * T), compute("bf16", "measured", 900 * T)
    only_fp16 = {"roofs": [fp16, bf16, memory("measured", 3 * T)]}
    env = ncu_kernels.level_roofs(only_fp16)
    assert ncu_kernels.kernel_roof_at(env, 1e9, "tensor", "amp") == 700 * T
