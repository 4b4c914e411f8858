"""Rewards and guards: a continuous part (new-best improvement minus measurement cost) and a binary part."""

from __future__ import annotations

from rsi_env.reward.guards import GuardResult, Verdict, check_submission
from rsi_env.reward.objective import score, slo_attainment
from rsi_env.reward.rewards import (
    MeasureEvent,
    MeasurementCost,
    NewBestImprovement,
    SubmitEvent,
    SubmitVerdict,
    default_rewards,
)

__all__ = ["GuardResult", "MeasureEvent", "MeasurementCost", "NewBestImprovement", "SubmitEvent", "SubmitVerdict",
           "Verdict", "check_submission", "default_rewards", "score", "slo_attainment"]
