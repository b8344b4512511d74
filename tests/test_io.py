"""Atomic output: nothing half-written is ever left under the final name."""

import json
import os

import pytest

from dnnroofline.io import atomic_path, dig, read_json, write_json_atomic


def test_write_json_round_trip_with_plain_file_mode(tmp_path):
    target = tmp_path / "sub" / "out.json"
    write_json_atomic(target, {"a": 1.5})
    assert read_json(target) == {"a": 1.5}
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]


def test_failed_write_leaves_old_file_and_no_temp(tmp_path):
    target = tmp_path / "out.json"
    target.write_text('{"old": true}')
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text('{"new": tru')
        raise RuntimeError("killed half-way")
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_nan_is_refused_not_written(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(ValueError):
        write_json_atomic(target, {"x": float("nan")})
    assert not target.exists()


def test_read_json_names_the_file_and_line(tmp_path):
    from dnnroofline.errors import InputError

    bad = tmp_path / "run.json"
    bad.write_text('{\n  "status": "ok",\n  "x": \n}')
    with pytest.raises(InputError, match=r"run.json: not valid JSON \(line 4"):
        read_json(bad)
    with pytest.raises(InputError, match=r"missing.json: cannot read"):
        read_json(tmp_path / "missing.json")


def test_dig_reads_a_key_path_and_is_none_where_a_level_is_missing():
    ncu = {"totals": {"flop": {"total": 12.0}, "bytes": None}, "kernels": [1]}
    assert dig(ncu, "totals", "flop", "total") == 12.0
    assert dig(ncu, "totals", "flop") == {"total": 12.0}
    assert dig(ncu) is ncu
    assert dig(ncu, "totals", "bytes", "dram") is None  # a null block
    assert dig(ncu, "kernels", "0") is None  # a list is no object
    assert dig(ncu, "absent", "flop") is None
    assert dig(None, "totals") is None
