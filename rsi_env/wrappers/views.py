"""`make_view`: an `RSI/*` environment with the wrappers an RL library or an agent needs, by name.

One place builds the stacks the baselines train and evaluate on, so an RLlib env runner in another
process (:func:`env_creator`, importable wherever rsi-env is installed), an SB3 vector env and an
evaluation loop all see exactly the same environment. Order, innermost first: the env, the reward
(``reward="improvement"``: `ImprovementReward`), the action vocabulary (``actions``), the training
seeds (`TrainingSeeds`), the observation layout (``observation``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

import rsi_env  # noqa: F401  (registers the RSI/* ids in this process, e.g. an RLlib env runner)
from rsi_env.wrappers.direct_setting import DirectSetting
from rsi_env.wrappers.discrete_flag_moves import DiscreteFlagMoves
from rsi_env.wrappers.flat_observation import FlatObservation
from rsi_env.wrappers.improvement_reward import ImprovementReward
from rsi_env.wrappers.masked import MaskedActions
from rsi_env.wrappers.text_actions import TextActions
from rsi_env.wrappers.training_seeds import TrainingSeeds

__all__ = ["ACTION_VIEWS", "OBSERVATION_VIEWS", "REWARD_VIEWS", "env_creator", "make_view"]

ACTION_VIEWS: dict[str, Callable[[gym.Env[Any, Any]], MaskedActions] | None] = {
    "moves": DiscreteFlagMoves, "direct": DirectSetting, "text": TextActions, "dict": None}
OBSERVATION_VIEWS = ("masked", "box", "dict")
REWARD_VIEWS = ("env", "improvement")


def make_view(env_id: str, *, actions: str = "moves", observation: str = "masked", reward: str = "env",
              train_seeds: Sequence[int] | None = None, improvement_scale: float = 100.0,
              **env_kwargs: Any) -> gym.Env[Any, Any]:
    """``gym.make(env_id, **env_kwargs)`` wrapped for ``actions`` x ``observation`` x ``reward``.

    ``actions``: ``moves`` (`DiscreteFlagMoves`), ``direct`` (`DirectSetting`), ``text`` (`TextActions`)
    or ``dict`` (the env's own). ``observation``: ``masked`` (`FlatObservation`, RLlib's masking layout),
    ``box`` (`FlatObservation` without the mask) or ``dict`` (the env's own). ``reward``: ``env`` or
    ``improvement`` (`ImprovementReward` x ``improvement_scale``). ``train_seeds``: draw each unseeded
    reset's seed from these (`TrainingSeeds`).
    """
    if actions not in ACTION_VIEWS:
        raise ValueError(f"actions={actions!r}: one of {sorted(ACTION_VIEWS)}")
    if observation not in OBSERVATION_VIEWS:
        raise ValueError(f"observation={observation!r}: one of {list(OBSERVATION_VIEWS)}")
    if reward not in REWARD_VIEWS:
        raise ValueError(f"reward={reward!r}: one of {list(REWARD_VIEWS)}")
    if observation != "dict" and actions == "text":
        raise ValueError("text actions go with the env's own observation (observation='dict'): its text is the point")
    env: gym.Env[Any, Any] = gym.make(env_id, **env_kwargs)
    if reward == "improvement":
        env = ImprovementReward(env, improvement_scale)
    wrapper = ACTION_VIEWS[actions]
    if wrapper is not None:
        env = wrapper(env)
    if train_seeds is not None:
        env = TrainingSeeds(env, train_seeds)
    if observation != "dict":
        env = FlatObservation(env, action_mask=observation == "masked")
    return env


def env_creator(config: Mapping[str, Any]) -> gym.Env[Any, Any]:
    """RLlib's env creator: ``config`` is :func:`make_view`'s keyword arguments, ``env_id`` included."""
    kwargs = dict(config)
    return make_view(kwargs.pop("env_id"), **kwargs)
