"""Seeding searches and policies from the experience store: proposals as ladder indices of a task's free flags.

`warm_indices` asks :func:`rsi_env.store.warm_start.propose` for the env's (model, hardware,
workloads) and returns the proposals the env would accept, as the indices `Evaluator` takes. The
searches use them when ``Evaluator.warm`` holds some: Optuna enqueues them as its first trials,
random search measures them before drawing, coordinate descent starts from the best of them; a
policy played through `DirectSetting` takes them as its first actions (:func:`warm_agent`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from baselines.episodes import Agent
from baselines.evaluator import Evaluator
from rsi_env.envs.core import RsiEnv
from rsi_env.store import ExperienceStore, default_store
from rsi_env.store.warm_start import propose
from rsi_env.wrappers.ladders import free_flags, ladder, position

__all__ = ["proposal_indices", "warm_agent", "warm_indices"]


def proposal_indices(env: RsiEnv, configs: Sequence[dict[str, Any]]) -> list[dict[str, int]]:
    """Each configuration as a ladder index per free flag (flags it leaves out at the task's start)."""
    out = []
    for cfg in configs:
        idx = {}
        for f in free_flags(env):
            rungs = ladder(env, f)
            v = cfg.get(f)
            v = tuple(v) if isinstance(v, list) else v
            idx[f] = rungs.index(v) if f in cfg and v in rungs else \
                min(max(round(position(env, env.baseline_config, f)), 0), len(rungs) - 1)
        out.append(idx)
    return out


def warm_indices(ev: Evaluator, store: ExperienceStore | None = None, n: int = 5,
                 exclude: Sequence[tuple[str, str]] = ()) -> list[dict[str, int]]:
    """Up to ``n`` proposals for ``ev``'s env from ``store`` (default: the process's store) that it would accept."""
    st = store if store is not None else default_store()
    if st is None:
        return []
    env = ev.env
    props = propose(st, env.task, env.model, env.hardware, env.workloads, engine_version=env.tier.engine_version,
                    tier=env.tier_name, n=n * 3, exclude=exclude, flags=free_flags(env))
    out = []
    for idx in proposal_indices(env, [p.config for p in props]):
        if ev.check(idx) is None and idx not in out:
            out.append(idx)
    return out[:n]


def warm_agent(agent: Agent, proposals: Sequence[dict[str, int]]) -> Agent:
    """``agent`` whose first actions on a `DirectSetting` view are the proposals (then the agent's own)."""
    queue = list(proposals)

    def act(obs: Any, env: Any) -> Any:
        if queue:
            rsi = env.unwrapped
            idx = queue.pop(0)
            start = proposal_indices(rsi, [{}])[0]
            return np.array([idx.get(f, start.get(f, 0)) for f in rsi.flag_names] + [0], dtype=np.int64)
        return agent(obs, env)

    return act
