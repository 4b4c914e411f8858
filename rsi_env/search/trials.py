"""The searcher a two-tier evaluation runs on sim: one of `SEARCHES`, its measured trials as data.

The evaluation's search stage calls :func:`sim_trials`, or any callable with its signature.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rsi_env.search import SEARCHES, Evaluator

__all__ = ["sim_trials"]


def sim_trials(method: str, env_id: str, env_kwargs: Mapping[str, Any], seed: int, budget: int,
               rng_seed: int) -> list[tuple[dict[str, Any], float]]:
    """Run search ``method`` on ``env_id`` at reset seed ``seed``; every measured configuration and its score.

    Configurations are the flags they set (``EngineConfig.to_dict(only_set=True)``), in the order measured.
    """
    if method not in SEARCHES:
        raise ValueError(f"unknown search {method!r}; known: {sorted(SEARCHES)}")
    ev = Evaluator(env_id, seed, budget, env_kwargs=dict(env_kwargs))
    try:
        SEARCHES[method](ev, np.random.default_rng(rng_seed), 1)
        return [(ev.config(t.indices).to_dict(only_set=True), float(t.score))
                for t in ev.trials if t.measured and t.score is not None]
    finally:
        ev.close()
