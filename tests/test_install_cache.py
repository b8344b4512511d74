"""dnnroofline.install_cache: a value computed once per install of a package, read back
while that install stays, computed again when it changes."""

from __future__ import annotations

import json
import os
import sys

import pytest

from dnnroofline.install_cache import cache_dir, kept_per_install


@pytest.fixture
def package(tmp_path, monkeypatch):
    """An installed package, ``fakepkg``, whose __init__.py the test can "reinstall"."""
    site = tmp_path / "site"
    (site / "fakepkg").mkdir(parents=True)
    init = site / "fakepkg" / "__init__.py"
    init.write_text("VERSION = 1\n")
    monkeypatch.syspath_prepend(str(site))
    yield init
    sys.modules.pop("fakepkg", None)


def counting(value):
    calls = []

    def compute():
        calls.append(1)
        return value

    return compute, calls


def test_a_value_is_computed_once_per_install_then_read_back(package, tmp_path):
    where = tmp_path / "cache"
    compute, calls = counting({"names": ["a", "b"]})
    assert kept_per_install("thing", "fakepkg", compute, where=where) == {"names": ["a", "b"]}
    assert kept_per_install("thing", "fakepkg", compute, where=where) == {"names": ["a", "b"]}
    assert len(calls) == 1
    (kept,) = where.glob("thing_*.json")
    assert json.loads(kept.read_text())["value"] == {"names": ["a", "b"]}
    # another variant (a Vega-Lite version) is another value, kept beside the first
    assert kept_per_install("thing", "fakepkg", compute, variant="v6", where=where)
    assert len(calls) == 2 and len(list(where.glob("thing_*.json"))) == 2


def test_a_reinstalled_package_computes_its_value_again(package, tmp_path):
    where = tmp_path / "cache"
    old, _ = counting("old")
    assert kept_per_install("thing", "fakepkg", old, where=where) == "old"
    package.write_text("VERSION = 22\n")  # reinstalled: another size and mtime
    new, calls = counting("new")
    assert kept_per_install("thing", "fakepkg", new, where=where) == "new"
    assert len(calls) == 1
    assert kept_per_install("thing", "fakepkg", new, where=where) == "new"
    assert len(calls) == 1


def test_an_unreadable_or_unwritable_cache_only_costs_the_computation(package, tmp_path):
    where = tmp_path / "cache"
    compute, calls = counting([1, 2])
    assert kept_per_install("thing", "fakepkg", compute, where=where) == [1, 2]
    (kept,) = where.glob("thing_*.json")
    kept.write_text("{half a fi")  # a torn file from elsewhere: computed and rewritten
    assert kept_per_install("thing", "fakepkg", compute, where=where) == [1, 2]
    assert json.loads(kept.read_text())["value"] == [1, 2]
    blocked = tmp_path / "file"
    blocked.write_text("")  # its "folder" is a file: nothing can be kept there
    assert kept_per_install("thing", "fakepkg", compute, where=blocked / "cache") == [1, 2]
    assert len(calls) == 3


def test_a_missing_package_raises_its_own_import_error(tmp_path):
    def compute():
        import no_such_package_here  # noqa: F401

    with pytest.raises(ModuleNotFoundError, match="no_such_package_here"):
        kept_per_install("thing", "no_such_package_here", compute, where=tmp_path)
    assert not list(tmp_path.iterdir())


def test_the_cache_folder_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "dnnroofline"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == type(tmp_path).home() / ".cache" / "dnnroofline"


def test_the_interactive_rooflines_javascript_is_vl_converts_own(tmp_path, monkeypatch):
    """The kept bundle is the one vl-convert builds, for Altair's Vega-Lite version."""
    import altair as alt
    import vl_convert as vlc

    from dnnroofline.plots.interactive import javascript_bundle

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = vlc.javascript_bundle(vl_version="_".join(alt.SCHEMA_VERSION.split(".")[:2]))
    assert javascript_bundle() == expected  # built and kept
    (kept,) = (tmp_path / "dnnroofline").glob("vega_bundle_*.json")
    assert os.path.getsize(kept) > 100_000
    assert javascript_bundle() == expected  # read back
