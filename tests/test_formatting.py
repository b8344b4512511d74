"""The value checks every stage shares (dnnroofline.formatting): what counts as a number."""

import math

import numpy as np
import pytest

from dnnroofline.formatting import finite_number, isnum, positive_number

NOT_NUMBERS = [None, True, False, math.nan, math.inf, -math.inf, "abc", "", [1.0], {}]


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_what_is_no_finite_number(value):
    assert finite_number(value) is None
    assert positive_number(value) is None
    assert not isnum(value)


@pytest.mark.parametrize(
    ("value", "number"),
    [(3, 3.0), (-2.5, -2.5), ("1e3", 1000.0), (np.float32(0.5), 0.5), (np.int64(7), 7.0), (0, 0.0)],
)
def test_finite_numbers_come_back_as_floats(value, number):
    assert finite_number(value) == number
    assert isinstance(finite_number(value), float)
    assert isnum(value)


def test_positive_number_refuses_zero_and_negatives():
    assert positive_number(0) is None
    assert positive_number(-1e-9) is None
    assert positive_number("2.5") == 2.5
