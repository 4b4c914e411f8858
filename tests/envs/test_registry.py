"""Every registered RSI/* env passes Gymnasium's checker, is deterministic under a seed, and survives
random actions of every kind — including hostile ones."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.envs import list_tasks

# RSI/VLLMBugFix-v0 starts the real vLLM at every reset: tests/code_tasks/test_vllm_bugfix.py checks it (real_engine).
IDS = [t.id for t in list_tasks() if t.id != "RSI/VLLMBugFix-v0"]


def test_all_flag_tasks_are_registered():
    assert {"RSI/KVCache-v0", "RSI/Batching-v0", "RSI/PrefixCache-v0", "RSI/Quantization-v0",
            "RSI/Parallelism-v0"} <= set(IDS)
    assert all(i in gym.registry for i in IDS)


@pytest.mark.parametrize("env_id", IDS)
def test_check_env(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def _rollout(env_id: str, seed: int, n: int = 25) -> list:
    env = gym.make(env_id)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    trace = [obs["telemetry"].tolist()]
    for _ in range(n):
        a = env.action_space.sample()
        obs, r, term, trunc, info = env.step(a)
        trace.append((obs["telemetry"].tolist(), obs["config"].tolist(), float(r), obs["text"]))
        if term or trunc:
            obs, _ = env.reset(seed=seed)
    env.close()
    return trace


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_same_episode(env_id):
    assert _rollout(env_id, 3) == _rollout(env_id, 3)


@pytest.mark.parametrize("env_id", IDS)
def test_survives_random_and_hostile_actions(env_id):
    env = gym.make(env_id, shell_timeout_s=1.0).unwrapped
    env.reset(seed=0)
    marker = f"rsi-escape-{os.getpid()}"
    hostile = [
        {"kind": 1, "path": "../../etc/passwd", "old": "", "new": "x"},
        {"kind": 1, "path": "/etc/hostname", "old": "", "new": "x"},
        {"kind": 1, "path": "workloads/short_long.yaml", "old": "", "new": "requests: 1"},
        {"kind": 1, "path": "serving.yaml", "old": "", "new": "not_a_flag: 3\n"},
        {"kind": 1, "path": "serving.yaml", "old": "", "new": ": [unbalanced\n"},
        {"kind": 1, "path": "serving.yaml", "old": "does not occur", "new": "x"},
        {"kind": 2, "command": "sleep 60"},
        {"kind": 2, "command": "yes"},
        {"kind": 2, "command": f"touch /tmp/{marker}; echo x > /etc/{marker}; echo x > $HOME/../{marker}"},
        {"kind": 0, "flag": 99, "value": 0.5},
        {"kind": 0, "flag": 0, "value": float("nan")},
        {"kind": 7},
        {"kind": "bench"},
        {},
    ]
    for a in hostile:
        obs, r, term, trunc, _ = env.step(a)
        assert env.observation_space.contains(obs), a
        assert np.isfinite(r)
    assert "outside the workspace" in env.step(hostile[0])[0]["text"]
    assert "not editable" in env.step(hostile[2])[0]["text"]
    assert not os.path.exists(f"/tmp/{marker}") and not os.path.exists(f"/etc/{marker}")
    assert not os.path.exists(os.path.join(os.path.dirname(env.workspace.root), marker))
    rng = np.random.default_rng(0)
    env.action_space.seed(1)
    for _ in range(40):
        a = env.action_space.sample()
        if rng.random() < 0.1:
            a["kind"] = 4
        obs, r, term, trunc, _ = env.step(a)
        assert env.observation_space.contains(obs) and np.isfinite(r)
        if term or trunc:
            env.reset()
    env.close()
