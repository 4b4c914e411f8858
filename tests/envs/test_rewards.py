"""Rewards that cannot be gamed: each guard holds, oscillation pays nothing, failures never score."""

from __future__ import annotations

import math
from dataclasses import replace

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401
from rsi_env.envs.state import load_state, save_state, validate


def make(env_id: str, **kw):
    env = gym.make(env_id, **kw).unwrapped
    env.reset(seed=0)
    return env


def test_only_new_bests_pay_and_oscillation_earns_nothing():
    env = make("RSI/Quantization-v0")
    up = env.flag_action("quantization", "fp8")
    down = env.flag_action("quantization", None)
    _, r1, *_ = env.step(up)
    assert r1 > 0  # fp8 weights are faster than bf16 on an H200
    total = 0.0
    for _ in range(6):
        total += env.step(down)[1] + env.step(up)[1]
    assert total <= 0  # back and forth: only measurement costs


def test_measurement_cost_is_charged():
    env = make("RSI/Batching-v0")
    _, r, *_ = env.step({"kind": 3})
    assert r < 0 and math.isclose(r, -env.task.cost_per_gpu_second * sum(t["duration_s"] for t in env._info()["telemetry"]))


def test_an_erroring_config_scores_as_failure_not_success():
    env = make("RSI/KVCache-v0")
    obs, r, *_ = env.step(env.flag_action("gpu_memory_utilization", 0.5))  # 8B + long max_model_len: refused
    info = env._info()
    if info["score"] is not None and not math.isfinite(info["score"]):
        assert r <= 0 and obs["telemetry"].sum() == 0 and "ERROR" in obs["text"]
    env.step({"kind": 4})
    assert env.verdict is not None
    assert not env.verdict.passed


def test_tampered_workload_fails_the_guard_even_if_the_score_is_good():
    env = make("RSI/Quantization-v0", allow_fp8=True)
    env.task = replace(env.task, improvement_threshold=0.01)
    env.step(env.flag_action("quantization", "fp8"))
    env.workspace.write("workloads/short_long.yaml", "name: short_long\nseed: 1\nrequests: 1\nprompt_tokens: 1\n"
                        "output_tokens: 1\n")
    _, r, term, _, info = env.step({"kind": 4})
    assert term and not info["verdict"]["passed"] and not info["verdict"]["guards"]["workloads"]
    assert info["verdict"]["guards"]["improvement"]


def test_fp8_passes_only_where_the_task_allows_it():
    ok = make("RSI/Quantization-v0")
    ok.step(ok.flag_action("quantization", "fp8"))
    _, r_ok, _, _, info_ok = ok.step({"kind": 4})
    assert info_ok["verdict"]["guards"]["precision"] and info_ok["verdict"]["guards"]["quality"]
    fixed = make("RSI/Quantization-v0", allow_fp8=False)
    obs, *_ = fixed.step(fixed.flag_action("quantization", "fp8"))
    assert fixed.config.quantization is None and "fixed" in obs["text"]
    assert obs["flag_mask"][fixed.flag_names.index("quantization")] == 0
    fixed.config = fixed.config.replace(quantization="fp8")  # past the env's refusal: the guard still holds
    _, r_fixed, _, _, info = fixed.step({"kind": 4})
    assert not info["verdict"]["guards"]["precision"] and not info["verdict"]["passed"]
    cost = fixed.task.cost_per_gpu_second * sum(t["duration_s"] for t in info["telemetry"])
    assert r_fixed == pytest.approx(info["score"] - cost)  # the measurement's gain, and no +1 for the submission


def test_quality_budget_is_enforced():
    env = make("RSI/Quantization-v0")
    env.step(env.flag_action("quantization", "fp8"))
    env.step(env.flag_action("kv_cache_dtype", "fp8"))  # 0.6 % + 0.3 % = 0.9 % <= 1 %: still within
    assert env.step({"kind": 4})[4]["verdict"]["guards"]["quality"]
    tight = make("RSI/Quantization-v0")
    tight.task = replace(tight.task, quality_budget=0.005)
    tight.step(tight.flag_action("quantization", "fp8"))
    assert not tight.step({"kind": 4})[4]["verdict"]["guards"]["quality"]


def test_unmodified_submission_does_not_pass():
    env = make("RSI/Batching-v0")
    _, r, term, _, info = env.step({"kind": 4})
    assert term and not info["verdict"]["passed"] and r <= 0


def test_serving_yaml_edits_apply_and_refuse_foreign_flags():
    env = make("RSI/Batching-v0")
    obs, *_ = env.step({"kind": 1, "path": "serving.yaml", "old": "", "new": "max_num_seqs: 128\n"})
    assert env.config.max_num_seqs == 128 and "applied" in obs["text"]
    obs, *_ = env.step({"kind": 1, "path": "serving.yaml", "old": "", "new": "kv_cache_dtype: fp8\n"})
    assert env.config.kv_cache_dtype == "auto" and "not tunable" in obs["text"]
    assert "max_num_seqs: 128" in env.workspace.read("serving.yaml")


def test_state_replays_and_validates(tmp_path):
    env = make("RSI/Quantization-v0")
    for a in [env.flag_action("max_num_seqs", 256), env.flag_action("quantization", "fp8"), {"kind": 3},
              {"kind": 2, "command": "cat serving.yaml"}, {"kind": 4}]:
        env.step(a)
    state = env.state()
    save_state(state, tmp_path / "s.json")
    res = validate(load_state(tmp_path / "s.json"))
    assert res.ok and res.replayed_total == pytest.approx(sum(state["rewards"]))
    forged = dict(state, rewards=[r + 1.0 for r in state["rewards"]])
    assert not validate(forged).ok


def test_verifying_past_the_budget_is_charged_but_never_paid():
    env = make("RSI/Quantization-v0", max_measurements=1)
    env.step(env.flag_action("max_num_seqs", 256))  # auto-bench spends the only measurement
    env.step(env.flag_action("quantization", "fp8"))  # no measurement left: unmeasured change
    assert env.measurements == 1
    _, r, term, _, info = env.step({"kind": 4})
    assert term and math.isfinite(info["score"]) and info["score"] > 0
    assert r < 0 or info["verdict"]["passed"]  # only the cost, plus +1 if every guard holds
    assert r <= (1.0 if info["verdict"]["passed"] else 0.0)


@pytest.mark.parametrize("values", [(True, 1, 1.0, "1", None), ([1, 2], "[1, 2]", 0.9, "0.9")])
def test_serving_yaml_lines_are_yaml_s_own_whatever_came_before(values):
    """serving.yaml's lines are remembered per (flag, value): a value of another type that compares equal (True, 1,
    1.0) or prints alike ("1") never gets another's line."""
    import yaml

    from rsi_env.envs.acting import _flag_line

    for _ in range(2):
        for v in values:
            assert _flag_line("x", v) == yaml.safe_dump({"x": v}, default_flow_style=True).strip().strip("{}")
