"""Every valid configuration on a task's ladders, measured: the best any search over those ladders could find.

Not a search at a budget (it spends a measurement per valid configuration, thousands on the larger tasks): the
yardstick that says how much headroom a task has over vLLM's defaults on the sim tier, and, where the grid is
small enough to measure whole, the ceiling a searcher's result is judged against.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from rsi_env.search.evaluator import Evaluator, Measurer, local_measurer

__all__ = ["exhaustive", "valid_grid"]


def valid_grid(ev: Evaluator) -> list[dict[str, int]]:
    """Every point of ``ev``'s ladders the env would accept, in ladder order."""
    grid = (dict(zip(ev.flags, point, strict=True))
            for point in itertools.product(*(range(ev.sizes[f]) for f in ev.flags)))
    return [idx for idx in grid if ev.check(idx) is None]


def exhaustive(env_id: str, seed: int, env_kwargs: Mapping[str, Any] | None = None,
               measurer: Measurer = local_measurer) -> Evaluator:
    """An `Evaluator` that has measured every valid configuration of ``env_id`` at ``seed`` (its budget is theirs)."""
    probe = Evaluator(env_id, seed, budget=0, env_kwargs=dict(env_kwargs or {}))
    valid = valid_grid(probe)
    probe.close()
    ev = Evaluator(env_id, seed, budget=len(valid), env_kwargs=dict(env_kwargs or {}), measurer=measurer)
    ev.evaluate(valid)
    return ev
