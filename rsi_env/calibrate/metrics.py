"""The error measures every fit and every evaluation reports, defined once.

- ``mape``: mean absolute percentage error of a prediction against the real value, over the pairs
  where the real value is a positive finite number (a failed measurement has no percentage error);
- ``spearman``: Spearman's rank correlation (Pearson's correlation of the ranks, ties given their mean
  rank), ``nan`` when fewer than two pairs or when one side has no spread; ``ranks``: those ranks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["mape", "ranks", "spearman"]


def mape(sim: Sequence[float], real: Sequence[float]) -> float:
    """Mean of ``|sim - real| / real`` in percent over pairs with a positive finite ``real`` and finite ``sim``."""
    errs = [abs(s - r) / r for s, r in zip(sim, real, strict=True)
            if math.isfinite(s) and math.isfinite(r) and r > 0]
    return 100.0 * sum(errs) / len(errs) if errs else math.nan


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
