from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, strategies as st

from zeromem_lsp.memory.model_state import STAGES, model_state_bytes

SEEDS = [
    ((400, 400, 800, 4), {"ddp": 1600, "zero1": 1000, "zero2": 700, "zero3": 400}),
    ((5, 7, 11, 3), {"ddp": 23, "zero1": 16, "zero2": 11, "zero3": 8}),
    ((100, 50, 200, 1), {"ddp": 350, "zero1": 350, "zero2": 350, "zero3": 350}),
]


@pytest.mark.parametrize(("args", "expected"), SEEDS)
def test_seed_examples(args, expected):
    assert model_state_bytes(*args) == expected


def test_one_ceiling_per_pool():
    # 5 + ceil(18/3) = 11, not 5 + ceil(7/3) + ceil(11/3) = 12
    assert model_state_bytes(5, 7, 11, 3)["zero2"] == 11


def test_integral_non_int_inputs_are_exact():
    assert model_state_bytes(400.0, Decimal("400"), Fraction(800), 4.0) == SEEDS[0][1]


def test_huge_values_stay_exact():
    big = 10**30 + 1
    r = 10**9 + 7
    result = model_state_bytes(big, big, big, r)
    assert result["ddp"] == 3 * big
    assert result["zero3"] == (3 * big + r - 1) // r
    assert result["zero1"] == 2 * big + (big + r - 1) // r
    assert all(type(v) is int for v in result.values())


@pytest.mark.parametrize(
    ("args", "error", "fragment"),
    [
        ((True, 1, 1, 1), TypeError, "parameter_bytes"),
        (("400", 1, 1, 1), TypeError, "'400'"),
        ((1, None, 1, 1), TypeError, "gradient_bytes"),
        ((1, 1, float("nan"), 1), ValueError, "optimizer_bytes"),
        ((1, 1, float("inf"), 1), ValueError, "inf"),
        ((1, 1, float("-inf"), 1), ValueError, "-inf"),
        ((1.5, 1, 1, 1), ValueError, "1.5"),
        ((Decimal("2.5"), 1, 1, 1), ValueError, "2.5"),
        ((Fraction(1, 3), 1, 1, 1), ValueError, "parameter_bytes"),
        ((-1, 1, 1, 1), ValueError, "-1"),
        ((1, 1, 1, 0), ValueError, "world_size"),
        ((1, 1, 1, -4), ValueError, "-4"),
        ((1, 1, 1, False), TypeError, "world_size"),
        ((1, 1, 1, Decimal("NaN")), ValueError, "world_size"),
    ],
)
def test_rejects_bad_input_naming_argument_and_value(args, error, fragment):
    with pytest.raises(error, match=None) as excinfo:
        model_state_bytes(*args)
    assert fragment in str(excinfo.value)


sizes = st.integers(min_value=0, max_value=10**24)
ranks = st.integers(min_value=1, max_value=10**6)


@given(sizes, sizes, sizes, ranks)
def test_ordering_and_identities(p, g, o, r):
    m = model_state_bytes(p, g, o, r)
    assert set(m) == set(STAGES)
    assert m["zero3"] <= m["zero2"] <= m["zero1"] <= m["ddp"] == p + g + o
    assert m["zero1"] * r >= o and m["zero1"] - p - g == -(-o // r)
    assert (m["zero2"] - p) * r >= g + o
    assert m["zero3"] * r >= p + g + o
    # the ceiling is tight: one less byte per rank would not hold the pool
    assert (m["zero3"] - 1) * r < p + g + o or p + g + o == 0


@given(sizes, sizes, sizes)
def test_single_rank_means_no_sharding(p, g, o):
    assert set(model_state_bytes(p, g, o, 1).values()) == {p + g + o}


@given(sizes, sizes, sizes, ranks, st.integers(min_value=1, max_value=1000))
def test_non_increasing_in_world_size(p, g, o, r, extra):
    smaller, larger = model_state_bytes(p, g, o, r), model_state_bytes(p, g, o, r + extra)
    assert all(larger[k] <= smaller[k] for k in STAGES)
