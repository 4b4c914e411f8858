"""Run an agent (a policy, an LLM) through an env view on one held-out seed, within a budget of measurements.

Searches go through `Evaluator`; agents that act step by step go through the env itself, and this
loop records what they found the same way: the env's score after each of its measurements, the
configuration in force when the best was measured, the wall time. The episode ends when the
agent submits, the env truncates it, or the measurement budget is spent (nothing more can be learnt).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from baselines.results import RunResult
from rsi_env.search.evaluator import Progress
from rsi_env.wrappers.ladders import rsi_env_of
from rsi_env.wrappers.views import make_view

__all__ = ["Agent", "run_agent"]

# Given the view's observation and the view itself, the next action.
Agent = Callable[[Any, Any], Any]


def run_agent(baseline: str, env_id: str, seed: int, budget: int, agent: Agent,
              view: Mapping[str, Any] | None = None, **env_kwargs: Any) -> RunResult:
    """One episode of ``agent`` on ``make_view(env_id, **view)`` at reset seed ``seed``, ``budget`` measurements."""
    t0 = time.perf_counter()
    env = make_view(env_id, max_measurements=budget, **dict(view or {}), **env_kwargs)
    rsi = rsi_env_of(env)
    obs, _ = env.reset(seed=seed)
    progress = Progress()
    best_config: dict[str, Any] = {}
    done = False
    while not done and rsi.measurements < budget:
        before = rsi.measurements
        obs, _, terminated, truncated, info = env.step(agent(obs, env))
        done = terminated or truncated
        if rsi.measurements > before:
            previous = progress.best
            progress.record(info["score"])
            if progress.best > previous:
                best_config = rsi.config.to_dict(only_set=True)
    env.close()
    return RunResult(baseline, env_id, seed, budget, progress.history, time.perf_counter() - t0, best_config,
                     rsi.cost.to_dict())
