"""The exhaustive search: every valid configuration measured once, and nothing a search at a budget finds beats it."""

from __future__ import annotations

import math

import numpy as np

from rsi_env.search import SEARCHES, Evaluator
from rsi_env.search.exhaustive import exhaustive, valid_grid

ENV, SEED = "RSI/KVCache-v0", 1000


def test_it_measures_each_valid_configuration_once_and_is_the_ceiling():
    ev = exhaustive(ENV, SEED)
    probe = Evaluator(ENV, SEED, budget=0)
    grid = valid_grid(probe)
    every = int(np.prod(list(probe.sizes.values())))
    probe.close()
    assert 0 < len(grid) <= every  # a refused configuration would be left out, unmeasured
    assert ev.budget == ev.measurements == len(grid) == len({tuple(t.indices.values()) for t in ev.trials})
    ceiling = ev.progress.best
    assert math.isfinite(ceiling)
    for name in ("random_search", "coordinate_descent", "vllm_auto_tune"):
        other = Evaluator(ENV, SEED, budget=30)
        SEARCHES[name](other, np.random.default_rng(0))
        assert other.progress.best <= ceiling + 1e-12, name
        other.close()
    ev.close()
