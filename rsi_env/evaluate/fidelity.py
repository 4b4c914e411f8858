"""The numbers a two-tier evaluation reports: how well sim predicted real, and what promotion saved.

Pure functions of plain numbers (no tier, no env), so they are checked by hand in the tests:

- ``mape``: mean absolute percentage error of sim against real, over the pairs where real is a
  positive finite number (a failed real measurement has no percentage error; it is counted apart);
- ``spearman``: Spearman's rank correlation (Pearson's correlation of the ranks, ties given their
  mean rank), ``nan`` when fewer than two pairs or when one side has no spread;
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

__all__ = ["mape", "passes", "ranks", "real_only_gpu_s", "spearman"]

T = TypeVar("T")


def mape(sim: Sequence[float], real: Sequence[float]) -> float:
    """Mean of ``|sim - real| / real`` in percent over pairs with a positive finite ``real`` and finite ``sim``."""
    errs = [abs(s - r) / r for s, r in zip(sim, real, strict=True)
            if math.isfinite(s) and math.isfinite(r) and r > 0]
    return 100.0 * sum(errs) / len(errs) if errs else math.nan


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


def ranks(xs: Sequence[float]) -> list[float]:
    """1-based ranks of ``xs`` (ascending), ties sharing their mean rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rho of the pairs where both values are finite; ``nan`` if undefined."""
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if math.isfinite(x) and math.isfinite(y)]
    if len(pairs) < 2:
        return math.nan
    ra, rb = ranks([x for x, _ in pairs]), ranks([y for _, y in pairs])
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return cov / math.sqrt(va * vb) if va > 0 and vb > 0 else math.nan


def real_only_gpu_s(sim_evaluations: int, real_gpu_s: Sequence[float]) -> float:
    """GPU-seconds of ``sim_evaluations`` measurements plus the defaults', at the mean real cost per measurement."""
    if not real_gpu_s:
        return math.nan
    return (sim_evaluations + 1) * sum(real_gpu_s) / len(real_gpu_s)
