"""dnnroofline.study.identity: run ids and result paths spelled once, identity read from
the files' content (the committed H100 captures included), never from their names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnnroofline.errors import InputError
from dnnroofline.ncu.run_ncu import read_driver_run
from dnnroofline.report.data import env_matrix, expected_run_table
from dnnroofline.study.config import Run
from dnnroofline.study.identity import (
    Identity,
    complexity_path,
    config_key,
    identity_of,
    ncu_path,
    run_id,
)

ROOT = Path(__file__).resolve().parents[1]
H100_NCU = ROOT / "examples" / "h100" / "results" / "h100" / "ncu"


def test_a_runs_key_id_and_paths_are_the_identity_functions_spelling():
    run = Run("gcp_l4", "mobilenet_v2", "bf16", 32, 2)
    assert run.config_key == config_key("gcp_l4", "mobilenet_v2", "bf16", 32)
    assert run.run_id == run_id("gcp_l4", "mobilenet_v2", "bf16", 32, 2)
    assert run.run_id == "gcp_l4_mobilenet_v2_bf16_bs32_run2"
    assert run.record() == {
        "run_id": "gcp_l4_mobilenet_v2_bf16_bs32_run2",
        "env": "gcp_l4",
        "model": "mobilenet_v2",
        "precision": "bf16",
        "batch_size": 32,
        "run": 2,
    }
    assert (
        ncu_path("h100", "resnet50", "amp", 256) == "results/h100/ncu/h100_resnet50_amp_bs256.json"
    )
    assert complexity_path("resnet50", 256) == "results/complexity/resnet50_bs256.json"


@pytest.mark.parametrize("path", sorted(H100_NCU.glob("h100_*.json")), ids=lambda p: p.stem)
def test_each_committed_h100_capture_holds_its_identity(path):
    doc = json.loads(path.read_text())
    found = identity_of(doc, str(path))
    assert found.env == "h100"
    # the content names the file it is in, not the other way round
    assert ncu_path(*found).endswith(f"ncu/{path.name}")
    driver = json.loads((H100_NCU / "driver" / path.name).read_text())
    assert found == Identity(
        driver["env"],
        driver["config"]["arch"],
        driver["config"]["precision"],
        driver["config"]["batch_size"],
    )


def test_a_capture_keeps_the_env_of_its_driver_run(tmp_path):
    record = json.loads((H100_NCU / "driver" / "h100_resnet50_amp_bs256.json").read_text())
    path = tmp_path / "driver_run.json"
    path.write_text(json.dumps(record))
    kept = read_driver_run(path)
    assert identity_of({"driver_run": kept}, "x.json") == ("h100", "resnet50", "amp", 256)


def test_a_file_without_identity_is_refused_naming_it():
    with pytest.raises(InputError, match=r"^results/x/perf/old\.json: cannot tell which run"):
        identity_of({"status": "ok", "flop_per_step": 1.0}, "results/x/perf/old.json")
    bad_batch = {"env": "local", "config": {"arch": "m", "precision": "fp32", "batch_size": "8"}}
    with pytest.raises(InputError, match="int 'batch_size'"):
        identity_of(bad_batch, "r.json")


def test_expected_runs_are_read_from_the_matrix_never_split_from_ids():
    expected = expected_run_table(
        [
            {
                "env": "gcp_l4",
                "model": "mobilenet_v2",
                "precision": "bf16",
                "batch_size": 32,
                "run": 2,
            }
        ]
    )
    assert expected[0]["run_id"] == "gcp_l4_mobilenet_v2_bf16_bs32_run2"
    with pytest.raises(
        InputError, match=r"expected run 0 \('gcp_l4_resnet50_fp32_bs8_run1'\) lacks"
    ):
        expected_run_table(["gcp_l4_resnet50_fp32_bs8_run1"])
    wrong = {"env": "a", "model": "m", "precision": "fp32", "batch_size": 8, "run": 1}
    with pytest.raises(InputError, match="is not its identity's"):
        expected_run_table([{**wrong, "run_id": "a_m_fp32_bs8_run2"}])


def test_env_matrix_does_not_read_a_key_the_schema_forbids():
    config = {
        "envs": {"local": {"device": "cpu", "models": ["alexnet"]}},
        "study": {"models": ["resnet18"], "precisions": ["fp32"], "batch_sizes": [8]},
    }
    assert env_matrix(config, "local")["models"] == ["resnet18"]
