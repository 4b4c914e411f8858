"""What the benchmark scripts share: a call's wall seconds, and the rows of seconds printed as mean and min."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["print_rows", "timed"]


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    """Wall seconds of ``fn(*args, **kwargs)`` (its result dropped)."""
    t0 = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t0


def print_rows(rows: Mapping[str, Sequence[float]], width: int, digits: int) -> None:
    """One line per row: its name padded to ``width``, then the mean and min of its seconds and how many."""
    for name, secs in rows.items():
        print(f"{name:{width}s} mean {sum(secs) / len(secs):6.{digits}f} s   min {min(secs):6.{digits}f} s   "
              f"(n={len(secs)})")
