"""The report's numbers, checked by hand: MAPE, Spearman's rho, the cost of a search on real alone, the selection rule."""

from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_env.evaluate.fidelity import mape, passes, ranks, real_only_gpu_s, spearman
from rsi_env.evaluate.search import estimate_real_s, select_candidates


def test_mape_by_hand():
    assert mape([110.0, 90.0], [100.0, 100.0]) == pytest.approx(10.0)
    assert mape([150.0, 50.0, 120.0], [100.0, 100.0, 100.0]) == pytest.approx((50 + 50 + 20) / 3)


def test_mape_skips_failed_real_measurements():
    assert mape([110.0, 500.0, 7.0], [100.0, 0.0, math.nan]) == pytest.approx(10.0)
    assert math.isnan(mape([1.0], [0.0]))


def test_ranks_share_ties():
    assert ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]


def test_passes_put_the_nth_run_of_each_key_in_the_nth_pass():
    runs = [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("b", 2), ("a", 3)]
    assert passes(runs, key=lambda r: r[0]) == [[("a", 1), ("b", 1), ("c", 1)], [("a", 2), ("b", 2)], [("a", 3)]]
    assert passes([], key=lambda r: r) == []


@given(st.lists(st.integers(0, 4), max_size=30))
def test_passes_keep_every_item_once_and_each_key_once_a_pass(keys):
    got = passes(list(enumerate(keys)), key=lambda r: r[1])
    assert sorted(x for p in got for x in p) == list(enumerate(keys))
    assert all(len({k for _, k in p}) == len(p) for p in got)
    assert all(p == sorted(p) for p in got)  # in their order


def test_spearman_by_hand():
    assert spearman([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    # one adjacent swap of five: 1 - 6 * 2 / (5 * 24) = 0.9
    assert spearman([1, 2, 3, 4, 5], [1, 2, 3, 5, 4]) == pytest.approx(0.9)
    # two adjacent swaps: 1 - 6 * 4 / 120 = 0.8; only the ranks count, not the values
    assert spearman([0.7, 0.3, 0.0, -0.3, -0.6], [2.5, 2.0, 0.1, 1.0, -7.0]) == pytest.approx(0.9)
    assert spearman([0.7, 0.3, 0.0, -0.3, -0.6], [2.0, 2.5, 0.1, 1.0, -7.0]) == pytest.approx(0.8)


def test_spearman_undefined_and_failed_pairs():
    assert math.isnan(spearman([1.0], [2.0]))
    assert math.isnan(spearman([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]))
    # a failed real measurement (-inf) leaves the pair out
    assert spearman([1, 2, 3, 4], [1, 2, -math.inf, 4]) == pytest.approx(1.0)


@settings(deadline=None)
@given(st.lists(st.tuples(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6)), min_size=3, max_size=30))
def test_spearman_matches_scipy(pairs):
    from scipy.stats import spearmanr

    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    ours = spearman(a, b)
    with warnings.catch_warnings():  # scipy warns where one side is constant (rho undefined)
        warnings.simplefilter("ignore")
        ref = float(spearmanr(a, b).statistic)
    if math.isnan(ref):
        assert math.isnan(ours)
    else:
        assert ours == pytest.approx(ref, abs=1e-9)
        assert -1.0 - 1e-12 <= ours <= 1.0 + 1e-12


def test_real_only_cost_by_hand():
    # 59 sim evaluations + the defaults = 60 measurements at the mean of 100, 120, 110 GPU-seconds
    assert real_only_gpu_s(59, [100.0, 120.0, 110.0]) == pytest.approx(6600.0)
    assert math.isnan(real_only_gpu_s(10, []))


def test_estimate_real_s():
    assert estimate_real_s([4.0, 6.0, math.nan], 60.0) == pytest.approx(60 + 10 + 15)


def test_selection_spreads_candidates_by_min_gap():
    a, b, c, d, e, f = ({"max_num_seqs": n} for n in (8, 16, 32, 64, 128, 256))
    trials = [(a, 0.90), (b, 0.88), (c, 0.50), (d, 0.49), (e, 0.10), (dict(a), 0.90), (f, -math.inf)]
    assert select_candidates(trials, 3, 0.2) == [0, 2, 4]  # a, c, e: each >= 0.2 below the ones before
    # too few spread ones: the best of the rest fill up, listed best first
    assert select_candidates(trials, 4, 0.2) == [0, 1, 2, 4]
    # the repeat of a and the failed f never count
    assert select_candidates(trials, 10, 0.0) == [0, 1, 2, 3, 4]
