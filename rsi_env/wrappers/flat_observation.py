"""`FlatObservation`: the ``Dict`` observation as one float vector, with or without its action mask.

RL libraries want numbers, not text. The vector is ``telemetry`` (19), ``config`` (one per flag)
and ``budget`` (2) concatenated as float32; ``text`` and ``flag_mask`` are dropped (the flag mask
already shapes the action mask of `DiscreteFlagMoves` and `DirectSetting`). Two layouts:

- ``FlatObservation(env)`` — ``Dict({"observations": Box, "action_mask": Box(0, 1, (n,), float32)})``,
  the layout RLlib's action-masking RLModule (new API stack) reads: the mask is the observation's
  ``action_mask`` (the env's kinds, or a wrapper's moves when one sits below), as floats;
- ``FlatObservation(env, action_mask=False)`` — the bare ``Box``, for Stable-Baselines3's ``MlpPolicy``
  (masking there goes through ``action_masks()``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["FlatObservation", "VECTOR_FIELDS"]

VECTOR_FIELDS = ("telemetry", "config", "budget")


class FlatObservation(gym.ObservationWrapper[Any, Any, dict[str, Any]], gym.utils.RecordConstructorArgs):
    """Concatenate ``telemetry``, ``config`` and ``budget``; keep the action mask as a float Box or drop it."""

    def __init__(self, env: gym.Env[dict[str, Any], Any], action_mask: bool = True) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, action_mask=action_mask)
        super().__init__(env)
        src = env.observation_space
        if not isinstance(src, spaces.Dict) or not all(k in src.spaces for k in (*VECTOR_FIELDS, "action_mask")):
            raise TypeError(f"FlatObservation needs an RSI/* Dict observation with {VECTOR_FIELDS}, got {src}")
        boxes = [b for b in (src.spaces[k] for k in VECTOR_FIELDS) if isinstance(b, spaces.Box)]
        if len(boxes) != len(VECTOR_FIELDS):
            raise TypeError(f"FlatObservation needs {VECTOR_FIELDS} to be Box spaces, got {src}")
        low = np.concatenate([np.asarray(b.low, dtype=np.float32).reshape(-1) for b in boxes])
        high = np.concatenate([np.asarray(b.high, dtype=np.float32).reshape(-1) for b in boxes])
        vector = spaces.Box(low, high, dtype=np.float32)
        self.with_mask = bool(action_mask)
        if self.with_mask:
            mask = src.spaces["action_mask"]
            n = int(np.prod(mask.shape)) if mask.shape else 0
            self.observation_space = spaces.Dict({
                "observations": vector,
                "action_mask": spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32),
            })
        else:
            self.observation_space = vector

    def observation(self, observation: dict[str, Any]) -> Any:
        vector = np.concatenate([np.asarray(observation[k], dtype=np.float32).reshape(-1) for k in VECTOR_FIELDS])
        if not self.with_mask:
            return vector
        return {"observations": vector,
                "action_mask": np.asarray(observation["action_mask"], dtype=np.float32).reshape(-1)}
