"""`ImprovementReward`: pay only the gain in the best score, scaled — the reward of a search at a fixed budget.

The env's reward also charges every measurement its GPU-seconds and pays +1 for a passing submit.
When policies are compared with searches at the same number of measurements, the charge is the
same for all and the question is only how good a configuration each finds: this wrapper returns
``scale * (best_after - best_before)``, the env's own new-best improvement term (``best_score``,
vLLM's defaults at 0), times ``scale`` (100: roughly percent) so that small gains still move a policy.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym

from rsi_env.wrappers.ladders import rsi_env_of

__all__ = ["ImprovementReward"]


class ImprovementReward(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Reward = ``scale`` x the step's increase of the env's ``best_score``; nothing else."""

    def __init__(self, env: gym.Env[Any, Any], scale: float = 100.0) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, scale=scale)
        super().__init__(env)
        self.rsi = rsi_env_of(env)
        self.scale = float(scale)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        before = self.rsi.best_score
        obs, _, terminated, truncated, info = self.env.step(action)
        return obs, self.scale * (self.rsi.best_score - before), terminated, truncated, info
