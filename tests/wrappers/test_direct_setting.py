"""`DirectSetting`: one action sets the whole configuration and measures it once; refusals cost no measurement."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import rsi_env  # noqa: F401
from rsi_env.wrappers import DirectSetting
from rsi_env.wrappers.ladders import ladder


def _indices(env, **values):
    rsi = env.unwrapped
    current = {f: 0 for f in rsi.flag_names}
    current.update({f: ladder(rsi, f).index(v) for f, v in values.items()})
    return np.array([current[f] for f in rsi.flag_names] + [0])


def test_one_step_sets_every_flag_and_measures_once():
    env = DirectSetting(gym.make("RSI/Batching-v0"))
    env.reset(seed=0)
    rsi = env.unwrapped
    a = _indices(env, max_num_seqs=256, max_num_batched_tokens=16384, long_prefill_token_threshold=512,
                 enforce_eager=True)
    obs, reward, terminated, truncated, info = env.step(a)
    assert (rsi.config.max_num_seqs, rsi.config.max_num_batched_tokens) == (256, 16384)
    assert rsi.config.long_prefill_token_threshold == 512 and rsi.config.enforce_eager
    assert rsi.measurements == 1 and info["score"] is not None and not terminated


def test_refused_configuration_costs_no_measurement():
    env = DirectSetting(gym.make("RSI/Batching-v0"))
    env.reset(seed=0)
    rsi = env.unwrapped
    before = rsi.config
    obs, *_ = env.step(_indices(env, max_num_seqs=2048, max_num_batched_tokens=512))  # budget < seqs
    assert rsi.config == before and rsi.measurements == 0
    assert "refused" in obs["text"] and "max_num_batched_tokens" in obs["text"]


def test_fixed_flags_keep_their_value_and_mask_one_rung():
    env = DirectSetting(gym.make("RSI/KVCache-v0"))
    obs, _ = env.reset(seed=0)
    rsi = env.unwrapped
    k = rsi.flag_names.index("kv_cache_dtype")
    start = sum(env.sizes[:k])
    assert obs["action_mask"][start:start + env.sizes[k]].tolist() == [1, 0]  # auto only
    a = _indices(env, gpu_memory_utilization=0.95)
    a[k] = 1  # asks for fp8: ignored, the task fixes the KV precision
    env.step(a)
    assert rsi.config.kv_cache_dtype == "auto" and rsi.config.gpu_memory_utilization == 0.95
    assert rsi.measurements == 1


def test_submit_switch_ends_the_episode():
    env = DirectSetting(gym.make("RSI/Batching-v0"))
    env.reset(seed=0)
    a = _indices(env, max_num_seqs=512, max_num_batched_tokens=16384)
    a[-1] = 1
    *_, terminated, truncated, info = env.step(a)
    assert terminated and info["verdict"] is not None


def test_benches_itself_when_the_tier_does_not_auto_bench():
    env = DirectSetting(gym.make("RSI/Batching-v0", auto_bench=False))
    env.reset(seed=0)
    env.step(_indices(env, max_num_seqs=512, max_num_batched_tokens=16384))
    rsi = env.unwrapped
    assert rsi.measurements == 1 and rsi.measured_config == rsi.config
