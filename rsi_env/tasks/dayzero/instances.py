"""RSI/DayZero-v1's instances for the benchmark suite: every feature x model size, each pinned by keyword."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rsi_env.tasks.dayzero.env import DayZeroV1Env

__all__ = ["FAMILY", "suite_instances"]

FAMILY = "DayZero"


def suite_instances() -> Iterator[tuple[str, str, dict[str, Any], int]]:
    """``(name, env id, env kwargs, reset seed)`` of each (feature, model size) on the sim tier."""
    for feature, size in DayZeroV1Env.instances():
        yield f"{feature}-{size}", DayZeroV1Env.task_id, {"feature": feature, "model_size": size}, 0
