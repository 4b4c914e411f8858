"""Coordinate descent: one flag at a time, every rung of its ladder, keep the best; sweep until nothing improves.

The search ``rsi-env demo`` shows: from the task's starting configuration, for each free flag in
the task's order, measure every other rung with the other flags at the best found so far, move
to a rung as soon as it beats the best, and sweep the flags again while a sweep improved anything.
The first "best" is the starting configuration (vLLM's defaults), which scores 0.
"""

from __future__ import annotations

import math

import numpy as np

from rsi_env.search.evaluator import Evaluator
from rsi_env.wrappers.ladders import position

__all__ = ["coordinate_descent", "start_indices"]


def start_indices(ev: Evaluator) -> dict[str, int]:
    """The ladder rung of each free flag in the task's starting configuration (vLLM's resolved default)."""
    base = ev.env.baseline_config
    return {f: min(max(round(position(ev.env, base, f)), 0), ev.sizes[f] - 1) for f in ev.flags}


def coordinate_descent(ev: Evaluator, rng: np.random.Generator | None = None, batch_size: int = 1) -> None:
    """Spend ``ev``'s budget on coordinate descent (deterministic and sequential: ``rng``, ``batch_size`` unused)."""
    best = start_indices(ev)
    best_score = 0.0
    if ev.warm:  # a warm start: measure experience's proposals, descend from the best of them
        for idx, s in zip(ev.warm, ev.evaluate(ev.warm[: ev.left]), strict=False):
            if s is not None and math.isfinite(s) and s > best_score + 1e-12:
                best, best_score = dict(idx), s
    improved = True
    while improved and ev.left > 0:
        improved = False
        for f in ev.flags:
            for rung in range(ev.sizes[f]):
                if ev.left <= 0:
                    return
                if rung == best[f]:
                    continue
                cand = {**best, f: rung}
                s = ev.evaluate([cand])[0]
                if s is not None and math.isfinite(s) and s > best_score + 1e-12:
                    best, best_score, improved = cand, s, True
