"""`Evaluator` scores configurations exactly as the env does, and counts measurements as the env does."""

from __future__ import annotations

import math

import numpy as np
import pytest

from baselines.results import RunResult
from rsi_env.search.evaluator import Evaluator, Progress
from rsi_env.wrappers import DirectSetting
from rsi_env.wrappers.views import make_view


def test_scores_match_the_env_stepped_through_direct_setting():
    ev = Evaluator("RSI/Batching-v0", seed=1000, budget=5)
    env = make_view("RSI/Batching-v0", actions="direct", observation="dict")
    env.reset(seed=1000)
    assert isinstance(env, DirectSetting)
    rng = np.random.default_rng(0)
    for _ in range(4):
        idx = {f: int(rng.integers(ev.sizes[f])) for f in ev.flags}
        if ev.check(idx) is not None:
            continue
        s = ev.evaluate([idx])[0]
        *_, info = env.step(np.array([idx[f] for f in env.unwrapped.flag_names] + [0]))
        assert s == pytest.approx(info["score"])
    assert ev.measurements == env.unwrapped.measurements


def test_refused_and_repeated_configurations_are_free():
    ev = Evaluator("RSI/Batching-v0", seed=1000, budget=3)
    bad = {"max_num_seqs": ev.sizes["max_num_seqs"] - 1, "max_num_batched_tokens": 0}  # 2048 seqs > 512 tokens
    good = {"max_num_seqs": 5, "max_num_batched_tokens": 5}
    assert ev.check(bad) is not None and ev.evaluate([bad]) == [None]
    first = ev.evaluate([good, good])
    assert first[0] == first[1] and ev.measurements == 1
    assert ev.evaluate([good]) == first[:1] and ev.measurements == 1
    assert ev.trials[0].refused and not ev.trials[0].measured


def test_budget_is_never_exceeded():
    ev = Evaluator("RSI/Batching-v0", seed=1000, budget=2)
    batch = [{"max_num_seqs": k, "max_num_batched_tokens": 7} for k in range(5)]
    scores = ev.evaluate(batch)
    assert ev.measurements == 2 and ev.left == 0
    assert scores[2:] == [None, None, None]


def test_progress_is_the_running_best_and_survives_failures():
    p = Progress()
    for s in (None, -1.0, float("-inf"), 0.5, 0.2):
        p.record(s)
    assert p.history[0] == -math.inf and p.history[1:] == [-1.0, -1.0, 0.5, 0.5]
    r = RunResult("x", "RSI/Batching-v0", 0, 5, p.history, 0.1)
    assert r.improvement_pct == pytest.approx(math.expm1(0.5) * 100)
    assert RunResult("x", "RSI/Batching-v0", 0, 5, [-1.0], 0.1).improvement_pct == 0.0
    assert r.to_dict()["history"][0] is None
