"""`FlatObservation`, `TrainingSeeds`, `ImprovementReward` and `make_view`: layouts, seeds and rewards as documented."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rsi_env  # noqa: F401
from rsi_env.wrappers import (
    DiscreteFlagMoves,
    FlatObservation,
    ImprovementReward,
    TrainingSeeds,
    env_creator,
    make_view,
)


def test_flat_vector_is_telemetry_config_budget():
    inner = DiscreteFlagMoves(gym.make("RSI/Batching-v0"))
    env = FlatObservation(inner)
    obs, _ = env.reset(seed=0)
    raw = inner.unwrapped._obs()
    expected = np.concatenate([raw["telemetry"], raw["config"], raw["budget"]]).astype(np.float32)
    assert set(obs) == {"observations", "action_mask"}
    assert np.allclose(obs["observations"], expected)
    assert obs["action_mask"].dtype == np.float32
    assert np.array_equal(obs["action_mask"], inner.action_masks().astype(np.float32))
    box = FlatObservation(DiscreteFlagMoves(gym.make("RSI/Batching-v0")), action_mask=False)
    vec, _ = box.reset(seed=0)
    assert isinstance(box.observation_space, gym.spaces.Box) and np.allclose(vec, expected)


def test_flat_observation_refuses_a_foreign_space():
    with pytest.raises(TypeError, match="RSI"):
        FlatObservation(gym.make("CartPole-v1"))


def test_training_seeds_draw_from_the_set_and_explicit_seeds_win():
    env = TrainingSeeds(gym.make("RSI/Batching-v0"), seeds=[3, 5])
    env.reset(seed=11)
    assert env.unwrapped.episode_seed == 11
    drawn = set()
    for _ in range(8):
        env.reset()
        drawn.add(env.unwrapped.episode_seed)
    assert drawn == {3, 5}


def test_improvement_reward_is_the_scaled_gain_in_best_score():
    env = ImprovementReward(gym.make("RSI/KVCache-v0"), scale=100.0)
    env.reset(seed=0)
    rsi = env.unwrapped
    _, reward, *_, info = env.step(rsi.flag_action("gpu_memory_utilization", 0.98))
    assert info["score"] > 0 and reward == pytest.approx(100.0 * rsi.best_score)
    _, reward, *_ = env.step(rsi.flag_action("gpu_memory_utilization", 0.5))  # worse: no pay, no charge
    assert reward == 0.0
    _, reward, *_ = env.step(rsi.flag_action("gpu_memory_utilization", 0.98))  # the same best again: nothing
    assert reward == 0.0


def test_env_creator_builds_the_same_stack_as_make_view():
    cfg = {"env_id": "RSI/Batching-v0", "actions": "moves", "observation": "masked", "reward": "improvement",
           "train_seeds": [0, 1], "max_measurements": 5}
    a, b = env_creator(cfg), make_view("RSI/Batching-v0", actions="moves", reward="improvement",
                                       train_seeds=[0, 1], max_measurements=5)
    assert a.observation_space == b.observation_space and a.action_space == b.action_space
    assert a.unwrapped.task.max_measurements == 5


@pytest.mark.parametrize("bad", [{"actions": "nope"}, {"observation": "nope"}, {"reward": "nope"},
                                 {"actions": "text", "observation": "box"}])
def test_make_view_names_what_is_wrong(bad):
    with pytest.raises(ValueError):
        make_view("RSI/Batching-v0", **bad)
