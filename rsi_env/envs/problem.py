"""`Problem`: what a configuration is scored on — task, model, chip, workloads, tier and the baseline's telemetry.

The env's own measurements, the searches (`rsi_env.search.evaluator`), the demo and `rsi_env.evaluate`
all score a configuration through `Problem.score`, so each of them reports the number an agent stepping
through the env would have been shown: the same tier, workloads and objective, against the same baseline.
An env's problem (`RsiEnv.problem`) exists once its reset has measured the baseline. Scoring through it
charges nothing to the env's step or measurement budget: the env's bench charges its own, a search keeps
its own (`Evaluator.budget`), and an agent acting through `step` never holds the object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.task import Task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.tier import Tier
from rsi_env.engine.workload import Workload
from rsi_env.reward import score

__all__ = ["Problem", "Scored"]


@dataclass(frozen=True)
class Scored:
    """A configuration's score (``-inf`` where a workload failed) and the per-workload telemetry it came from."""

    score: float
    tels: list[Telemetry]


@dataclass(frozen=True)
class Problem:
    """One task's objective on one model, chip, workload set and tier, against the baseline's telemetry."""

    task: Task
    model: ModelSpec
    hardware: HardwareSpec
    workloads: tuple[Workload, ...]
    tier: Tier
    baseline: tuple[Telemetry, ...]

    def measure(self, config: EngineConfig) -> list[Telemetry]:
        """Per-workload telemetry of ``config`` on the problem's tier (one measurement)."""
        return self.tier.measure_all(config, self.model, self.hardware, list(self.workloads))

    def judge(self, tels: Sequence[Telemetry]) -> float:
        """The task's objective of per-workload telemetry against the baseline's (`rsi_env.reward.score`)."""
        return score(tels, self.baseline, self.task)

    def score(self, config: EngineConfig) -> Scored:
        """Measure ``config`` and score it: what the env would show for a bench of it."""
        tels = self.measure(config)
        return Scored(self.judge(tels), tels)
