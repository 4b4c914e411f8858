"""Every wrapper, on every registered RSI/* env, passes Gymnasium's checker and keeps its spaces honest."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.envs import list_tasks
from rsi_env.wrappers import (
    DirectSetting,
    DiscreteFlagMoves,
    FlatObservation,
    ImprovementReward,
    TextActions,
    TrainingSeeds,
    make_view,
)

# RSI/VLLMBugFix-v0 starts the real vLLM at every reset: tests/code_tasks/test_vllm_bugfix.py checks it (real_engine).
IDS = [t.id for t in list_tasks() if t.id != "RSI/VLLMBugFix-v0"]
WRAPPERS = {
    "flat_masked": lambda e: FlatObservation(e),
    "flat_box": lambda e: FlatObservation(e, action_mask=False),
    "moves": DiscreteFlagMoves,
    "direct": DirectSetting,
    "text": TextActions,
    "training_seeds": lambda e: TrainingSeeds(e, [0, 1, 2]),
    "improvement_reward": ImprovementReward,
    "rllib_view": lambda e: FlatObservation(DiscreteFlagMoves(ImprovementReward(e))),
    "sb3_direct_view": lambda e: FlatObservation(DirectSetting(e), action_mask=False),
}


@pytest.mark.parametrize("name", list(WRAPPERS))
@pytest.mark.parametrize("env_id", IDS)
def test_check_env(env_id, name):
    env = WRAPPERS[name](gym.make(env_id))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is different from the unwrapped version.*")
        check_env(env, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("env_id", IDS)
def test_random_steps_stay_in_spaces(env_id):
    for actions, observation in (("moves", "masked"), ("direct", "box"), ("text", "dict")):
        env = make_view(env_id, actions=actions, observation=observation, shell_timeout_s=1.0)
        env.action_space.seed(0)
        obs, _ = env.reset(seed=0)
        for _ in range(6):
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs) and np.isfinite(reward)
            if terminated or truncated:
                obs, _ = env.reset()
        env.close()
