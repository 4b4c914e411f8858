"""Random search: configurations drawn uniformly from the task's ladders, measured until the budget is spent.

Each free flag's rung is drawn independently; a configuration the env would refuse is drawn again
(it costs no measurement), one measured before is skipped. ``batch_size`` configurations are
proposed at a time, so a parallel measurer (Ray) measures them together.
"""

from __future__ import annotations

import numpy as np

from rsi_env.search.evaluator import Evaluator

__all__ = ["random_search"]

_DRAWS_PER_MEASUREMENT = 200


def random_search(ev: Evaluator, rng: np.random.Generator, batch_size: int = 1) -> None:
    """Spend ``ev``'s budget on uniformly random valid configurations."""
    seen: set[tuple[int, ...]] = set()
    draws = 0
    if ev.warm:  # a warm start: experience's proposals first
        ev.evaluate(ev.warm[: ev.left])
        seen.update(tuple(idx[f] for f in ev.flags) for idx in ev.warm)
    while ev.left > 0 and draws < _DRAWS_PER_MEASUREMENT * ev.budget:
        batch: list[dict[str, int]] = []
        while len(batch) < min(batch_size, ev.left) and draws < _DRAWS_PER_MEASUREMENT * ev.budget:
            draws += 1
            idx = {f: int(rng.integers(ev.sizes[f])) for f in ev.flags}
            key = tuple(idx.values())
            if key in seen or ev.check(idx) is not None:
                continue
            seen.add(key)
            batch.append(idx)
        if batch:
            ev.evaluate(batch)
