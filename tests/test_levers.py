"""The one lever engine (dnnroofline.perfmodel.levers): crafted points in, levers out; its
hardware facts are dnnroofline.study.precisions'."""

from __future__ import annotations

import pytest

from dnnroofline.perfmodel.levers import PointFacts, levers, one_line, short_lever


def kinds(**facts) -> list[str]:
    return [m["kind"] for m in levers(PointFacts(**facts))]


def lever(kind: str, **facts) -> dict:
    return next(m for m in levers(PointFacts(**facts)) if m["kind"] == kind)


CPU_FP32 = {"bound": "compute", "efficiency": 0.5, "device": "cpu", "precision": "fp32"}


@pytest.mark.parametrize(
    "flags, kind",
    [
        (["avx2", "amx_tile"], "no_cpu_bf16"),  # AMX tiles alone do no bf16 arithmetic
        (["avx2", "amx_tile", "amx_bf16"], "cpu_bf16"),
        (["avx512f", "avx512_bf16"], "cpu_bf16"),
        (["avx2"], "no_cpu_bf16"),
    ],
)
def test_bf16_is_offered_on_a_cpu_only_where_the_study_would_run_it(flags, kind):
    moves = kinds(**CPU_FP32, cpu_flags=flags, threads=8, cores=8)
    other = "cpu_bf16" if kind == "no_cpu_bf16" else "no_cpu_bf16"
    assert kind in moves and other not in moves
    if kind == "cpu_bf16":
        assert "amx_tile" not in lever(kind, **CPU_FP32, cpu_flags=flags)["flags"]


def test_a_cpu_without_known_flags_is_offered_bf16_where_it_has_the_units():
    assert lever("cpu_bf16", **CPU_FP32)["flags"] is None
    assert "(bf16 where the CPU has bf16 units, more cores)" in short_lever(
        "compute", 0.9, False, "cpu", "fp32"
    )
    # a bf16 point is on bf16 already
    assert "cpu_bf16" not in kinds(**{**CPU_FP32, "precision": "bf16"})


def test_more_threads_only_under_the_physical_cores():
    assert lever("more_threads", **CPU_FP32, threads=2, cores=8) == {
        "kind": "more_threads",
        "threads": 2,
        "cores": 8,
    }
    assert not {"more_threads", "more_cores"} & set(kinds(**CPU_FP32, threads=8, cores=8))


@pytest.mark.parametrize(
    "cc, precision, expected",
    [
        ((9, 0), "fp32", {"kind": "tensor_cores", "options": ["tf32", "bf16", "amp"]}),
        ((8, 0), "tf32", {"kind": "tensor_cores", "options": ["bf16", "amp"]}),
        (None, "fp32", {"kind": "tensor_cores", "options": ["tf32", "bf16", "amp"]}),
        ((7, 0), "fp32", {"kind": "amp_only"}),  # Volta: fp16 tensor cores only
        ((6, 1), "fp32", None),  # Pascal: none
        ((9, 0), "bf16", None),  # already on them
    ],
)
def test_tensor_cores_follow_the_gpus_compute_capability(cc, precision, expected):
    f = PointFacts("compute", 0.5, device="cuda", precision=precision, cuda_cc=cc)
    moves = levers(f)
    tensor = [m for m in moves if m["kind"] in ("tensor_cores", "amp_only")]
    if expected is None:
        assert tensor == []
    else:
        assert {k: tensor[0][k] for k in expected} == expected
    assert moves[-1]["kind"] == "gpu_kernels"


def test_memory_levers_drop_what_the_run_does_already():
    base = {"bound": "memory", "efficiency": 0.5, "device": "cuda", "precision": "fp32"}
    assert kinds(**base) == ["larger_batch", "fusion", "channels_last", "lower_precision"]
    done = kinds(**base, compiled=True, channels_last=True, min_bytes=(376e6, 398e6))
    assert done == ["larger_batch"]  # bf16 would move more bytes here, not fewer
    half = lever("lower_precision", **base, min_bytes=(376e6, 200e6))
    assert half["bytes"] == [376e6, 200e6]


def test_the_order_above_then_overheads_then_the_bounds_levers_then_data():
    f = PointFacts("memory", 0.1, above=True, device="cuda", precision="fp32",
                   roof_source="datasheet", data_wait_share=0.2)  # fmt: skip
    moves = levers(f)
    assert [m["kind"] for m in moves][:3] == ["fix_numbers", "overheads", "larger_batch"]
    assert moves[0]["roof_source"] == "datasheet" and moves[-1]["kind"] == "data_loading"
    # a host-bound point has its own first lever, and no overheads beside it
    assert kinds(bound="host", efficiency=0.1, device="cuda", busy_share=0.5) == ["host"]


def test_inconclusive_and_unknown_devices_have_levers_of_their_own():
    assert kinds(bound="inconclusive", efficiency=0.5) == ["inconclusive"]
    assert kinds(bound="compute", efficiency=0.5, device="mps", precision="fp32") == ["kernels"]


def test_the_one_line_is_the_first_lever():
    f = PointFacts("memory", 0.5, device="cuda", precision="fp32", compiled=True)
    assert one_line(levers(f), f) == "raise AI: larger batch, lower-precision activations"
    f = PointFacts("compute", 0.9, device="cuda", precision="fp32", cuda_cc=(7, 5))
    assert one_line(levers(f), f) == "near its roof: only a higher roof helps (amp tensor cores)"
    assert short_lever("memory", 0.5, True).startswith("fix the numbers first")
    assert short_lever(None, 0.5) == "unknown bound"


def test_a_cpu_step_that_faults_in_its_memory_every_step_has_the_allocator_as_a_lever():
    paged = lever("page_faults", **CPU_FP32, paging=(30.0, 0.12))
    assert paged == {"kind": "page_faults", "mib": 30.0, "sys_share": 0.12}
    assert "page_faults" not in kinds(**CPU_FP32, paging=(0.5, 0.12))  # a few pages
    assert "page_faults" not in kinds(**CPU_FP32, paging=(30.0, 0.01))  # cheap ones
    assert "page_faults" not in kinds(**CPU_FP32)  # not recorded
    on_gpu = {**CPU_FP32, "device": "cuda", "paging": (30.0, 0.12)}  # its caching allocator
    assert "page_faults" not in kinds(**on_gpu)
