"""env_info: the fingerprint CLI and the env/machine match check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from dnnroofline.errors import InputError
from dnnroofline.measure import envinfo
from dnnroofline.study import config as study_config

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "env_info.py"

CONTRACT_KEYS = {
    "env",
    "device",
    "date",
    "host",
    "os",
    "kernel",
    "cpu_model",
    "cpu_cores_physical",
    "cpu_cores_logical",
    "cpu_flags",
    "ram_bytes",
    "python",
    "torch",
    "torchvision",
    "cuda",
    "cudnn",
    "driver",
    "gpus",
    "container",
    "cloud_zone",
}
HAS_CUDA = torch.cuda.is_available()
HAS_MPS = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
EXPECTED_DEVICE = "cuda" if HAS_CUDA else "mps" if HAS_MPS else "cpu"


@pytest.fixture(scope="module")
def env_info(tmp_path_factory):
    out = tmp_path_factory.mktemp("env") / "results" / "local" / "env_info.json"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--env", "local", "--device", "auto", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), wall


def test_cli_writes_contract_keys(env_info):
    info, _ = env_info
    missing = CONTRACT_KEYS - set(info)
    assert not missing, missing
    assert info["env"] == "local"
    assert info["device"] == EXPECTED_DEVICE
    assert info["python"] == ".".join(map(str, sys.version_info[:3]))
    assert info["torch"] == torch.__version__
    assert info["cuda"] == torch.version.cuda
    assert isinstance(info["gpus"], list)
    for g in info["gpus"]:
        assert {"name", "memory_bytes", "compute_capability"} <= set(g)
    assert set(info["cpu_flags"]) <= set(envinfo.FLAGS_OF_INTEREST)
    # ISO 8601 with a UTC offset
    assert time.strptime(info["date"][:19], "%Y-%m-%dT%H:%M:%S")
    assert info["date"][19] in "+-Z"


def test_cli_records_installed_package_versions(env_info):
    # the report compares them with requirements.lock: metadata versions, not __version__
    from importlib import metadata

    packages = env_info[0]["packages"]
    assert packages["torch"] == metadata.version("torch")
    assert packages["PyYAML"] == metadata.version("pyyaml")
    assert len(packages) >= 20


def test_cli_device_is_cpu_without_accelerator(env_info):
    if HAS_CUDA or HAS_MPS:
        pytest.skip("this machine has an accelerator")
    info, _ = env_info
    assert info["device"] == "cpu"
    assert info["gpus"] == []
    assert info["devices_available"] == ["cpu"]


def test_cores_and_ram_match_psutil(env_info):
    info, _ = env_info
    assert info["cpu_cores_logical"] == psutil.cpu_count(logical=True)
    assert info["cpu_cores_physical"] == (
        psutil.cpu_count(logical=False) or info["cpu_cores_logical"]
    )
    assert info["ram_bytes"] == psutil.virtual_memory().total


def test_collect_names_the_cpu():
    # its wall time: benchmarks/bench_roofline_holds.py (fixed costs)
    fp = envinfo.collect_fingerprint("local")
    assert fp["cpu_model"] and fp["cpu_model"] != "unknown"


def test_cli_refuses_cuda_env_without_gpu(tmp_path, capsys):
    if HAS_CUDA:
        pytest.skip("this machine has CUDA")
    import env_info as cli  # the thin CLI, in-process (pytest puts its folder on the path)

    out = tmp_path / "env_info.json"
    rc = cli.main(["--env", "gcp_l4", "--device", "cuda", "--gpu-name", "L4", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    assert not out.exists()  # nothing filed under the wrong machine
    assert "'gcp_l4'" in err and "'cuda'" in err and "'L4'" in err


# ----------------------------------------------------------------------------- match check


def fake_fp(**kw):
    fp = {
        "host": "node1",
        "device": "cuda",
        "devices_available": ["cpu", "cuda"],
        "cpu_model": "AMD EPYC 9654 96-Core Processor",
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85e9}],
    }
    fp.update(kw)
    return fp


def test_check_rejects_cuda_env_on_this_machine():
    if HAS_CUDA:
        pytest.skip("this machine has CUDA")
    fp = envinfo.collect_fingerprint("gpu_box", "cuda")
    assert fp["device"] == EXPECTED_DEVICE and fp["device_requested"] == "cuda"
    with pytest.raises(InputError) as exc:
        envinfo.check_env_matches("gpu_box", {"device": "cuda"}, fp)
    msg = str(exc.value)
    assert "'gpu_box'" in msg and "'cuda'" in msg
    assert fp["cpu_model"] in msg and fp["host"] in msg and "['cpu']" in msg
    # and it accepts what this machine is
    assert envinfo.check_env_matches("local", {"device": "auto"}, fp) is None
    assert envinfo.check_env_matches("local", {"device": "cpu"}, fp) is None


def test_check_rejects_gpu_name_mismatch():
    with pytest.raises(InputError) as exc:
        envinfo.check_env_matches("gcp_l4", {"device": "cuda", "gpu_name": "L4"}, fake_fp())
    msg = str(exc.value)
    assert "'gcp_l4'" in msg and "gpu_name 'L4'" in msg and "NVIDIA H100 80GB HBM3" in msg
    assert "envs.gcp_l4" in msg


def test_check_matches_case_insensitive_substrings():
    declared = {"device": "cuda", "gpu_name": "h100", "cpu_name": "epyc 9654"}
    assert envinfo.check_env_matches("h100", declared, fake_fp()) is None
    with pytest.raises(InputError, match=r"cpu_name 'Xeon'.*AMD EPYC 9654"):
        envinfo.check_env_matches("h100", {"device": "cuda", "cpu_name": "Xeon"}, fake_fp())
    with pytest.raises(InputError, match=r"gpu_name 'H100'.*GPUs none"):
        envinfo.check_env_matches("h100", {"device": "auto", "gpu_name": "H100"}, fake_fp(gpus=[]))


def test_check_old_fingerprint_without_devices_available():
    fp = fake_fp(device="cpu", gpus=[])
    del fp["devices_available"]
    assert envinfo.check_env_matches("x", {"device": "cpu"}, fp) is None
    with pytest.raises(InputError, match="device 'mps'"):
        envinfo.check_env_matches("x", {"device": "mps"}, fp)


def test_check_rejects_bad_device_value():
    with pytest.raises(InputError, match=r"envs\.x\.device .*'gpu'"):
        envinfo.check_env_matches("x", {"device": "gpu"}, fake_fp())


def test_the_dags_device_detection_has_no_test_switch(monkeypatch):
    # tests fake a CUDA machine from outside (tests/fake_cuda), never through the package
    monkeypatch.delenv("DNNROOFLINE_FAKE_CUDA", raising=False)
    here = study_config.device_from_drivers()
    monkeypatch.setenv("DNNROOFLINE_FAKE_CUDA", "1")
    assert study_config.device_from_drivers() == here


def test_detect_and_resolve_device():
    assert envinfo.detect_device() == EXPECTED_DEVICE
    assert envinfo.resolve_device("auto", ["cpu"]) == "cpu"
    assert envinfo.resolve_device("auto", ["cpu", "cuda"]) == "cuda"
    assert envinfo.resolve_device("cpu", ["cpu", "cuda"]) == "cpu"
    with pytest.raises(InputError, match="'cuda' is not available"):
        envinfo.resolve_device("cuda", ["cpu"])
    with pytest.raises(InputError, match="device must be one of"):
        envinfo.resolve_device("tpu", ["cpu"])


# ----------------------------------------------------------------------------- probes


def test_detect_container(tmp_path):
    assert envinfo.detect_container(tmp_path, environ={}) is None
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "1" / "cgroup").write_text("0::/kubepods/besteffort/pod1234\n")
    assert envinfo.detect_container(tmp_path, environ={}) == "kubernetes"
    assert envinfo.detect_container(tmp_path, environ={"APPTAINER_CONTAINER": "x.sif"}) == (
        "apptainer"
    )
    (tmp_path / ".dockerenv").touch()
    assert envinfo.detect_container(tmp_path, environ={}) == "docker"


def test_detect_cloud_without_network(tmp_path):
    assert envinfo.detect_cloud(tmp_path, environ={}) == (None, None, None)
    (tmp_path / "product_name").write_text("Google Compute Engine\n")
    assert envinfo.detect_cloud(tmp_path, environ={})[0] == "gcp"
    env = {"CLOUDSDK_COMPUTE_ZONE": "us-central1-a", "AWS_REGION": "us-east-1"}
    assert envinfo.detect_cloud(tmp_path, environ=env) == (
        "gcp",
        "us-central1-a",
        "$CLOUDSDK_COMPUTE_ZONE",
    )


def _cache(root: Path, cpu: int, index: int, level: int, ctype: str, size: str, shared: str):
    d = root / f"cpu{cpu}" / "cache" / f"index{index}"
    d.mkdir(parents=True)
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{ctype}\n")
    (d / "size").write_text(f"{size}\n")
    (d / "shared_cpu_list").write_text(f"{shared}\n")


def test_last_level_cache_counts_instances(tmp_path):
    for cpu in range(4):
        _cache(tmp_path, cpu, 0, 1, "Data", "48K", str(cpu))
        _cache(tmp_path, cpu, 1, 1, "Instruction", "32K", str(cpu))
        _cache(tmp_path, cpu, 2, 2, "Unified", "2048K", str(cpu))
        _cache(tmp_path, cpu, 3, 3, "Unified", "32768K", "0-1" if cpu < 2 else "2-3")
    assert envinfo.last_level_cache_bytes(tmp_path) == 2 * 32 * 1024**2
    assert envinfo.last_level_cache_bytes(tmp_path / "missing") is None


def test_parse_size():
    assert envinfo._parse_size("32768K") == 32 * 1024**2
    assert envinfo._parse_size("32 MiB") == 32 * 1024**2
    assert envinfo._parse_size("512") == 512
    assert envinfo._parse_size("garbage") is None


def test_cpu_info_is_consistent(monkeypatch):
    monkeypatch.delenv(study_config.CPU_FLAGS_ENV)  # this CPU's own flags, for once
    cpu = envinfo.cpu_info()
    assert cpu["cores_logical"] == psutil.cpu_count(logical=True)
    assert 1 <= cpu["cores_physical"] <= cpu["cores_logical"]
    assert set(cpu["flags"]) <= set(cpu["flags_all"])
    if cpu["max_clock_hz"] is not None:
        assert 2e8 < cpu["max_clock_hz"] < 7e9, cpu["clock_source"]
    if sys.platform.startswith("linux") and os.path.exists("/proc/cpuinfo"):
        text = Path("/proc/cpuinfo").read_text()
        for flag in ("avx2", "avx512f", "fma"):
            assert (flag in cpu["flags"]) == (f" {flag} " in text.replace("\n", " ") + " "), flag


def test_cpu_info_takes_its_flags_from_the_one_detection_and_says_so(monkeypatch):
    monkeypatch.setenv(study_config.CPU_FLAGS_ENV, "avx2,fma,amx_bf16,made_up")
    cpu = envinfo.cpu_info()
    assert cpu["flags_all"] == ["amx_bf16", "avx2", "fma", "made_up"]
    assert cpu["flags"] == ["avx2", "fma", "amx_bf16"]  # FLAGS_OF_INTEREST's order
    assert cpu["source"].endswith("; flags from DNNROOFLINE_CPU_FLAGS")
    monkeypatch.setenv(study_config.CPU_FLAGS_ENV, "none")
    assert envinfo.cpu_info()["flags"] == []


def test_visible_filter_follows_cuda_visible_devices(monkeypatch):
    gpus = [
        {"index": 0, "name": "A", "uuid": "GPU-aaaa"},
        {"index": 1, "name": "B", "uuid": "GPU-bbbb"},
    ]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert envinfo._visible_filter(gpus) == gpus
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert [g["name"] for g in envinfo._visible_filter(gpus)] == ["B"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bb,0")
    assert [g["name"] for g in envinfo._visible_filter(gpus)] == ["B", "A"]
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert envinfo._visible_filter(gpus) == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234")
    assert envinfo._visible_filter(gpus) == gpus
