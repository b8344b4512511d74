"""The precisions' one home: names, sets, compute dtypes, per-device support with reasons,
and a scan that fails when a precision list is written out anywhere else."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest
import yaml

from dnnroofline.errors import InputError
from dnnroofline.study import precisions as pr

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "workflow" / "scripts" / "dnnroofline" / "study" / "precisions.py"
NAMES = set(pr.PRECISIONS)
# Two or more precision names joined by "|": a regex alternation or a "a | b" list.
ALTERNATION = re.compile(rf"\b({'|'.join(pr.PRECISIONS)})\b\s*\|\s*\b({'|'.join(pr.PRECISIONS)})\b")
# A dtype that no study precision computes in (fp64, fp8, int8 ...): a collection that
# holds one and not amp is a wider vocabulary of dtypes (ncu's tensor source types, the
# datasheet's columns), not a list of the study's precisions.
DTYPE = re.compile(r"^(fp|bf|tf|int|uint)\d+$")


def is_wider_vocabulary(strings: list[str]) -> bool:
    others = {s for s in strings if DTYPE.match(s)} - set(pr.COMPUTE_DTYPE.values())
    return bool(others) and "amp" not in strings


# --------------------------------------------------------------------------- the facts


def test_names_sets_and_compute_dtypes():
    assert pr.PRECISIONS == ("fp32", "tf32", "amp", "bf16")
    assert set(pr.HALF_PRECISIONS) == {"amp", "bf16"}
    assert set(pr.TENSOR_PRECISIONS) == {"tf32", "amp", "bf16"}
    assert set(pr.HALF_PRECISIONS) <= set(pr.TENSOR_PRECISIONS) <= NAMES
    assert pr.COMPUTE_DTYPE == {"fp32": "fp32", "tf32": "tf32", "amp": "fp16", "bf16": "bf16"}
    assert pr.roof_names("amp") == ("amp", "fp16") and pr.roof_names("AMP") == ("amp", "fp16")
    assert pr.roof_names("tf32") == ("tf32",) and pr.roof_names("fp64") == ("fp64",)
    assert [pr.torch_dtype(p) for p in pr.PRECISIONS] == [
        "float32",
        "float32",
        "float16",
        "bfloat16",
    ]
    assert [pr.autocast_dtype(p) for p in pr.PRECISIONS] == [None, None, "float16", "bfloat16"]


def test_unknown_precision_names_the_key_and_the_choices():
    assert pr.require_known("bf16", "config study.precisions[0]") == "bf16"
    with pytest.raises(InputError) as err:
        pr.require_known("fp16", "config study.precisions[0]")
    msg = str(err.value)
    assert msg.startswith("config study.precisions[0] 'fp16': unknown precision (choose from")
    assert "fp32, tf32, amp, bf16" in msg and "fp16 is what amp computes in" in msg
    with pytest.raises(InputError, match="^unknown precision 'int8'"):
        pr.unsupported_reason("cuda", "int8")


def test_cpu_support_follows_the_bf16_flags():
    with_bf16 = pr.support("cpu", cpu_flags=["avx512f", "avx512_bf16"])
    assert with_bf16["fp32"] is None and with_bf16["bf16"] is None
    assert "NVIDIA tensor-core mode" in with_bf16["tf32"] and "GradScaler" in with_bf16["amp"]
    assert pr.supported("cpu", cpu_flags=["AMX_BF16"]) == ["fp32", "bf16"]
    without = pr.support("cpu", cpu_flags=["avx2", "fma", "avx512f"])
    assert "AVX512_BF16 or AMX" in without["bf16"] and "emulate" in without["bf16"]
    assert pr.supported("cpu", cpu_flags=["avx2", "fma"]) == ["fp32"]
    assert pr.supported("cpu", cpu_flags=[]) == ["fp32"]  # known to have none: refused
    assert pr.supported("cpu") == ["fp32", "bf16"]  # flags unknown: not refused


def test_cuda_support_follows_the_compute_capability():
    assert pr.supported("cuda") == list(pr.PRECISIONS)  # capability unknown: not refused
    assert pr.supported("cuda", cuda_cc=(9, 0)) == list(pr.PRECISIONS)
    assert pr.supported("cuda", cuda_cc=(8, 0)) == list(pr.PRECISIONS)
    t4 = pr.support("cuda", cuda_cc=(7, 5))
    assert t4["fp32"] is None and t4["amp"] is None
    assert t4["tf32"] == "TF32 tensor cores need compute capability 8.0+ (this GPU has 7.5)"
    assert t4["bf16"] == "bf16 tensor cores need compute capability 8.0+ (this GPU has 7.5)"
    assert pr.supported("cuda", cuda_cc=(6, 1)) == ["fp32"]
    assert "fp16 tensor cores" in pr.unsupported_reason("cuda", "amp", cuda_cc=(6, 1))


def test_mps_trains_in_fp32_only_and_unknown_devices_are_refused():
    mps = pr.support("mps")
    assert pr.supported("mps") == ["fp32"]
    assert "MPS" in mps["amp"] and "MPS" in mps["bf16"] and "NVIDIA" in mps["tf32"]
    with pytest.raises(InputError, match="unknown device 'tpu': expected cpu, cuda, mps"):
        pr.support("tpu")


# --------------------------------------------------------------------------- the scan


def _string_value(token: str) -> str | None:
    try:
        value = ast.literal_eval(token)
    except (ValueError, SyntaxError):  # an f-string: not a name
        return None
    return value if isinstance(value, str) else None


def python_copies(text: str) -> list[tuple[int, str]]:
    """(line, what) for each precision list written out in Python or Snakemake text:
    a bracketed group ((), [], {}: tuple, list, set, dict, call arguments) holding 2+
    precision names as strings, or a string joining 2+ with ``|``. A single name
    (``precision == "tf32"``) is not a list; neither is prose in comments."""
    found: list[tuple[int, str]] = []
    groups: list[tuple[int, list[str]]] = []  # (line opened, strings directly inside)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.OP and tok.string in "([{":
            groups.append((tok.start[0], []))
        elif tok.type == tokenize.OP and tok.string in ")]}" and groups:
            line, strings = groups.pop()
            names = [s for s in strings if s in NAMES]
            if len(set(names)) >= 2 and not is_wider_vocabulary(strings):
                found.append((line, f"collection of {names}"))
        elif tok.type == tokenize.STRING:
            value = _string_value(tok.string)
            if value is None:
                continue
            if groups:
                groups[-1][1].append(value)
            if ALTERNATION.search(value):
                found.append((tok.start[0], f"alternation {value!r}"))
    return found


def yaml_copies(text: str) -> list[tuple[int, str]]:
    """(0, what) for each list of 2+ precision names, or string joining 2+ with ``|``, in
    a YAML document, except a config's ``precisions:`` (the study's choice, not a
    definition). Comments are prose."""
    found: list[tuple[int, str]] = []

    def walk(node, key=None):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            names = [v for v in node if isinstance(v, str) and v in NAMES]
            if len(set(names)) >= 2 and key != "precisions":
                found.append((0, f"{key}: {names}"))
            for v in node:
                walk(v, key)
        elif isinstance(node, str) and ALTERNATION.search(node):
            found.append((0, f"{key}: {node!r}"))

    for doc in yaml.safe_load_all(text):
        walk(doc)
    return found


def copies_in(path: Path) -> list[tuple[int, str]]:
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        return yaml_copies(text)
    return python_copies(text)


def scanned_files() -> list[Path]:
    files = [ROOT / "Snakefile", *sorted((ROOT / "config").glob("*.yaml"))]
    for folder, pattern in [("workflow", "*.py"), ("rules", "*.smk"), ("scripts", "*.py")]:
        files += sorted((ROOT / folder).rglob(pattern))
    return [f for f in files if f != HOME]


def test_no_precision_list_is_written_out_outside_its_home():
    files = scanned_files()
    assert len(files) > 50 and ROOT / "rules" / "common.smk" in files
    copies = [f"{f.relative_to(ROOT)}:{line}: {what}" for f in files for line, what in copies_in(f)]
    assert not copies, "precision lists written out outside study/precisions.py:\n" + "\n".join(
        copies
    )


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("tuple.py", 'PRECISIONS = ("fp32", "tf32", "amp", "bf16")\n'),
        ("test.py", 'half = precision in ("amp", "bf16")\n'),
        ("dict.py", 'COLOR = {\n    "fp32": "tab:blue",\n    "tf32": "tab:green",\n}\n'),
        ("call.py", 'run(["--precisions", "fp32", "bf16"])\n'),
        ("colors.py", 'C = {"fp32": "b", "tf32": "g", "amp": "o", "fp16": "o", "fp64": "k"}\n'),
        ("dtypes.py", 'D = {"fp32": "float32", "tf32": "float32", "fp16": "float16"}\n'),
        ("rule.smk", 'wildcard_constraints:\n    precision="fp32|tf32|amp|bf16",\n'),
        ("schema.yaml", "precision:\n  type: string\n  enum: [fp32, tf32, amp, bf16]\n"),
        ("doc.yaml", "description: 'one of fp32 | bf16'\n"),
    ],
)
def test_scan_catches_a_planted_copy(tmp_path, name, text):
    planted = tmp_path / name
    planted.write_text(text)
    assert copies_in(planted)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("one.py", 'if precision == "tf32":\n    x = {"fp32": 1, "fp16": 2, "fp64": 3}\n'),
        ("prose.py", '# fp32, tf32, amp and bf16\nmsg = "tensor cores: tf32/bf16/amp"\n'),
        ("vocab.py", 'TYPES = {"fp64", "fp32", "tf32", "fp16", "bf16", "fp8"}\n'),
        ("study.yaml", "study:\n  precisions: [fp32, tf32, amp, bf16]  # fp32 | bf16\n"),
    ],
)
def test_scan_leaves_single_names_prose_and_study_choices(tmp_path, name, text):
    planted = tmp_path / name
    planted.write_text(text)
    assert copies_in(planted) == []


# --------------------------------------------------------------------------- the config


def _study(precisions, *, ceilings=None, env_precisions=None, cpu_flags=None):
    from dnnroofline.study.config import Study

    env = {"device": "cpu", "threads": 1}
    if env_precisions:
        env["precisions"] = env_precisions
    config = {
        "envs": {"local": env},
        "study": {"models": ["resnet18"], "precisions": precisions, "batch_sizes": [2]},
    }
    if ceilings:
        config["ceilings"] = {"precisions": ceilings}
    return Study(config, machine_device="cpu", known_models=["resnet18"], cpu_flags=cpu_flags)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"precisions": ["fp32", "fp16"]}, "config study.precisions[1]"),
        ({"precisions": ["fp32"], "env_precisions": ["FP32"]}, "config envs.local.precisions[0]"),
        ({"precisions": ["fp32"], "ceilings": ["bf16", "int8"]}, "config ceilings.precisions[1]"),
    ],
)
def test_config_refuses_an_unknown_precision_naming_its_key(kwargs, key):
    """The schema leaves precision names to this module: the config check names the key."""
    with pytest.raises(InputError) as err:
        _study(**kwargs)
    assert str(err.value).startswith(f"{key} ") and ": unknown precision (" in str(err.value)
    assert "(choose from fp32, tf32, amp, bf16" in str(err.value)


def test_config_support_follows_the_one_table():
    with pytest.raises(InputError) as err:
        _study(["fp32", "bf16"], cpu_flags=["avx2", "fma"])
    msg = str(err.value)
    assert msg.startswith("config study.precisions: precision 'bf16' is not supported on env")
    assert pr.cpu_bf16_reason([]) in msg and msg.endswith("Supported on cpu here: fp32")
    with pytest.raises(InputError) as err:
        _study(["fp32"], env_precisions=["amp"], cpu_flags=["amx_bf16"])
    assert str(err.value).startswith("config envs.local.precisions: precision 'amp' is not")
    assert str(err.value).endswith(f"{pr.support('cpu')['amp']}. Supported on cpu: fp32, bf16")
    study = _study(["fp32"], ceilings=["tf32", "amp", "bf16"], cpu_flags=["amx_bf16"])
    assert study.roof_precisions("local") == ["fp32", "bf16"]


# --------------------------------------------------------------------------- the driver


@pytest.mark.parametrize(
    ("cc", "refused"),
    [((6, 1), {"amp", "bf16", "tf32"}), ((7, 5), {"bf16", "tf32"}), ((9, 0), set())],
)
def test_the_driver_holds_a_gpu_to_the_same_table(monkeypatch, cc, refused):
    """The driver's check on a (faked) GPU of capability ``cc`` gives the table's reasons."""
    import torch

    from dnnroofline.measure import train_config as tc

    monkeypatch.setattr(tc, "resolve_backend", lambda requested: "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cc)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a faked GPU")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for precision in pr.PRECISIONS:
        cfg = tc.TrainConfig(arch="resnet18", batch_size=2, precision=precision, backend="cuda")
        why = pr.unsupported_reason("cuda", precision, cuda_cc=cc)
        assert (why is not None) == (precision in refused)
        if why is None:
            assert tc.validate(cfg).backend == "cuda"
            continue
        with pytest.raises(InputError) as err:
            tc.validate(cfg)
        expected = f"--precision '{precision}' is not supported on backend 'cuda' with a faked GPU"
        assert str(err.value) == f"{expected}: {why}"


def test_an_ops_dtype_names_the_precision_it_computes_in():
    from dnnroofline.study.precisions import dtype_precision

    assert dtype_precision("float32") == "fp32"  # not tf32: that is a matmul mode
    assert dtype_precision("float16") == "amp" and dtype_precision("bfloat16") == "bf16"
    assert dtype_precision("float64") is None and dtype_precision("int64") is None
