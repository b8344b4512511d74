"""The ncu CSV parser: real fixtures with known totals, edge cases, and property tests."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dnnroofline.errors import InputError
from dnnroofline.ncu.metrics import parse_number, select_tensor_counters, unit_scale
from dnnroofline.ncu.parse import parse_ncu_csv, parse_ncu_text

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "ncu"
NNPERF = DATA / "nnperf_resnet18_cifar10_bs64_L4_details_scaled.csv"
GARDENIA = DATA / "gardenia_sgemm_A100_details_base_printfp.csv"
MEINIE = DATA / "meinie_torch_sdpa_flash_raw_page.csv"
H100_RAW = DATA / "handmade_h100_raw_tensor.csv"
BOM_NA = DATA / "handmade_details_bom_stdout_na.csv"
PERM = DATA / "handmade_err_nvgpuctrperm.csv"
TRUNCATED = DATA / "handmade_truncated_details.csv"
PARSE_NCU = ROOT / "workflow" / "scripts" / "parse_ncu.py"

F = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
T = "sm__ops_path_tensor_"


def fixture_checksums() -> dict[str, str]:
    """``{file: sha256}`` of the real ncu fixtures as taken from their sources
    (tests/data/ncu/fixtures.sha256, in `sha256sum` format)."""
    lines = (DATA / "fixtures.sha256").read_text().splitlines()
    return {name: digest for digest, name in (line.split(None, 1) for line in lines)}


def test_fixture_copies_are_unchanged():
    sums = fixture_checksums()
    assert set(sums) == {NNPERF.name, GARDENIA.name, MEINIE.name, "README.md"}
    for name, digest in sums.items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name
    # where the shared originals sit next to this checkout, the sums are theirs
    shared = ROOT.parent / "shared" / "fixtures" / "ncu"
    for name, digest in sums.items() if shared.is_dir() else ():
        assert hashlib.sha256((shared / name).read_bytes()).hexdigest() == digest, name


# --------------------------------------------------------------------------- real fixtures


def test_nnperf_totals_match_the_fixture_readme():
    r = parse_ncu_csv(NNPERF)
    t = r["totals"]
    assert r["layout"] == "details"
    assert t["kernels"] == len(r["kernels"]) == 98
    assert t["time_s"] == pytest.approx(7.37625e-3, rel=1e-12)
    assert t["flop"]["total"] == 4_928_393_620
    assert t["flop"]["fp32"] == 4_928_393_620
    # No counter for these: null, not 0.
    assert t["flop"]["fp64"] is None and t["flop"]["fp16"] is None
    assert t["flop"]["tensor"] is None
    assert t["bytes"]["dram"] == 709_948_840
    assert t["bytes"]["l2"] is None and t["bytes"]["l1"] is None
    ai = t["flop"]["total"] / t["bytes"]["dram"]
    assert ai == pytest.approx(6.9419, abs=5e-5)
    assert t["arithmetic_intensity_dram"] == pytest.approx(ai)
    assert t["flop"]["total"] / t["time_s"] / 1e9 == pytest.approx(668.14, abs=5e-3)
    assert r["compute_capability"] == "8.9"


def test_nnperf_kb_is_1000_bytes():
    # Kbyte/Mbyte rows scaled by 1024 would overstate DRAM bytes by about 4.8%.
    t = parse_ncu_csv(NNPERF)["totals"]["bytes"]
    assert t["dram"] == 709_948_840
    assert t["dram_read"] + t["dram_write"] == t["dram"]
    assert unit_scale("Kbyte") == (Decimal(1000), "byte")
    assert unit_scale("KB") == (Decimal(1000), "byte")
    assert unit_scale("Mbyte") == (Decimal(10) ** 6, "byte")


def test_nnperf_first_kernel_units_per_row():
    k = parse_ncu_csv(NNPERF)["kernels"][0]
    assert k["id"] == 0
    assert k["name"].startswith("void implicit_convolve_sgemm<float, float, (int)128")
    assert k["bytes"]["dram_read"] == 1_080_000  # "1.08" Mbyte, exactly
    assert k["bytes"]["dram_write"] == 0
    assert k["time_s"] == pytest.approx(96.99e-6, rel=1e-12)


def test_gardenia_kernel_2():
    r = parse_ncu_csv(GARDENIA)
    assert r["layout"] == "details" and r["totals"]["kernels"] == 3
    k = next(k for k in r["kernels"] if k["id"] == 2)
    assert k["name"] == "void gemm_v1<float>(float *, float *, float *, int, int, int)"
    assert k["time_s"] == pytest.approx(33.4777, rel=2e-6)  # cycles / cycles per second
    # The fixture README's 7.30178e13 counts an HFMA2 as 2 FLOPs; it is packed
    # two-wide, so 4 (ncu's derived__..._hfma_pred_on_x4): 2.1e12 more FLOPs.
    cuda_core = k["flop"]["fp64"] + k["flop"]["fp32"] + k["flop"]["fp16"]
    assert cuda_core - 2 * 2_149_161_369_600 == pytest.approx(7.30178e13, rel=1e-5)
    assert k["flop"]["fp16"] == 4 * 2_149_161_369_600
    assert k["flop"]["fp32"] == 2 * 34_359_738_368_000
    assert k["bytes"]["dram"] == 807_658_682_624
    assert k["bytes"]["l2"] == 40_927_345_510_272
    assert k["bytes"]["l1"] == 38_708_392_755_200
    # Only smsp__inst_executed_pipe_tensor: no ops counter, so no tensor FLOPs,
    # and no fixed FLOPs-per-instruction guess either.
    assert k["flop"]["tensor"] is None
    assert any("tensor-pipe instructions" in w for w in r["warnings"])


def test_meinie_raw_page():
    r = parse_ncu_csv(MEINIE)
    t = r["totals"]
    assert r["layout"] == "raw"
    assert t["kernels"] == 16
    assert t["time_s"] == pytest.approx(11_086_048e-9, rel=1e-12)
    assert all(v is None for v in t["flop"].values())
    assert all(v is None for v in t["bytes"].values())
    assert r["kernels"][0]["name"].startswith("void flash_fwd_kernel<Flash_fwd_kernel_traits<128")
    assert r["compute_capability"] == "10.0"


def test_meinie_with_required_roofline_metrics_names_what_is_missing():
    with pytest.raises(InputError) as err:
        parse_ncu_csv(MEINIE, require_roofline_metrics=True)
    msg = str(err.value)
    assert MEINIE.name in msg
    assert "smsp__sass_thread_inst_executed_op_" in msg and "sm__ops_path_tensor_" in msg
    assert "dram__bytes.sum" in msg and "dram__bytes_read.sum" in msg


def test_required_roofline_metrics_pass_for_nnperf_and_gardenia():
    assert parse_ncu_csv(NNPERF, require_roofline_metrics=True)["totals"]["kernels"] == 98
    assert parse_ncu_csv(GARDENIA, require_roofline_metrics=True)["totals"]["kernels"] == 3


def test_output_shape_follows_the_contract():
    r = parse_ncu_csv(NNPERF)
    assert {"source_file", "layout", "kernels", "totals"} <= set(r)
    assert r["source_file"] == str(NNPERF)
    for k in r["kernels"]:
        assert {"id", "name", "time_s", "flop", "bytes"} <= set(k)
        assert {"fp64", "fp32", "fp16", "tensor", "total"} <= set(k["flop"])
        assert {"dram", "l2", "l1"} <= set(k["bytes"])
    t = r["totals"]
    assert {"kernels", "time_s", "flop", "bytes"} <= set(t)
    assert {"fp64", "fp32", "fp16", "tensor", "total"} <= set(t["flop"])
    assert {"dram", "l2", "l1"} <= set(t["bytes"])
    json.dumps(r, allow_nan=False)


# --------------------------------------------------------------------------- hand-made files


def test_h100_raw_page_with_overlapping_tensor_counters():
    r = parse_ncu_csv(H100_RAW)
    t = r["totals"]
    assert r["layout"] == "raw" and t["kernels"] == 3
    assert r["ncu_messages"] == []  # ==PROF== progress lines are not kept
    assert t["time_s"] == pytest.approx(302.75e-6, rel=1e-12)
    assert t["bytes"] == {
        "dram": 364_904_448,
        "l2": 679_477_248,
        "l1": 1_056_964_608,
        "dram_read": 260_046_848,
        "dram_write": 104_857_600,
        # no LSU-writeback, L2-to-crossbar or shared-memory counters in this CSV
        "l1_writeback": None,
        "l2_xbar": None,
        "shared": None,
    }
    # The bf16 aggregate holds the HGMMA counter (137,438,953,472 each): counted once.
    assert t["flop"]["tensor"] == 137_438_953_472 + 2_147_483_648
    assert t["flop"]["fp32"] == 2 * 1_048_576 + 16_777_216 + (1_024 + 2_048 + 2 * 65_536)
    assert t["flop"]["fp16"] == 2 * 10 + 2 * 20 + 4 * 30  # HADD2, HMUL2, HFMA2: 2/2/4
    assert t["flop"]["fp64"] == 1 + 2 + 2 * 3
    assert t["flop"]["total"] == 139_605_445_821
    assert r["tensor_counters_used"] == [
        f"{T}src_bf16_dst_fp32_sparsity_off.sum",
        f"{T}src_fp64.sum",
        f"{T}src_tf32_dst_fp32_sparsity_off.sum",
    ]
    assert r["kernels"][1]["name"].startswith(
        "void at::native::vectorized_elementwise_kernel<(int)4,"
    )


def test_bom_app_stdout_and_na():
    r = parse_ncu_csv(BOM_NA)
    assert r["layout"] == "details"
    k0, k1 = r["kernels"]
    assert k0["bytes"]["dram_read"] == 1_500  # "1.5" KB: decimal
    assert k0["bytes"]["dram_write"] == 250_000  # "0.25" MB
    assert k0["bytes"]["dram"] == 251_500
    assert k0["time_s"] == pytest.approx(1.25e-3)
    assert k0["flop"]["fp32"] == 2 * 1_000 + 500  # fmul is n/a: left out, not 0
    assert k1["bytes"]["dram_write"] is None  # n/a
    assert k1["bytes"]["dram"] is None  # read alone would understate it
    assert k1["time_s"] == pytest.approx(750e-9)
    assert k1["flop"]["fp32"] == 7
    t = r["totals"]
    assert t["bytes"]["dram"] == 251_500
    assert t["incomplete"] == {"bytes.dram": 1, "bytes.dram_write": 1}
    assert any("n/a" in w for w in r["warnings"])
    assert any("1 of 2" in w or "sums 1 of 2" in w for w in r["warnings"])
    assert any("Backing up device memory" in m for m in r["ncu_messages"])


def test_err_nvgpuctrperm_only_file_is_a_clear_error():
    with pytest.raises(InputError) as err:
        parse_ncu_csv(PERM)
    msg = str(err.value)
    assert PERM.name in msg
    assert "==ERROR== ERR_NVGPUCTRPERM" in msg
    assert "https://developer.nvidia.com/ERR_NVGPUCTRPERM" in msg


def test_truncated_file_names_file_and_line():
    with pytest.raises(InputError) as err:
        parse_ncu_csv(TRUNCATED)
    msg = str(err.value)
    assert TRUNCATED.name in msg and "line 7" in msg and "truncated" in msg


def test_ragged_last_row_at_a_field_boundary(tmp_path):
    lines = GARDENIA.read_text().split("\n")
    fields = next(csv.reader([lines[5]]))[:13]  # drop the last two fields
    cut = ",".join(f'"{f}"' for f in fields)  # quotes stay balanced
    p = tmp_path / "ragged.csv"
    p.write_text("\n".join(lines[:5] + [cut]) + "\n")
    with pytest.raises(InputError) as err:
        parse_ncu_csv(p)
    msg = str(err.value)
    assert "ragged.csv" in msg and "line 6" in msg and "13 fields" in msg and "15" in msg


def test_empty_and_missing_files(tmp_path):
    p = tmp_path / "empty.csv"
    p.write_text("")
    with pytest.raises(InputError, match="empty"):
        parse_ncu_csv(p)
    with pytest.raises(InputError, match="no such"):
        parse_ncu_csv(tmp_path / "absent.csv")
    q = tmp_path / "app_only.csv"
    q.write_text("Epoch 1: loss 0.1\nbye\n")
    with pytest.raises(InputError, match="no ncu CSV table"):
        parse_ncu_csv(q)


def test_header_but_no_kernels(tmp_path):
    p = tmp_path / "nokernels.csv"
    p.write_text(
        '"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n'
        "==WARNING== No kernels were profiled.\n"
    )
    with pytest.raises(InputError) as err:
        parse_ncu_csv(p)
    assert "no kernel rows" in str(err.value) and "No kernels were profiled" in str(err.value)


def _details(rows):
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(["ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"])
    for r in rows:
        w.writerow(r)
    return out.getvalue()


def test_bad_value_and_bad_unit_name_the_line():
    text = _details(
        [["0", "k", "dram__bytes.sum", "byte", "12"], ["0", "k", F.format("fadd"), "inst", "abc"]]
    )
    with pytest.raises(InputError, match=r"x.csv: line 3: metric .*fadd.*'abc'"):
        parse_ncu_text(text, "x.csv")
    text = _details([["0", "k", "dram__bytes.sum", "%", "12"]])
    with pytest.raises(InputError, match="line 2.*unexpected unit '%'"):
        parse_ncu_text(text, "x.csv")
    text = _details([["0", "k", "dram__bytes.sum", "byte", "1,5"]])  # a decimal comma
    with pytest.raises(InputError, match="not a number"):
        parse_ncu_text(text, "x.csv")


def test_other_metrics_are_ignored_and_display_duration_is_used():
    text = _details(
        [
            ["0", "k", "Duration", "usecond", "3.5"],
            ["0", "k", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "12.5"],
            ["0", "k", "Block Size", "", "abc"],
            ["1", "k2", "gpu__time_duration.sum", "nsecond", "1,000"],
            ["1", "k2", "Duration", "usecond", "9"],  # the real metric wins
            ["2", "k3", "Duration", "usecond", "9"],
            ["2", "k3", "gpu__time_duration.sum", "usecond", "2"],  # also when it comes later
        ]
    )
    r = parse_ncu_text(text, "d.csv")
    times = [k["time_s"] for k in r["kernels"]]
    assert times == [pytest.approx(3.5e-6), pytest.approx(1e-6), pytest.approx(2e-6)]
    assert not r["warnings"]


def test_crlf_and_bom_after_preamble():
    text = "==PROF== x\r\n\ufeff" + _details(
        [["0", "k", "dram__bytes.sum", "Gbyte", "1.5"]]
    ).replace("\n", "\r\n")
    r = parse_ncu_text(text, "c.csv")
    assert r["totals"]["bytes"]["dram"] == 1_500_000_000


def test_time_from_cycles_when_no_duration():
    text = _details(
        [
            ["0", "k", "smsp__cycles_elapsed.avg", "cycle", "2,000"],
            ["0", "k", "smsp__cycles_elapsed.avg.per_second", "cycle/nsecond", "1"],
        ]
    )
    assert parse_ncu_text(text, "c.csv")["totals"]["time_s"] == pytest.approx(2e-6)


def test_all_na_counters_with_required_metrics(tmp_path):
    text = _details(
        [
            ["0", "k", "dram__bytes.sum", "byte", "n/a"],
            ["0", "k", F.format("ffma"), "inst", "n/a"],
        ]
    )
    r = parse_ncu_text(text, "na.csv")
    assert r["totals"]["flop"]["total"] is None and r["totals"]["bytes"]["dram"] is None
    with pytest.raises(InputError, match="n/a for every kernel"):
        parse_ncu_text(text, "na.csv", require_roofline_metrics=True)


def test_a_missing_value_is_missing_whatever_its_unit():
    # n/a carries no quantity, so no unit to check: an empty unit must not abort the file
    text = _details(
        [
            ["0", "k", "dram__bytes_read.sum", "byte", "1,000"],
            ["0", "k", "dram__bytes_write.sum", "", "n/a"],
        ]
    )
    r = parse_ncu_text(text, "na.csv")
    assert r["kernels"][0]["bytes"]["dram_read"] == 1000
    assert r["kernels"][0]["bytes"]["dram_write"] is None


# --------------------------------------------------------------------------- pieces


@pytest.mark.parametrize(
    "text,value",
    [
        ("159,383,552", Decimal(159383552)),
        ("5,323,503,232.00", Decimal("5323503232.00")),
        ("0.00", Decimal(0)),
        ("1.5e3", Decimal(1500)),
        ("-3", Decimal(-3)),
        (" 42 ", Decimal(42)),
        ("n/a", None),
        ("N/A", None),
        ("", None),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize("text", ["1,5", "12,34,567", "abc", "1.2.3", "0x10", "1 000"])
def test_parse_number_rejects(text):
    with pytest.raises(ValueError):
        parse_number(text)


@pytest.mark.parametrize(
    "unit,factor,dim",
    [
        ("byte", 1, "byte"),
        ("B", 1, "byte"),
        ("Kbyte", 10**3, "byte"),
        ("kB", 10**3, "byte"),
        ("MB", 10**6, "byte"),
        ("Gbyte", 10**9, "byte"),
        ("TB", 10**12, "byte"),
        ("KiB", 1024, "byte"),
        ("nsecond", Decimal("1e-9"), "second"),
        ("ns", Decimal("1e-9"), "second"),
        ("usecond", Decimal("1e-6"), "second"),
        ("us", Decimal("1e-6"), "second"),
        ("msecond", Decimal("1e-3"), "second"),
        ("ms", Decimal("1e-3"), "second"),
        ("second", 1, "second"),
        ("s", 1, "second"),
        ("byte/second", 1, "byte/second"),
        ("Gbyte/second", 10**9, "byte/second"),
        ("Tbyte/s", 10**12, "byte/second"),
        ("Kbyte/cycle", 10**3, "byte/cycle"),
        ("cycle/second", 1, "cycle/second"),
        ("cycle/nsecond", 10**9, "cycle/second"),
        ("Ghz", 10**9, "1/second"),
        ("1/ns", 10**9, "1/second"),
        ("inst", 1, "inst"),
        ("Minst", 10**6, "inst"),
        ("cycle", 1, "cycle"),
        ("%", 1, "%"),
        ("", 1, ""),
        ("register/thread", 1, "register/thread"),
    ],
)
def test_unit_scale(unit, factor, dim):
    assert unit_scale(unit) == (Decimal(factor), dim)


def test_tensor_selection_rules():
    agg = f"{T}src_bf16_dst_fp32_sparsity_off.sum"
    hg = f"{T}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum"
    hm = f"{T}op_hmma_src_bf16_dst_fp32_sparsity_off.sum"
    # An aggregate hides its per-instruction breakdown.
    assert select_tensor_counters([agg, hg, hm])[0] == [agg]
    # Without an aggregate, HMMA and HGMMA are distinct work: both count.
    assert select_tensor_counters([hg, hm])[0] == [hg, hm]
    # _sparsity_off wins over the plain counter; _sparsity_on is never used.
    plain = f"{T}src_fp16_dst_fp32.sum"
    off = f"{T}src_fp16_dst_fp32_sparsity_off.sum"
    on = f"{T}src_fp16_dst_fp32_sparsity_on.sum"
    assert select_tensor_counters([plain, off, on])[0] == [off]
    assert select_tensor_counters([on])[0] == []
    # A source aggregate over every destination covers the per-destination counters.
    any_dst = f"{T}src_fp16.sum"
    assert select_tensor_counters([any_dst, off, f"{T}src_fp16_dst_fp16.sum"])[0] == [any_dst]
    # A multi-source counter covers the single-source one with the same destination.
    multi = f"{T}src_fp16_bf16_tf32_dst_fp32.sum"
    assert select_tensor_counters([multi, agg])[0] == [multi]
    # Integer ops are not FLOPs.
    assert select_tensor_counters([f"{T}src_int8.sum", f"{T}src_int4.sum"])[0] == []
    # Different sources add up.
    tf32 = f"{T}src_tf32_dst_fp32_sparsity_off.sum"
    assert select_tensor_counters([agg, off, tf32])[0] == sorted([agg, off, tf32])
    # Names ending in something other than .sum are not counters to add.
    assert select_tensor_counters([f"{T}src_fp16_dst_fp32.sum.per_second"])[0] == []


def test_tensor_partial_overlap_is_reported():
    a = f"{T}src_fp4_fp6_dst_fp32.sum"
    b = f"{T}src_fp6_fp8_dst_fp32.sum"
    names, notes = select_tensor_counters([a, b])
    assert names == [a, b] and any("overlap" in n for n in notes)


# --------------------------------------------------------------------------- CLI


def run_cli(*args):
    return subprocess.run(
        [sys.executable, str(PARSE_NCU), *map(str, args)], capture_output=True, text=True, cwd=ROOT
    )


def test_cli_writes_json(tmp_path):
    out = tmp_path / "sub" / "counters.json"
    p = run_cli(NNPERF, "--out", out)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert r["totals"]["flop"]["total"] == 4_928_393_620
    assert r["totals"]["bytes"]["dram"] == 709_948_840
    assert not list(out.parent.glob(".*.tmp"))


def test_cli_errors(tmp_path):
    p = run_cli(PERM, "--out", tmp_path / "x.json")
    assert p.returncode == 1 and "ERR_NVGPUCTRPERM" in p.stderr
    assert not (tmp_path / "x.json").exists()
    p = run_cli(MEINIE, "--out", tmp_path / "m.json", "--require-roofline")
    assert p.returncode == 1 and "dram__bytes" in p.stderr
    p = run_cli(MEINIE, "--out", tmp_path / "m.json")
    assert p.returncode == 0
    assert json.loads((tmp_path / "m.json").read_text())["totals"]["flop"]["total"] is None


# --------------------------------------------------------------------------- property test
#
# Random kernels, metric values and units are written as a details or raw page,
# parsed, and the totals compared with ones computed here from the integers the
# CSV was made from. Nothing from dnnroofline.ncu.parse is used to compute expectations.

BYTE_UNITS = [("byte", 0), ("B", 0), ("Kbyte", 3), ("KB", 3), ("Mbyte", 6), ("MB", 6), ("Gbyte", 9)]
TIME_UNITS = [("nsecond", 0), ("ns", 0), ("usecond", 3), ("us", 3), ("msecond", 6), ("ms", 6)]
TIME_UNITS += [("second", 9), ("s", 9)]
INST_UNITS = [("inst", 0), ("Kinst", 3), ("Minst", 6)]
TENSOR_UNITS = [("", 0)]

CORE = {
    p: [(F.format(f"{p}add"), w), (F.format(f"{p}mul"), w), (F.format(f"{p}fma"), 2 * w)]
    for p, w in (("d", 1), ("f", 1), ("h", 2))  # half is packed two-wide
}
TENSOR_METRICS = [
    f"{T}src_bf16_dst_fp32_sparsity_off.sum",
    f"{T}src_tf32_dst_fp32_sparsity_off.sum",
]
METRICS = {
    "gpu__time_duration.sum": TIME_UNITS,
    "dram__bytes.sum": BYTE_UNITS,
    "dram__bytes_read.sum": BYTE_UNITS,
    "dram__bytes_write.sum": BYTE_UNITS,
    "lts__t_bytes.sum": BYTE_UNITS,
    "l1tex__t_bytes.sum": BYTE_UNITS,
    **{m: INST_UNITS for group in CORE.values() for m, _ in group},
    **{m: TENSOR_UNITS for m in TENSOR_METRICS},
}
PREAMBLE = [
    "==PROF== Connected to process 4242 (/usr/bin/python3)",
    "==WARNING== Found outstanding GPU clock reset, trying to revert...Success.",
    "Files already downloaded and verified",
    "epoch 0 step 3: loss=2.31, 1,024 img/s",
    "",
]
META = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Device", "CC"]


def fmt_value(v: int, exp: int, grouped: bool, pad: bool) -> str:
    """v base units written in a unit 10**exp larger: exact decimal text."""
    d = Decimal(v).scaleb(-exp)
    s = format(d, "f")
    if "." in s:
        s = s.rstrip("0").rstrip(".") if not pad else s
    elif pad:
        s += ".00"
    if grouped:
        whole, dot, frac = s.partition(".")
        s = f"{int(whole):,}" + dot + frac
    return s


@st.composite
def ncu_files(draw):
    metrics = draw(st.lists(st.sampled_from(sorted(METRICS)), min_size=1, unique=True))
    n = draw(st.integers(1, 5))
    names = st.text(
        alphabet=st.sampled_from(list("abcxyz_<>(),* :\"'0123456789")), min_size=1, max_size=30
    )
    kernels = []
    for i in range(n):
        values = {}
        for m in metrics:
            if draw(st.integers(0, 9)) == 0:
                values[m] = None  # n/a
            else:
                values[m] = draw(st.integers(0, 10**13))
        kernels.append({"id": str(i), "name": draw(names), "values": values})
    layout = draw(st.sampled_from(["details", "raw"]))
    return {
        "metrics": metrics,
        "kernels": kernels,
        "layout": layout,
        "units": {m: draw(st.sampled_from(METRICS[m])) for m in metrics},
        "row_units": [
            [draw(st.sampled_from(METRICS[m])) for m in metrics] for _ in range(n)
        ],  # details: a unit per row
        "grouped": draw(st.booleans()),
        "pad": draw(st.booleans()),
        "preamble": draw(st.lists(st.sampled_from(PREAMBLE), max_size=4)),
        "bom": draw(st.booleans()),
        "seed": draw(st.randoms(use_true_random=False)),
    }


def write_csv(spec) -> str:
    rnd = spec["seed"]
    out = io.StringIO()
    if spec["bom"]:
        out.write("\ufeff")
    for line in spec["preamble"]:
        out.write(line + "\n")
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    metrics = spec["metrics"]

    def text(v, exp):
        grouped = spec["grouped"] and rnd.random() < 0.7
        return "n/a" if v is None else fmt_value(v, exp, grouped, spec["pad"])

    if spec["layout"] == "raw":
        cols = META + metrics
        rnd.shuffle(cols)
        w.writerow(cols)
        w.writerow(["" if c in META else spec["units"][c][0] for c in cols])
        for k in spec["kernels"]:
            meta = {"ID": k["id"], "Process ID": "4242", "Process Name": "python3"}
            meta |= {"Host Name": "127.0.0.1", "Kernel Name": k["name"], "Device": "0", "CC": "9.0"}
            row = []
            for c in cols:
                if c in meta:
                    row.append(meta[c])
                else:
                    row.append(text(k["values"][c], spec["units"][c][1]))
            w.writerow(row)
    else:
        cols = META + ["Section Name", "Metric Name", "Metric Unit", "Metric Value"]
        rnd.shuffle(cols)
        w.writerow(cols)
        rows = []
        for k, units in zip(spec["kernels"], spec["row_units"], strict=True):
            for m, (unit, exp) in zip(metrics, units, strict=True):
                cell = {"ID": k["id"], "Process ID": "4242", "Process Name": "python3"}
                cell |= {"Host Name": "h", "Kernel Name": k["name"], "Device": "0", "CC": "9.0"}
                cell |= {"Section Name": "Command line profiler metrics", "Metric Name": m}
                cell |= {"Metric Unit": unit, "Metric Value": text(k["values"][m], exp)}
                rows.append([cell[c] for c in cols])
        rnd.shuffle(rows)
        for r in rows:
            w.writerow(r)
    return out.getvalue()


def expected_totals(spec):
    """Totals computed from the integers the CSV was written from."""
    present = set(spec["metrics"])

    def weighted(vals, terms):
        have = [(vals[m], f) for m, f in terms if m in present]
        known = [v * f for v, f in have if v is not None]
        return sum(known) if known else None

    per = []
    for k in spec["kernels"]:
        v = k["values"]
        flop = {
            "fp64": weighted(v, CORE["d"]),
            "fp32": weighted(v, CORE["f"]),
            "fp16": weighted(v, CORE["h"]),
            "tensor": weighted(v, [(m, 1) for m in TENSOR_METRICS]),
        }
        parts = [x for x in flop.values() if x is not None]
        flop["total"] = sum(parts) if parts else None
        dram = v.get("dram__bytes.sum")
        rd, wr = v.get("dram__bytes_read.sum"), v.get("dram__bytes_write.sum")
        if dram is None and rd is not None and wr is not None:
            dram = rd + wr
        time_ns = v.get("gpu__time_duration.sum")
        per.append(
            {
                "time_ns": time_ns,
                "flop": flop,
                "dram": dram,
                "l2": v.get("lts__t_bytes.sum"),
                "l1": v.get("l1tex__t_bytes.sum"),
            }
        )

    def tot(get):
        vals = [get(p) for p in per]
        known = [x for x in vals if x is not None]
        return sum(known) if known else None

    return {
        "time_ns": tot(lambda p: p["time_ns"]),
        "flop": {key: tot(lambda p, key=key: p["flop"][key]) for key in per[0]["flop"]},
        "bytes": {key: tot(lambda p, key=key: p[key]) for key in ("dram", "l2", "l1")},
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ncu_files())
def test_property_random_files_parse_to_the_right_totals(spec):
    text = write_csv(spec)
    r = parse_ncu_text(text, "random.csv")
    exp = expected_totals(spec)
    t = r["totals"]
    assert r["layout"] == spec["layout"]
    assert t["kernels"] == len(spec["kernels"])
    assert {k["id"]: k["name"] for k in r["kernels"]} == {
        int(k["id"]): k["name"] for k in spec["kernels"]
    }
    assert t["flop"] == exp["flop"]
    assert {key: t["bytes"][key] for key in ("dram", "l2", "l1")} == exp["bytes"]
    if exp["time_ns"] is None:
        assert t["time_s"] is None
    else:
        assert t["time_s"] == pytest.approx(exp["time_ns"] * 1e-9, rel=1e-12, abs=1e-18)


def test_newer_dram_read_write_names():
    text = _details(
        [
            ["0", "k", "dram__bytes_op_read.sum", "Kbyte", "2"],
            ["0", "k", "dram__bytes_op_write.sum", "byte", "5"],
            ["0", "k", F.format("ffma"), "inst", "1"],
        ]
    )
    r = parse_ncu_text(text, "new.csv", require_roofline_metrics=True)
    assert r["totals"]["bytes"]["dram"] == 2_005


def test_unknown_count_units_pass_but_sizes_and_times_do_not():
    ok = _details([["0", "k", f"{T}src_fp16_dst_fp32_sparsity_off.sum", "operation", "4"]])
    assert parse_ncu_text(ok, "u.csv")["totals"]["flop"]["tensor"] == 4
    bad = _details([["0", "k", F.format("ffma"), "usecond", "4"]])
    with pytest.raises(InputError, match="unexpected unit"):
        parse_ncu_text(bad, "u.csv")


def test_aggregate_smaller_than_its_breakdown_is_flagged():
    rows = [
        ["0", "k", f"{T}src_bf16_dst_fp32_sparsity_off.sum", "", "100"],
        ["0", "k", f"{T}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum", "", "80"],
        ["0", "k", f"{T}op_hmma_src_bf16_dst_fp32_sparsity_off.sum", "", "20"],
    ]
    r = parse_ncu_text(_details(rows), "ok.csv")
    assert r["totals"]["flop"]["tensor"] == 100 and not r["warnings"]
    rows[0][-1] = "80"  # an aggregate that left HMMA out
    r = parse_ncu_text(_details(rows), "bad.csv")
    assert r["totals"]["flop"]["tensor"] == 80
    assert any("undercounted" in w for w in r["warnings"])


def test_summary_table_is_refused():
    text = (
        '"ID","Kernel Name","Invocations","Metric Name","Metric Description","Metric Unit",'
        '"Minimum","Maximum","Average"\n'
        '"0","k","3","dram__bytes.sum","DRAM bytes","byte","1","2","1.5"\n'
    )
    with pytest.raises(InputError, match="summary"):
        parse_ncu_text(text, "s.csv")


PIPELINE_KERNELS = DATA / "pipeline_h100_resnet18_amp_bs128_kernels_raw.csv"
PIPELINE_STEP = DATA / "pipeline_h100_resnet18_amp_bs128_step_raw.csv"


def test_pipeline_made_h100_fixtures_are_the_examples_captures():
    example = ROOT / "examples" / "h100" / "results" / "h100" / "ncu"
    kernels = gzip.decompress((example / "h100_resnet18_amp_bs128.csv.gz").read_bytes())
    assert PIPELINE_KERNELS.read_bytes() == kernels
    assert PIPELINE_STEP.read_bytes() == (example / "h100_resnet18_amp_bs128.step.csv").read_bytes()


def test_pipeline_made_h100_resnet18_amp_step_totals():
    """Totals of the pipeline's own capture (tests/data/ncu/PIPELINE.md), counted from
    its columns: FMA = 2 FLOPs, half instructions packed (x2), Hopper's HGMMA and HMMA
    tensor counters both counted (they do not overlap). The half-precision columns hold
    8,694,731,602 FLOPs; 8,083,752,018 of them are HFMA2.MMA moves and HADD2.F32
    widenings (dnnroofline.ncu.fp16, tests/test_ncu_fp16_moves.py), not counted."""
    r = parse_ncu_csv(PIPELINE_KERNELS)
    t = r["totals"]
    assert r["layout"] == "raw" and t["kernels"] == 261 and r["warnings"] == []
    assert t["time_s"] == pytest.approx(9_224_992e-9, rel=1e-12)
    assert t["flop"]["fp32"] == 11_635_654_553
    assert t["flop"]["fp16"] == 8_694_731_602 - 1_024_711_680 - 7_059_040_338
    assert t["flop"]["fp64"] == 10
    assert t["flop"]["tensor"] == 1_113_004_703_744 + 370_115_870_720
    assert t["flop"]["total"] == 1_495_367_208_611  # 1,503,450,960,629 before the moves
    assert f"{T}op_hgmma_src_fp16_sparsity_off.sum" in r["tensor_counters_used"]
    # the stem convolution (3 input channels) is padded, then runs on the tensor cores
    assert "nhwcAddPaddingKernel" in r["kernels"][2]["name"]
    stem = [k for k in r["kernels"] if "image_first_layer" in k["name"]]
    assert len(stem) == 2 and all(k["flop"]["tensor"] > 0 for k in stem)
    step = parse_ncu_csv(PIPELINE_STEP)["totals"]
    assert step["bytes"]["dram"] == 12_577_936_384
    assert step["bytes"]["dram_read"] + step["bytes"]["dram_write"] == step["bytes"]["dram"]
    assert t["flop"]["total"] / step["bytes"]["dram"] == pytest.approx(118.89, abs=0.005)
