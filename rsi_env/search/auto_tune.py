"""vLLM's own auto-tune procedure (``benchmarks/auto_tune/auto_tune.sh``), adapted to a task's flags.

What the script does: (1) start the server with ``gpu_memory_utilization`` 0.98, then 0.97, … down
to 0.90, each time with the largest ``max_num_seqs`` and ``max_num_batched_tokens`` of its lists,
and keep the first value that starts without error; (2) benchmark every pair of a
``max_num_seqs`` list x a ``max_num_batched_tokens`` list at that memory share, with
``--enable-prefix-caching``, and keep the pair of highest throughput that meets its latency bound.

The adaptation, per task:

- step 1 walks the task's ``gpu_memory_utilization`` ladder from its top down to 0.90 (the rungs
  0.98, 0.95, 0.92, 0.90 rather than steps of 0.01); "starts without error" is a measurement with
  a finite score (every workload ran). A task that does not expose the flag skips the step;
- step 2's lists are the task's ladders of the two flags, thinned evenly (ends kept) so that the
  grid fits the measurements left; a task exposing one of them sweeps that one; a task exposing
  neither (``RSI/KVCache-v0``) stops after step 1, as the script has nothing more to tune;
- "highest throughput within the latency bound" is the task's own objective, which already
  scores SLO misses down; ``enable_prefix_caching`` is on where the task exposes it, as the
  script passes ``--enable-prefix-caching``; every other flag stays at the task's start.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from rsi_env.search.coordinate_descent import start_indices
from rsi_env.search.evaluator import Evaluator
from rsi_env.wrappers.ladders import ladder

__all__ = ["auto_tune", "grid_shape"]

_GRID_FLAGS = ("max_num_seqs", "max_num_batched_tokens")
_LOWEST_MEMORY_SHARE = 0.9


def grid_shape(sizes: list[int], budget: int) -> list[int]:
    """How many rungs of each list to keep so that their product fits ``budget``, as even as the lists allow."""
    keep = list(sizes)
    while keep and math.prod(keep) > budget:
        k = max(range(len(keep)), key=lambda i: (keep[i], -i))
        if keep[k] <= 1:
            break
        keep[k] -= 1
    return keep


def _thin(n: int, keep: int) -> list[int]:
    """``keep`` indices of ``range(n)`` spread evenly, both ends included."""
    if keep >= n:
        return list(range(n))
    return sorted({int(round(x)) for x in np.linspace(0, n - 1, max(keep, 1))})


def auto_tune(ev: Evaluator, rng: np.random.Generator | None = None, batch_size: int = 1) -> None:
    """Spend (at most) ``ev``'s budget the way vLLM's auto-tune script would (deterministic: ``rng`` unused).

    The memory probe is sequential; the grid is one batch (a parallel measurer runs it at once), so
    ``batch_size`` is unused.
    """
    base = start_indices(ev)
    if "enable_prefix_caching" in ev.flags:
        base["enable_prefix_caching"] = ladder(ev.env, "enable_prefix_caching").index(True)
    grid_flags = [f for f in _GRID_FLAGS if f in ev.flags]
    top = {f: ev.sizes[f] - 1 for f in grid_flags}  # the script probes memory with the largest of its lists
    if "gpu_memory_utilization" in ev.flags:
        rungs = ladder(ev.env, "gpu_memory_utilization")
        for i in sorted(range(len(rungs)), key=lambda j: -rungs[j]):
            if rungs[i] < _LOWEST_MEMORY_SHARE - 1e-9 or ev.left <= 0:
                break
            s = ev.evaluate([{**base, **top, "gpu_memory_utilization": i}])[0]
            if s is not None and math.isfinite(s):
                base["gpu_memory_utilization"] = i
                break
    if not grid_flags or ev.left <= 0:
        return
    keep = grid_shape([ev.sizes[f] for f in grid_flags], ev.left)
    axes = [_thin(ev.sizes[f], k) for f, k in zip(grid_flags, keep, strict=True)]
    grid = [{**base, **dict(zip(grid_flags, point, strict=True))} for point in itertools.product(*axes)]
    ev.evaluate(grid)

