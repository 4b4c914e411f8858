"""`MaskedActions`: the base of wrappers that give an `RsiEnv` a new action vocabulary and its mask.

An RL view replaces the env's ``Dict`` action with something a policy can emit (a move index, a
vector of ladder indices, a line of text). Whatever the vocabulary, the observation's
``action_mask`` must describe *it*, not the env's five action kinds, so this base does the
plumbing once: it swaps ``action_mask`` in the observation space and in every observation for
:meth:`mask`, and exposes the same mask as ``action_masks()`` (sb3-contrib's ``MaskablePPO``
convention). A subclass says what its actions do (:meth:`apply`) and which are allowed (:meth:`mask`).

An action a vocabulary cannot honour (a masked move, text that does not parse) is not sent to the
engine: :meth:`refuse` spends one env step on an action the env turns down without touching the
configuration or the measurement budget, and puts the reason in the observation's text. The step
counts towards ``max_steps`` like any bad action, so an agent that ignores the mask still meets
the end of its episode.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rsi_env.envs.actions import FLAG, KIND_NAMES
from rsi_env.envs.core import RsiEnv
from rsi_env.envs.observation import TEXT_MAX
from rsi_env.wrappers.ladders import rsi_env_of

__all__ = ["MaskedActions", "StepResult"]

StepResult = tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]

# A flag action with no flag: the env refuses it as a bad action (the step counts, nothing changes).
_REFUSED_ACTION = {"kind": FLAG, "flag": -1, "value": np.float32(0.0)}


class MaskedActions(gym.Wrapper[dict[str, Any], Any, dict[str, Any], dict[str, Any]], ABC):
    """Base class: a new ``action_space`` whose mask replaces the observation's ``action_mask``."""

    def __init__(self, env: gym.Env[dict[str, Any], dict[str, Any]], action_space: gym.Space[Any],
                 mask_size: int) -> None:
        super().__init__(env)
        self.rsi: RsiEnv = rsi_env_of(env)
        self.action_space = action_space
        obs_space = env.observation_space
        assert isinstance(obs_space, spaces.Dict), "an RSI/* observation space is a Dict"
        self.observation_space = spaces.Dict({**obs_space.spaces, "action_mask": spaces.MultiBinary(mask_size)})
        self.kind_mask = np.ones(len(KIND_NAMES), dtype=np.int8)  # the env's mask over its kinds, latest obs

    # ---- what a subclass defines --------------------------------------------------------------
    @abstractmethod
    def apply(self, action: Any) -> StepResult:
        """Carry out ``action`` on the wrapped env (one or more of its steps) and return the step's result."""

    @abstractmethod
    def mask(self) -> np.ndarray:
        """Which actions are allowed now, as an int8 array of the vocabulary's mask size.

        ``self.kind_mask`` holds the env's own mask over its five action kinds (bench is masked once the
        measurement budget is spent), from the latest observation.
        """

    # ---- plumbing -------------------------------------------------------------------------------
    def action_masks(self) -> np.ndarray:
        """The mask as booleans (what ``sb3_contrib.MaskablePPO`` asks the env for)."""
        return self.mask().astype(bool)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return self._with_mask(obs), info

    def step(self, action: Any) -> StepResult:
        obs, reward, terminated, truncated, info = self.apply(action)
        return self._with_mask(obs), reward, terminated, truncated, info

    def refuse(self, reason: str) -> StepResult:
        """Spend one env step on a refused action and report ``reason`` as the observation's text."""
        obs, reward, terminated, truncated, info = self.env.step(dict(_REFUSED_ACTION))
        text = "".join(c if c.isascii() and c.isprintable() or c == "\n" else "?" for c in f"error: {reason}")
        return {**obs, "text": text[:TEXT_MAX]}, reward, terminated, truncated, info

    def _with_mask(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.kind_mask = np.asarray(obs["action_mask"], dtype=np.int8)
        return {**obs, "action_mask": self.mask()}
