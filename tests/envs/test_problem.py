"""`RsiEnv.problem`: the env, the searches and evaluate score a configuration the same way."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401
from rsi_env.errors import RsiEnvError
from rsi_env.search.evaluator import Evaluator


def _env(env_id: str = "RSI/Batching-v0", **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(env_id, auto_bench=False, **kw).unwrapped


def test_the_problem_scores_what_a_bench_shows():
    env = _env()
    env.reset(seed=3)
    problem = env.problem
    assert problem.baseline == tuple(env.base_tels) and problem.workloads == tuple(env.workloads)
    assert problem.score(env.baseline_config).score == pytest.approx(0.0)  # the defaults score 0 against themselves
    env.step(env.flag_action("max_num_seqs", 8))
    _, _, _, _, info = env.step({"kind": rsi_env.BENCH})
    scored = problem.score(env.config)
    assert scored.score == env.last_score and math.isfinite(scored.score) and scored.score != 0.0
    assert [t.to_dict() for t in scored.tels] == info["telemetry"]
    env.close()


def test_a_search_scores_as_the_env_does():
    ev = Evaluator("RSI/Batching-v0", seed=3, budget=2)
    idx = {f: 0 for f in ev.flags}
    [s] = ev.evaluate([idx])
    assert s is not None and s == ev.env.problem.score(ev.config(idx)).score


def test_no_problem_before_a_baseline_or_for_code():
    env = _env()
    with pytest.raises(RsiEnvError, match="before a reset"):
        _ = env.problem
    env.close()
    kernel = _env("RSI/Kernel-v0")
    with pytest.raises(RsiEnvError, match="scores code"):
        _ = kernel.problem
    kernel.close()
