"""Gymnasium's vector envs run every flag family: ``gym.make_vec(..., vectorization_mode="async")`` steps each in
worker processes and gives what the same envs give in one process (issue 30: RL trains on many envs at once)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.envs import list_tasks

# The flag families: the envs of rsi_env.envs (a flag action sets one engine flag, a bench measures on the sim).
FLAG_IDS = [t.id for t in list_tasks() if t.entry_point.startswith("rsi_env.envs.")]


def _rollout(env_id: str, mode: str, steps: int = 4) -> list:
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode)
    try:
        obs, _ = envs.reset(seed=[0, 1])
        envs.action_space.seed(0)
        out = [obs["telemetry"].copy()]
        for _ in range(steps):
            obs, rew, term, trunc, _ = envs.step(envs.action_space.sample())
            out += [obs["telemetry"].copy(), rew.copy(), term.copy(), trunc.copy()]
        return out
    finally:
        envs.close()


def test_the_flag_families_are_the_sim_envs():
    assert {"RSI/KVCache-v0", "RSI/Batching-v0", "RSI/PrefixCache-v0", "RSI/Quantization-v0",
            "RSI/Parallelism-v0"} <= set(FLAG_IDS)


@pytest.mark.parametrize("env_id", FLAG_IDS)
def test_async_vector_env_steps_like_the_sync_one(env_id):
    got = _rollout(env_id, "async")
    want = _rollout(env_id, "sync")
    assert got[2].shape == (2,) and np.isfinite(got[2]).all()
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    # Two envs seeded apart take different actions and see different workloads: the batch is not one env twice.
    assert not np.array_equal(got[0][0], got[0][1]) or not np.array_equal(got[-4][0], got[-4][1])
