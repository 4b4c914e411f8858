"""The numbers a two-tier evaluation reports: how well sim predicted real, and what promotion saved.

Pure functions of plain numbers (no tier, no env), so they are checked by hand in the tests:

- ``mape``, ``spearman``, ``ranks``: `rsi_env.calibrate.metrics`'s (the fits report the same measures);
- ``passes``: repeated runs split into passes, the n-th run of each key in the n-th pass (the real engine's
  rankings are compared pass against pass: one run of a configuration is a draw, not a value);
- ``real_only_gpu_s``: what the same search would have cost on real alone — every sim evaluation
  plus the defaults' measurement, each at the mean GPU-seconds of a real measurement (engine start
  included, since every configuration is a new engine start).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

from rsi_env.calibrate.metrics import mape, ranks, spearman

__all__ = ["mape", "passes", "ranks", "real_only_gpu_s", "spearman"]

T = TypeVar("T")


def passes(items: Iterable[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """``items`` in passes, in their order: the n-th item of each key goes to the n-th pass."""
    out: list[list[T]] = []
    seen: dict[Hashable, int] = {}
    for item in items:
        k = key(item)
        n = seen[k] = seen.get(k, -1) + 1
        if n == len(out):
            out.append([])
        out[n].append(item)
    return out


def real_only_gpu_s(sim_evaluations: int, real_gpu_s: Sequence[float]) -> float:
    """GPU-seconds of ``sim_evaluations`` measurements plus the defaults', at the mean real cost per measurement."""
    if not real_gpu_s:
        return math.nan
    return (sim_evaluations + 1) * sum(real_gpu_s) / len(real_gpu_s)
