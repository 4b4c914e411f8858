"""Attacks on the flag tasks' rules through ``serving.yaml``: a limit the task sets must bind every way a value can
land, not only the flag action's ladder."""

from __future__ import annotations

import gymnasium as gym

import rsi_env  # noqa: F401  (registers the ids)


def test_kvcache_v1_co_tenant_cap_binds_serving_yaml_edits():
    """RSI/KVCache-v1's engine may use at most 30 % of the shared H200: an edit of serving.yaml past that share is
    refused (the file goes back to the configuration in force), never measured, and submit cannot pass on it."""
    env = gym.make("RSI/KVCache-v1").unwrapped
    try:
        env.reset(seed=0)
        _, reward, _, _, _ = env.step({"kind": 1, "path": "serving.yaml", "old": "", "new": "gpu_memory_utilization: 0.9\n"})
        assert env.config.gpu_memory_utilization == 0.25 and reward <= 0.0
        assert "gpu_memory_utilization" in env.text and "0.3" in env.text
        assert "gpu_memory_utilization: 0.25" in env.workspace.read("serving.yaml")
        _, _, term, _, info = env.step({"kind": 4})
        assert term and info["verdict"]["passed"] is False
    finally:
        env.close()


def test_kvcache_v1_within_the_cap_an_edit_still_lands():
    env = gym.make("RSI/KVCache-v1").unwrapped
    try:
        env.reset(seed=0)
        env.step({"kind": 1, "path": "serving.yaml", "old": "", "new": "gpu_memory_utilization: 0.3\n"})
        assert env.config.gpu_memory_utilization == 0.3
    finally:
        env.close()


def test_the_l4_variant_owns_its_whole_card():
    """KVCache-v0's setting (variant l4) has no co-tenant: the cap is v1's H200 setting's alone."""
    env = gym.make("RSI/KVCache-v1", variant="l4").unwrapped
    try:
        env.reset(seed=0)
        env.step({"kind": 1, "path": "serving.yaml", "old": "", "new": "gpu_memory_utilization: 0.85\n"})
        assert env.config.gpu_memory_utilization == 0.85, env.text
    finally:
        env.close()
