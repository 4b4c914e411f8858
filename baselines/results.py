"""`RunResult`: what one baseline found on one task at one seed, at a budget of measurements.

Scores are the env's objective (a log ratio against vLLM's defaults on the same tier, workloads
and seed). ``improvement_pct`` is what an agent keeps — the best configuration or vLLM's defaults,
whichever scores higher, as the env's ``best_score`` — and ``best_measured_pct`` the best
configuration it measured, which may be worse than the defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rsi_env.search.evaluator import Evaluator

__all__ = ["RunResult", "pct"]


def pct(score: float) -> float | None:
    """A log-ratio score as a percentage change (``None`` for ``-inf``: nothing measured successfully)."""
    return math.expm1(score) * 100.0 if math.isfinite(score) else None


@dataclass
class RunResult:
    """One baseline x task x seed: the best score after each measurement, and what it cost."""

    baseline: str
    env_id: str
    seed: int
    budget: int
    history: list[float]
    wall_s: float
    config: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, dict[str, float]] = field(default_factory=dict)  # per tier: GPU-seconds and USD (CostMeter)

    @property
    def gpu_seconds(self) -> float:
        """GPU-seconds over every tier (sim: what the same measurements would have taken on the real engine)."""
        return sum(t["gpu_seconds"] for t in self.cost.values())

    @property
    def cost_usd(self) -> float:
        return sum(t["usd"] for t in self.cost.values())

    @property
    def measurements(self) -> int:
        return len(self.history)

    @property
    def to_best(self) -> int | None:
        """Measurements it took to first reach its best (``None``: nothing measured successfully)."""
        if not self.history or not math.isfinite(self.best_score):
            return None
        return self.history.index(self.best_score) + 1

    @property
    def best_score(self) -> float:
        return self.history[-1] if self.history else -math.inf

    @property
    def improvement_pct(self) -> float:
        return math.expm1(max(self.best_score, 0.0)) * 100.0

    @property
    def best_measured_pct(self) -> float | None:
        return pct(self.best_score)

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "env_id": self.env_id, "seed": self.seed, "budget": self.budget,
                "improvement_pct": self.improvement_pct, "best_measured_pct": self.best_measured_pct,
                "measurements": self.measurements, "to_best": self.to_best, "wall_s": self.wall_s,
                "config": self.config, "cost": self.cost,
                "history": [s if math.isfinite(s) else None for s in self.history]}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunResult:
        """Back from :meth:`to_dict` (``None`` in the history is a failed measurement)."""
        history = [-math.inf if h is None else float(h) for h in raw["history"]]
        return cls(raw["baseline"], raw["env_id"], int(raw["seed"]), int(raw["budget"]), history,
                   float(raw["wall_s"]), dict(raw.get("config") or {}), dict(raw.get("cost") or {}))

    @classmethod
    def from_evaluator(cls, baseline: str, ev: Evaluator) -> RunResult:
        return cls(baseline, ev.env_id, ev.seed, ev.budget, list(ev.progress.history), ev.wall_s, ev.best_config(),
                   ev.env.cost.to_dict())
