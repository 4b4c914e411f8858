"""`TrainingSeeds`: every unseeded reset draws its episode seed from a set of training seeds.

An `RsiEnv` reset without a seed replays the same seeded workloads every episode, and RL libraries
reset without one after the first episode. Training on several workload seeds, and evaluating on
seeds outside that set, is how a policy is shown to generalise rather than to remember one trace;
this wrapper draws each unseeded reset's seed from ``seeds`` with its own generator (seeded by the
first ``reset(seed=...)``). An explicit ``reset(seed=s)`` still runs seed ``s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["TrainingSeeds"]


class TrainingSeeds(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Reset an unseeded episode on a seed drawn uniformly from ``seeds``."""

    def __init__(self, env: gym.Env[Any, Any], seeds: Sequence[int]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, seeds=list(seeds))
        super().__init__(env)
        if not seeds:
            raise ValueError("TrainingSeeds needs at least one seed")
        self.seeds = [int(s) for s in seeds]
        self._rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            return self.env.reset(seed=seed, options=options)
        return self.env.reset(seed=int(self._rng.choice(self.seeds)), options=options)
