"""Coordinate descent over engine flags: the small, deterministic search behind ``rsi-env demo``.

Each round tries every value on each flag's ladder (``FLAGS[name].ladder``) with the others held,
keeps the best, and stops when a round improves nothing or the budget of evaluations is spent.
Refused or failing configurations score ``-inf``, so a search never lands on one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi_env.engine.config import FLAGS, EngineConfig
from rsi_env.errors import InvalidConfigError

__all__ = ["SearchResult", "coordinate_descent"]


@dataclass
class SearchResult:
    best_config: EngineConfig
    best_score: float
    default_score: float
    history: list[tuple[int, float, float]] = field(default_factory=list)  # (evaluation, score, best so far)
    evaluations: int = 0


def coordinate_descent(
    evaluate: Callable[[EngineConfig], float],
    flags: Sequence[str],
    *,
    start: EngineConfig | None = None,
    budget: int = 60,
    ladders: dict[str, Sequence[Any]] | None = None,
) -> SearchResult:
    """Maximise ``evaluate`` over ``flags``, starting from ``start`` (vLLM's defaults)."""
    cache: dict[tuple[Any, ...], float] = {}

    def score(cfg: EngineConfig) -> float:
        key = tuple(sorted(cfg.to_dict().items(), key=lambda kv: kv[0]))
        key = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in key)
        if key not in cache:
            s = evaluate(cfg)
            cache[key] = s if math.isfinite(s) else -math.inf
            res.evaluations += 1
            res.history.append((res.evaluations, cache[key], max(res.best_score, cache[key])))
        return cache[key]

    best = start or EngineConfig()
    res = SearchResult(best, -math.inf, -math.inf)
    res.default_score = res.best_score = score(best)
    improved = True
    while improved and res.evaluations < budget:
        improved = False
        for name in flags:
            for value in (ladders or {}).get(name, FLAGS[name].ladder):
                if res.evaluations >= budget:
                    break
                try:
                    cand = best.replace(**{name: value})
                except InvalidConfigError:
                    continue
                s = score(cand)
                if s > res.best_score * (1 + 1e-9) + 1e-12:
                    best, res.best_score, improved = cand, s, True
    res.best_config = best
    return res
