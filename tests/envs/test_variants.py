"""Task variants: another setting under the same id, picked by ``variant=``. KVCache-v1 and Scheduler-v1 run on
an H200 with a co-tenant's memory share; their ``variant="l4"`` is v0's setting, on the sim tier only."""

from __future__ import annotations

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401
from rsi_env.envs.state import validate
from rsi_env.errors import CatalogError, RsiEnvError


def _base(env_id: str, **kw: object) -> list[dict[str, object]]:
    env = gym.make(env_id, sandbox="bubblewrap", **kw).unwrapped
    try:
        env.reset(seed=3)
        return [t.to_dict() for t in env.base_tels]
    finally:
        env.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_l4_variant_is_v0_exactly():
    assert _base("RSI/KVCache-v1", variant="l4") == _base("RSI/KVCache-v0")


def test_v1_starts_from_the_co_tenants_share_on_an_h200():
    env = gym.make("RSI/KVCache-v1").unwrapped
    try:
        env.reset(seed=0)
        assert (env.model.name, env.hardware.name) == ("llama-3.1-8b", "h200")
        assert env.config.gpu_memory_utilization == 0.25 and max(env.task.ladder("gpu_memory_utilization")) == 0.3
        assert any(t.num_preemptions > 0 for t in env.base_tels)  # the KV cache is the constraint
        # the share is the co-tenant's: nothing above 30 % is on the ladder, so no flag action reaches it
        obs, *_ = env.step(env.flag_action("gpu_memory_utilization", 0.3))
        assert env.config.gpu_memory_utilization == 0.3
    finally:
        env.close()


def test_a_variant_the_hardware_cannot_run_is_refused_by_name():
    with pytest.raises(RsiEnvError, match="sim tier"):
        gym.make("RSI/KVCache-v1", variant="l4", tier="real")
    with pytest.raises(RsiEnvError, match="nothing to promote"):
        gym.make("RSI/Scheduler-v1", variant="l4", promote_on_submit=True)
    with pytest.raises(CatalogError, match="no variant 'a100'; variants: \\['l4'\\]"):
        gym.make("RSI/KVCache-v1", variant="a100")


def test_an_episode_of_a_variant_replays():
    env = gym.make("RSI/KVCache-v1", variant="l4").unwrapped
    try:
        env.reset(seed=1)
        env.step(env.flag_action("gpu_memory_utilization", 0.98))
        env.step({"kind": 4})
        state = env.state()
    finally:
        env.close()
    assert state["kwargs"]["variant"] == "l4"
    res = validate(state)
    assert res.ok and res.replayed_total == res.expected_total > 0, res


def test_parallelism_x2_stays_within_two_gpus():
    env = gym.make("RSI/Parallelism-v0", variant="x2").unwrapped
    try:
        obs, _ = env.reset(seed=0)
        assert (env.model.name, env.num_gpus, env.config.tensor_parallel_size) == ("llama-3.1-8b", 2, 2)
        assert all(t.ok for t in env.base_tels)
        obs, *_ = env.step(env.flag_action("tensor_parallel_size", 4))  # four GPUs on a two-GPU host: refused
        assert env.config.tensor_parallel_size == 2 and "num_gpus=2" in obs["text"], obs["text"]
        obs, *_ = env.step(env.flag_action("tensor_parallel_size", 1))  # one GPU, half the cost per second
        assert env.config.tensor_parallel_size == 1
    finally:
        env.close()
