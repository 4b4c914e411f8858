"""Named reward objects (CompilerGym's shape): ``reset()``, ``update(event) -> float``, ``deterministic``.

An env sums the rewards of its reward space at each step. Events are what happened in the step:
a measurement (its objective score and GPU-seconds) or a submission (its verdict).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rsi_env.reward.guards import Verdict

__all__ = ["MeasureEvent", "SubmitEvent", "NewBestImprovement", "MeasurementCost", "SubmitVerdict",
           "default_rewards"]


@dataclass(frozen=True)
class MeasureEvent:
    score: float
    gpu_seconds: float


@dataclass(frozen=True)
class SubmitEvent:
    verdict: Verdict


class NewBestImprovement:
    """Pays the objective's gain over the best so far (vLLM's defaults score 0): oscillating earns nothing."""

    name = "improvement"
    deterministic = True

    def __init__(self) -> None:
        self.best = 0.0

    def reset(self) -> None:
        self.best = 0.0

    def update(self, event: object) -> float:
        if not isinstance(event, MeasureEvent) or not math.isfinite(event.score) or event.score <= self.best:
            return 0.0
        gain = event.score - self.best
        self.best = event.score
        return gain


class MeasurementCost:
    """Charges each measurement its (simulated or real) GPU-seconds at the task's rate."""

    name = "measurement_cost"
    deterministic = True

    def __init__(self, cost_per_gpu_second: float) -> None:
        self.rate = cost_per_gpu_second

    def reset(self) -> None:
        return None

    def update(self, event: object) -> float:
        return -self.rate * event.gpu_seconds if isinstance(event, MeasureEvent) else 0.0


class SubmitVerdict:
    """The binary part: +1 when every guard of the submission holds, 0 otherwise."""

    name = "verdict"
    deterministic = True

    def reset(self) -> None:
        return None

    def update(self, event: object) -> float:
        return 1.0 if isinstance(event, SubmitEvent) and event.verdict.passed else 0.0


def default_rewards(cost_per_gpu_second: float) -> list[NewBestImprovement | MeasurementCost | SubmitVerdict]:
    return [NewBestImprovement(), MeasurementCost(cost_per_gpu_second), SubmitVerdict()]
