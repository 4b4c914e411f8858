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
from rsi_env.envs.core import RsiEnv
from rsi_env.errors import InvalidConfigError
from rsi_env.search.evaluator import Evaluator
from rsi_env.store import ExperienceStore, default_store
from rsi_env.store.warm_start import propose
from rsi_env.wrappers.ladders import config_at, free_flags, ladder, position, refusal, rsi_env_of

__all__ = ["env_warm_indices", "proposal_indices", "warm_agent", "warm_indices"]


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


def env_warm_indices(env: RsiEnv, store: ExperienceStore | None = None, n: int = 5,
                     exclude: Sequence[tuple[str, str]] = ()) -> list[dict[str, int]]:
    """Up to ``n`` proposals for ``env``'s context from ``store`` (default: the process's) that ``env`` accepts."""
    st = store if store is not None else default_store()
    if st is None:
        return []
    props = propose(st, env.task, env.model, env.hardware, env.workloads, engine_version=env.tier.engine_version,
                    tier=env.tier_name, n=n * 3, exclude=exclude, flags=free_flags(env))
    out: list[dict[str, int]] = []
    for idx in proposal_indices(env, [p.config for p in props]):
        try:
            refused = refusal(env, config_at(env, idx, env.baseline_config))
        except InvalidConfigError as exc:
            refused = str(exc)
        if refused is None and idx not in out:
            out.append(idx)
    return out[:n]


def warm_indices(ev: Evaluator, store: ExperienceStore | None = None, n: int = 5,
                 exclude: Sequence[tuple[str, str]] = ()) -> list[dict[str, int]]:
    """`env_warm_indices` for an `Evaluator`'s env: what its searches take as ``ev.warm``."""
    return env_warm_indices(ev.env, store, n, exclude)


def warm_agent(agent: Agent, store: ExperienceStore | None = None, n: int = 5) -> Agent:
    """``agent`` on a `DirectSetting` view whose first actions are the store's proposals for the episode's context.

    The proposals are computed at the episode's first action (the env has been reset: its workloads are known).
    """
    queue: list[dict[str, int]] | None = None

    def act(obs: Any, env: Any) -> Any:
        nonlocal queue
        rsi = rsi_env_of(env)
        if queue is None:
            queue = env_warm_indices(rsi, store, n)
        if queue:
            idx = queue.pop(0)
            start = proposal_indices(rsi, [{}])[0]
            return np.array([idx.get(f, start.get(f, 0)) for f in rsi.flag_names] + [0], dtype=np.int64)
        return agent(obs, env)

    return act
