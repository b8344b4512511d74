"""Datasheet peaks: GPU rows and name lookup, CPU derived peaks."""

from __future__ import annotations

import re

import pytest

from dnnroofline.errors import InputError
from dnnroofline.study import datasheet as ds

# torch / NVML device names -> datasheet row key
NAMES = {
    "NVIDIA H100 80GB HBM3": "h100_sxm5",
    "NVIDIA H100 SXM5 80GB": "h100_sxm5",
    "NVIDIA H100 PCIe": "h100_pcie",
    "NVIDIA H100 NVL": "h100_nvl",
    "NVIDIA H200": "h200_sxm",
    "NVIDIA H200 NVL": "h200_nvl",
    "NVIDIA A100-SXM4-40GB": "a100_sxm_40gb",
    "NVIDIA A100-SXM4-80GB": "a100_sxm_80gb",
    "NVIDIA A100-PCIE-40GB": "a100_pcie_40gb",
    "NVIDIA A100 80GB PCIe": "a100_pcie_80gb",
    "NVIDIA A10": "a10",
    "NVIDIA L4": "l4",
    "NVIDIA L40S": "l40s",
    "Tesla T4": "t4",
    "NVIDIA GeForce RTX 4090": "rtx_4090",
    "NVIDIA GeForce RTX 4080": "rtx_4080",
    "Tesla V100-SXM2-16GB": "v100_sxm2",
    "Tesla V100-SXM2-32GB": "v100_sxm2",
    "Tesla V100-PCIE-32GB": "v100_pcie",
}

UNKNOWN = [
    None,
    "",
    "NVIDIA GeForce RTX 4080 SUPER",  # different peaks than the 4080
    "NVIDIA GeForce RTX 4090 Laptop GPU",
    "NVIDIA A10G",  # AWS part, not the A10 datasheet
    "Tesla V100S-PCIE-32GB",
    "NVIDIA GH200 480GB",
    "NVIDIA L40",
    "AMD Instinct MI300X",
    "NVIDIA GeForce RTX 3090",
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb",  # a slice: a fraction of the SMs and bandwidth
    "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
    "NVIDIA H100",  # which H100? SXM, PCIe and NVL peaks differ
]


@pytest.mark.parametrize("name,key", sorted(NAMES.items()))
def test_lookup_resolves_torch_and_nvml_names(name, key):
    row = ds.lookup_gpu(name)
    assert row is not None, name
    assert row.key == key


@pytest.mark.parametrize("name,key", sorted(NAMES.items()))
def test_each_name_matches_exactly_one_row(name, key):
    norm = re.sub(r"\s+", " ", name)
    hits = [
        g.key for g in ds.GPU_PEAKS if any(re.search(p, norm, re.IGNORECASE) for p in g.patterns)
    ]
    assert hits == [key]


@pytest.mark.parametrize("name", UNKNOWN)
def test_unknown_gpu_is_none(name):
    assert ds.lookup_gpu(name) is None


def test_h100_sxm_figures():
    h = ds.lookup_gpu("NVIDIA H100 80GB HBM3")
    assert h.flops("bf16") == pytest.approx(989e12)
    assert h.flops("amp") == pytest.approx(989e12)  # amp -> FP16 tensor
    assert h.flops("tf32") == pytest.approx(495e12)
    assert h.flops("fp32") == pytest.approx(67e12)  # CUDA cores, not TF32
    assert h.fp64 == pytest.approx(34e12)
    assert h.mem_bw == pytest.approx(3.35e12)


@pytest.mark.parametrize(
    "name,fp32,tf32,fp16,bf16,bw",
    [
        ("NVIDIA H100 PCIe", 51e12, 378e12, 756e12, 756e12, 2.0e12),
        ("NVIDIA H200", 67e12, 495e12, 989e12, 989e12, 4.8e12),
        ("NVIDIA A100-SXM4-80GB", 19.5e12, 156e12, 312e12, 312e12, 2.039e12),
        ("NVIDIA A100-SXM4-40GB", 19.5e12, 156e12, 312e12, 312e12, 1.555e12),
        ("NVIDIA A100-PCIE-40GB", 19.5e12, 156e12, 312e12, 312e12, 1.555e12),
        ("NVIDIA L4", 30.3e12, 60e12, 121e12, 121e12, 300e9),
        ("Tesla T4", 8.1e12, None, 65e12, None, 320e9),
        ("NVIDIA GeForce RTX 4090", 82.6e12, 82.6e12, 165.2e12, 165.2e12, 1008e9),
        ("NVIDIA GeForce RTX 4080", 48.7e12, 48.7e12, 97.5e12, 97.5e12, 716.8e9),
        ("Tesla V100-SXM2-16GB", 15.7e12, None, 125e12, None, 900e9),
        ("Tesla V100-PCIE-32GB", 14e12, None, 112e12, None, 900e9),
    ],
)
def test_rows_match_reference_table(name, fp32, tf32, fp16, bf16, bw):
    g = ds.lookup_gpu(name)
    for got, want in ((g.fp32, fp32), (g.tf32, tf32), (g.fp16, fp16), (g.bf16, bf16)):
        if want is None:
            assert got is None
        else:
            assert got == pytest.approx(want)
    assert g.mem_bw == pytest.approx(bw)


def test_t4_and_v100_have_no_tf32_or_bf16():
    for name in ("Tesla T4", "Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB"):
        g = ds.lookup_gpu(name)
        assert g.flops("tf32") is None and g.flops("bf16") is None, name
        assert g.flops("amp") > g.flops("fp32")


def test_every_row_is_cited_and_dense_rates_are_ordered():
    assert len(ds.GPU_PEAKS) >= 15
    for g in ds.GPU_PEAKS:
        assert g.citation and re.search(r"NVIDIA .*\(20\d\d\)", g.citation), g.key
        assert "http" not in g.citation
        assert g.mem_bw > 1e11 and g.fp32 > 1e12, g.key
        assert g.fp16 > g.fp32, g.key  # tensor-core FP16 beats CUDA-core FP32
        if g.tf32 is not None:
            assert g.fp32 <= g.tf32 < g.fp16, g.key  # dense: TF32 is half of FP16
            # (L40S datasheet: 183 vs 362.05, hence 2%)
            assert g.tf32 == pytest.approx(g.fp16 / 2, rel=0.02), g.key
        for p in ("fp32", "tf32", "amp", "bf16", None):
            text = g.citation_for(p)
            assert g.citation in text and g.name in text


def test_unknown_precision_raises():
    with pytest.raises(InputError, match="fp8"):
        ds.lookup_gpu("NVIDIA L4").flops("fp8")


# ----------------------------------------------------------------------------- CPUs


def test_cpu_peak_formula():
    assert ds.cpu_peak_flops(2, 2.5e9, 32) == pytest.approx(160e9)
    assert ds.cpu_peak_flops(64, 3.0e9, 64) == pytest.approx(12.288e12)
    for bad in ((0, 1e9, 32), (2, 0.0, 32), (2, 1e9, -1), (2, float("nan"), 32), (True, 1, 1)):
        with pytest.raises(InputError):
            ds.cpu_peak_flops(*bad)


@pytest.mark.parametrize(
    "flags,vendor,family,model,arch,want",
    [
        ({"avx", "avx2", "fma"}, "GenuineIntel", 6, 85, "x86_64", 32),
        ({"avx", "avx2", "fma", "avx512f"}, "GenuineIntel", 6, 143, "x86_64", 64),
        ({"avx", "avx2", "fma", "avx512f"}, "AuthenticAMD", 25, 17, "x86_64", 32),  # Zen 4
        ({"avx", "avx2", "fma", "avx512f"}, "AuthenticAMD", 26, 2, "x86_64", 64),  # Zen 5
        ({"avx", "avx2", "fma"}, "AuthenticAMD", 23, 1, "x86_64", 16),  # Zen 1
        ({"avx", "avx2", "fma"}, "AuthenticAMD", 23, 49, "x86_64", 32),  # Zen 2
        ({"avx"}, "GenuineIntel", 6, 42, "x86_64", 16),  # Sandy Bridge
        ({"sse2"}, "GenuineIntel", 6, 15, "x86_64", 8),
        ({"asimd"}, "", None, None, "aarch64", 32),
    ],
)
def test_cpu_fp32_flop_per_cycle(flags, vendor, family, model, arch, want):
    rate = ds.cpu_flop_per_cycle(
        "fp32", flags, arch=arch, vendor=vendor, family=family, model=model
    )
    assert rate.flop_per_cycle == want
    assert rate.reason


def test_cpu_bf16_flop_per_cycle():
    base = {"avx", "avx2", "fma", "avx512f"}
    intel = {"vendor": "GenuineIntel", "family": 6, "model": 143}
    assert ds.cpu_flop_per_cycle("bf16", base | {"amx_bf16"}, **intel).flop_per_cycle == 1024
    assert ds.cpu_flop_per_cycle("bf16", base | {"avx512_bf16"}, **intel).flop_per_cycle == 128
    assert ds.cpu_flop_per_cycle("bf16", base, **intel).flop_per_cycle == 64  # via fp32
    zen4 = {"vendor": "AuthenticAMD", "family": 25, "model": 17}
    assert ds.cpu_flop_per_cycle("bf16", base | {"avx512_bf16"}, **zen4).flop_per_cycle == 64
    assert ds.cpu_flop_per_cycle("tf32", base, **intel) is None
    assert ds.cpu_flop_per_cycle("amp", base, **intel) is None


def test_cpu_datasheet_roof_names_formula_and_inputs():
    roof = ds.cpu_datasheet_roof(
        "fp32",
        cpu_model="Test CPU",
        cores=4,
        clock_hz=3.0e9,
        clock_source="sysfs",
        flags=["avx2", "fma"],
        vendor="GenuineIntel",
        family=6,
        model=85,
    )
    assert roof["kind"] == "compute" and roof["source"] == "datasheet"
    assert roof["precision"] == "fp32"
    assert roof["value"] == pytest.approx(4 * 3.0e9 * 32)
    for part in ("cores x clock x FLOP/cycle", "4 cores", "3.000 GHz", "32 FP32", "Test CPU"):
        assert part in roof["citation"], part
    assert roof["inputs"]["flop_per_cycle"] == 32
    assert (
        ds.cpu_datasheet_roof(
            "tf32", cpu_model="x", cores=4, clock_hz=3e9, clock_source="s", flags=["avx2", "fma"]
        )
        is None
    )
