"""REQUIRE_CUDA=1 (make gpu-check): a cuda test that skips fails; other skips stay skips."""

import pytest

TESTS = """
import pytest

@pytest.mark.cuda
@pytest.mark.skipif(True, reason="needs an NVIDIA GPU")
def test_marked_skipif():
    pass

@pytest.mark.cuda
def test_marked_skips_inside():
    pytest.skip("no device")

@pytest.mark.skipif(True, reason="not a cuda test")
def test_unmarked_skip():
    pass

@pytest.mark.cuda
def test_marked_passes():
    pass
"""


@pytest.fixture
def inner(pytester):
    pytester.makeini("[pytest]\nmarkers =\n    cuda: needs an NVIDIA GPU\n")
    pytester.makepyfile(test_inner=TESTS)
    return pytester


def test_cuda_skips_fail_with_require_cuda(inner, monkeypatch):
    monkeypatch.setenv("REQUIRE_CUDA", "1")
    result = inner.runpytest("-p", "require_cuda", "-p", "no:xdist", "-p", "no:cacheprovider")
    # a skipif marker skips at setup, so its failure is reported as an error there
    result.assert_outcomes(failed=1, errors=1, skipped=1, passed=1)
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        [
            "*REQUIRE_CUDA=1 and this cuda test skipped: Skipped: needs an NVIDIA GPU*",
            "*REQUIRE_CUDA=1 and this cuda test skipped: Skipped: no device*",
        ]
    )


@pytest.mark.parametrize("value", [None, "0"])
def test_cuda_skips_stay_skips_without_it(inner, monkeypatch, value):
    if value is None:
        monkeypatch.delenv("REQUIRE_CUDA", raising=False)
    else:
        monkeypatch.setenv("REQUIRE_CUDA", value)
    result = inner.runpytest("-p", "require_cuda", "-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=3, passed=1)
