"""`DiscreteFlagMoves`: each move goes one notch along the ladder, and the mask excludes exactly the moves
that would leave the ladder, touch a fixed flag, or give a configuration the env refuses."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rsi_env  # noqa: F401
from rsi_env.envs import list_tasks
from rsi_env.wrappers import DiscreteFlagMoves
from rsi_env.wrappers.direct_setting import serving_yaml
from rsi_env.wrappers.ladders import config_at, ladder, position, step_index

IDS = [t.id for t in list_tasks() if t.flags]  # moves need flags to move; RSI/Kernel-v0 has none


def _env_accepts(oracle, cfg) -> bool:
    """The env's own verdict: does writing ``cfg`` to serving.yaml take effect (no measurement: auto_bench off)?"""
    values = {f: getattr(cfg, f) for f in oracle.flag_names}
    oracle.step({"kind": 1, "path": "serving.yaml", "old": "", "new": serving_yaml(values)})
    return oracle.config == cfg


def _target(rsi, action):
    """The configuration a move would produce, or None when it leaves the ladder."""
    flag = rsi.flag_names[action // 2]
    i = step_index(rsi, rsi.config, flag, +1 if action % 2 else -1)
    return None if i is None else config_at(rsi, {flag: i})


@pytest.mark.parametrize("env_id", IDS)
def test_mask_is_exactly_the_valid_moves(env_id):
    env = DiscreteFlagMoves(gym.make(env_id))
    rsi = env.unwrapped
    obs, _ = env.reset(seed=0)
    oracle = gym.make(env_id, auto_bench=False, max_steps=10_000).unwrapped
    oracle.reset(seed=0)
    rng = np.random.default_rng(0)
    n = len(rsi.flag_names)
    for _ in range(12):
        mask = obs["action_mask"]
        assert np.array_equal(mask, env.action_masks().astype(np.int8))
        for a in range(2 * n):
            target = _target(rsi, a)
            valid = target is not None and _env_accepts(oracle, target)
            assert bool(mask[a]) == valid, (env.describe(a), rsi.config)
        assert mask[2 * n + 1] == 1
        before = (rsi.config, rsi.measurements)
        masked = np.flatnonzero(mask[:2 * n] == 0)
        if len(masked):  # a masked move changes nothing and spends no measurement, but spends its step
            steps = rsi.steps
            obs, reward, *_ = env.step(int(rng.choice(masked)))
            assert (rsi.config, rsi.measurements) == before and rsi.steps == steps + 1
            assert obs["text"].startswith("error:") and "masked" in obs["text"] and reward == 0.0
        a = int(rng.choice(np.flatnonzero(mask[:2 * n])))
        expected = _target(rsi, a)
        obs, *_ = env.step(a)
        assert rsi.config == expected


def test_moves_start_from_vllms_resolved_defaults():
    env = DiscreteFlagMoves(gym.make("RSI/Batching-v0"))
    env.reset(seed=0)
    rsi = env.unwrapped
    assert rsi.config.max_num_seqs is None  # vLLM's default, 1024 on an H200
    k = rsi.flag_names.index("max_num_seqs")
    env.step(2 * k + 1)
    assert rsi.config.max_num_seqs == 2048
    env.step(2 * k)
    env.step(2 * k)
    assert rsi.config.max_num_seqs == 512


def test_fixed_precision_flags_are_masked_unless_fp8_is_allowed():
    env = DiscreteFlagMoves(gym.make("RSI/KVCache-v0"))
    obs, _ = env.reset(seed=0)
    k = env.unwrapped.flag_names.index("kv_cache_dtype")
    assert obs["action_mask"][2 * k + 1] == 0
    env = DiscreteFlagMoves(gym.make("RSI/KVCache-v0", allow_fp8=True))
    obs, _ = env.reset(seed=0)
    assert obs["action_mask"][2 * k + 1] == 1


def test_parallel_sizes_beyond_the_gpus_are_masked():
    env = DiscreteFlagMoves(gym.make("RSI/Parallelism-v0"))
    obs, _ = env.reset(seed=0)
    rsi = env.unwrapped
    assert rsi.config.tensor_parallel_size == 8
    for flag in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        assert obs["action_mask"][2 * rsi.flag_names.index(flag) + 1] == 0  # 16 GPUs > 8
    tp = rsi.flag_names.index("tensor_parallel_size")
    obs, *_ = env.step(2 * tp)  # tp 8 -> 4 frees room for dp 2
    assert obs["action_mask"][2 * rsi.flag_names.index("data_parallel_size") + 1] == 1


def test_bench_is_masked_once_the_budget_is_spent():
    env = DiscreteFlagMoves(gym.make("RSI/Batching-v0", max_measurements=2))
    obs, _ = env.reset(seed=0)
    bench = 2 * len(env.unwrapped.flag_names)
    env.step(bench)
    obs, *_ = env.step(bench)
    assert obs["action_mask"][bench] == 0
    obs, *_ = env.step(bench)
    assert env.unwrapped.measurements == 2 and "bench is masked" in obs["text"]


def test_position_places_off_ladder_values_between_rungs():
    env = gym.make("RSI/Batching-v0").unwrapped
    env.reset(seed=0)
    cfg = env.config.replace(max_num_seqs=300)
    rungs = ladder(env, "max_num_seqs")
    assert position(env, cfg, "max_num_seqs") == rungs.index(256) + 0.5
    assert rungs[step_index(env, cfg, "max_num_seqs", +1)] == 512
    assert rungs[step_index(env, cfg, "max_num_seqs", -1)] == 256
