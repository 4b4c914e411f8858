"""RSI/BugFix-v0's instances for the benchmark suite: one per verified seed of the instance table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rsi_env.tasks.bugfix.generator import verified_seeds

__all__ = ["FAMILY", "suite_instances"]

FAMILY = "BugFix"


def suite_instances() -> Iterator[tuple[str, str, dict[str, Any], int]]:
    """``(name, env id, env kwargs, reset seed)`` of each verified instance: the seed picks the bugs."""
    for seed in verified_seeds():
        yield f"s{seed}", "RSI/BugFix-v0", {}, seed
