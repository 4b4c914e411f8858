"""pass@k (Chen et al. 2021) against its definition: the chance that k attempts drawn from n hold a pass."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsi_env.errors import RsiEnvError
from rsi_env.suite.passk import mean_pass_at_k, pass_at_k


@st.composite
def counts(draw, max_n: int = 60):
    n = draw(st.integers(1, max_n))
    return n, draw(st.integers(0, n)), draw(st.integers(1, n))


@given(counts(max_n=9))
def test_it_is_the_share_of_k_subsets_that_hold_a_pass(nck):
    n, c, k = nck
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets), abs=1e-12)


@given(counts())
def test_it_matches_the_closed_form_and_grows_with_k_and_passes(nck):
    n, c, k = nck
    want = 1.0 - math.comb(n - c, k) / math.comb(n, k)
    got = pass_at_k(n, c, k)
    assert got == pytest.approx(want, abs=1e-9) and 0.0 <= got <= 1.0
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)
    if k < n:
        assert pass_at_k(n, c, k + 1) >= got - 1e-12
    if c < n:
        assert pass_at_k(n, c + 1, k) >= got - 1e-12


def test_edges_and_bad_counts():
    assert pass_at_k(10, 0, 5) == 0.0 and pass_at_k(10, 6, 5) == 1.0
    assert mean_pass_at_k([(4, 1), (4, 4)], 1) == pytest.approx(0.625) and math.isnan(mean_pass_at_k([], 1))
    for bad in ((3, 4, 1), (3, 1, 0), (3, 1, 4), (3, -1, 1), (3.0, 1, 1)):
        with pytest.raises(RsiEnvError, match="pass@k"):
            pass_at_k(*bad)  # type: ignore[arg-type]
