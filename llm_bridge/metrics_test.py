import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ecomjax.llm_bridge.metrics import pass_at_k, pass_hat_k, per_family


def _enumerate(outcomes: list[bool], k: int) -> tuple[float, float]:
    """Both metrics by brute force over every k-subset of the attempts."""
    subsets = list(itertools.combinations(outcomes, k))
    any_ok = sum(any(s) for s in subsets) / len(subsets)
    all_ok = sum(all(s) for s in subsets) / len(subsets)
    return any_ok, all_ok


@given(st.lists(st.booleans(), min_size=1, max_size=9), st.data())
def test_estimators_equal_subset_enumeration(outcomes, data):
    k = data.draw(st.integers(1, len(outcomes)))
    n, c = len(outcomes), sum(outcomes)
    any_ok, all_ok = _enumerate(outcomes, k)
    assert pass_at_k(n, c, k) == pytest.approx(any_ok)
    assert pass_hat_k(n, c, k) == pytest.approx(all_ok)


def test_limits_and_errors():
    assert pass_at_k(8, 0, 4) == 0.0 and pass_hat_k(8, 8, 4) == 1.0
    assert pass_at_k(8, 1, 1) == pytest.approx(1 / 8)
    for bad in ((4, 5, 1), (4, 2, 0), (4, 2, 5), (4, -1, 1)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_per_family_groups_by_problem_and_skips_large_k():
    rows = [
        {"family": "CART", "problem": "p0", "is_correct": True},
        {"family": "CART", "problem": "p0", "is_correct": False},
        {"family": "CART", "problem": "p1", "is_correct": True},
        {"family": "CART", "problem": "p1", "is_correct": True},
        {"family": "PD", "problem": "p0", "is_correct": False},
    ]
    out = per_family(rows, ks=(1, 2))
    assert out["CART"]["pass@1"] == pytest.approx((0.5 + 1.0) / 2)
    assert out["CART"]["pass@2"] == pytest.approx(1.0)
    assert out["CART"]["pass^2"] == pytest.approx(0.5)
    assert out["PD"] == {"pass@1": 0.0, "pass^1": 0.0}  # k = 2 > one attempt: skipped
