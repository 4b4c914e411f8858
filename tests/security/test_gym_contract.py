"""The Gymnasium contract holds against hostile callers (issue 26, part 5).

An action outside ``action_space`` is refused, naming the field, never coerced; a finished
episode pays nothing until ``reset``; ``validate`` recomputes every field of a state and fails,
never raises, on a forged or malformed one.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rsi_env
from rsi_env.envs.state import validate
from rsi_env.errors import RsiEnvError

ENV_ID = "RSI/KVCache-v0"


@pytest.fixture
def env() -> Any:
    e = gym.make(ENV_ID).unwrapped
    e.reset(seed=0)
    yield e
    e.close()


def refused(env: Any, action: Any, field: str | int) -> None:
    """``action`` is refused naming ``field``: the step counts, pays 0, changes nothing, and the episode goes on."""
    steps, cfg, measurements = env.steps, env.config, env.measurements
    obs, r, term, trunc, _ = env.step(action)
    assert env.observation_space.contains(obs)
    assert r == 0.0 and not term and not trunc
    assert "refused" in obs["text"] and repr(field) in obs["text"], obs["text"]
    assert env.steps == steps + 1 and env.config == cfg and env.measurements == measurements and not env.done


# ---- actions outside the action space -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", [4.7, 4.0, 7, -1, 5, True, np.bool_(True), "4", "bench", None, [4], np.array([4]),
                                  np.float32(4), np.array(4.0), 10**30, math.nan])
def test_a_kind_outside_the_space_is_refused_never_coerced(env: Any, kind: Any) -> None:
    refused(env, {"kind": kind}, "kind")


@pytest.mark.parametrize("kind", [4, np.int64(4), np.int32(4), np.array(4), np.uint8(4)])
def test_integer_kinds_of_any_integer_type_are_accepted(env: Any, kind: Any) -> None:
    _, _, term, *_ = env.step({"kind": kind})
    assert term


@pytest.mark.parametrize("flag", [99, -1, 0.0, 1.5, "0", None, True])
def test_a_flag_outside_the_space_is_refused(env: Any, flag: Any) -> None:
    refused(env, {"kind": 0, "flag": flag, "value": 0.5}, "flag")


@pytest.mark.parametrize("value", [1.5, -0.1, math.nan, math.inf, -math.inf, "0.5", None, [0.5],
                                   np.array([0.5], dtype=np.float32), np.full((2, 2), 0.5), True, 1e300])
def test_a_value_outside_the_space_is_refused(env: Any, value: Any) -> None:
    refused(env, {"kind": 0, "flag": 0, "value": value}, "value")


@pytest.mark.parametrize("value", [0.5, 1, 0, np.float32(0.25), np.array(0.75, dtype=np.float32), np.float64(1.0),
                                   np.int64(0)])
def test_values_inside_the_space_are_accepted(env: Any, value: Any) -> None:
    obs, *_ = env.step({"kind": 0, "flag": 0, "value": value})
    assert "refused" not in obs["text"] and f"set {env.flag_names[0]}" in obs["text"]


@pytest.mark.parametrize(("field", "bad"), [("path", 5), ("path", None), ("path", "x" * 257), ("path", "caf\u00e9"),
                                            ("path", ""), ("old", b"bytes"), ("old", "x" * 8193),
                                            ("new", ["list"]), ("new", "\x00"), ("command", "y" * 1025),
                                            ("command", {"a": 1}), ("command", "")])
def test_a_text_field_outside_the_space_is_refused(env: Any, field: str, bad: Any) -> None:
    action: dict[str, Any] = {"kind": 1, "path": "serving.yaml", "old": "", "new": "max_num_seqs: 8\n"}
    if field == "command":
        action = {"kind": 2, "command": "true"}
    refused(env, {**action, field: bad}, field)


def test_unused_fields_must_still_be_inside_the_space(env: Any) -> None:
    refused(env, {"kind": 3, "command": 12}, "command")


@pytest.mark.parametrize(("action", "field"), [({"kind": 0, "flag": 0}, "value"), ({"kind": 0, "value": 0.5}, "flag"),
                                               ({"kind": 1, "path": "serving.yaml", "new": "x"}, "old"),
                                               ({"kind": 1, "old": "", "new": "x"}, "path"),
                                               ({"kind": 1, "path": "serving.yaml", "old": ""}, "new"),
                                               ({"kind": 2}, "command"), ({"flag": 0, "value": 0.5}, "kind"), ({}, "kind")])
def test_a_missing_field_the_kind_needs_is_refused(env: Any, action: dict[str, Any], field: str) -> None:
    refused(env, action, field)


def test_unknown_keys_are_refused_by_name(env: Any) -> None:
    refused(env, {"kind": 3, "kindd": 4}, "kindd")
    refused(env, {"kind": 3, 7: "x"}, 7)


@pytest.mark.parametrize("action", [None, 3, "bench", [3], (3,), np.array(3)])
def test_an_action_that_is_not_a_dict_is_refused_not_raised(env: Any, action: Any) -> None:
    steps = env.steps
    obs, r, term, trunc, _ = env.step(action)
    assert r == 0.0 and not term and "refused" in obs["text"] and env.steps == steps + 1


def test_unused_fields_are_ignored_when_missing(env: Any) -> None:
    obs, *_ = env.step({"kind": 3})
    assert "measured" in obs["text"]


def test_sampled_actions_are_never_refused(env: Any) -> None:
    env.action_space.seed(3)
    for _ in range(30):
        a = env.action_space.sample()
        if int(a["kind"]) == 4:
            continue
        obs, *_ = env.step(a)
        assert "action refused" not in obs["text"], (a, obs["text"])
        if env.steps >= env.max_steps - 1:
            env.reset(seed=0)


def test_a_refused_action_replays_as_refused(env: Any) -> None:
    env.step({"kind": 4.7})
    env.step(env.flag_action(env.flag_names[0], env.task.ladder(env.flag_names[0])[1]))
    assert validate(env.state()).ok


# ---- the end of an episode ----------------------------------------------------------------------------------
def test_steps_after_truncation_are_refused_and_pay_nothing() -> None:
    env = gym.make(ENV_ID, max_steps=2).unwrapped
    env.reset(seed=0)
    env.step({"kind": 3})
    *_, trunc, _ = env.step({"kind": 0, "flag": 0, "value": 1.0})
    assert trunc
    rewards, steps, best = list(env.reward_log), env.steps, env.best_score
    for a in ({"kind": 0, "flag": 0, "value": 0.0}, {"kind": 3}, {"kind": 4}):
        with pytest.raises(RsiEnvError, match="truncated.*reset"):
            env.step(a)
    assert env.reward_log == rewards and env.steps == steps and env.best_score == best
    env.reset(seed=0)
    env.step({"kind": 3})  # a reset starts a new episode
    env.close()


def test_steps_after_submit_are_refused() -> None:
    env = gym.make(ENV_ID).unwrapped
    env.reset(seed=0)
    env.step({"kind": 4})
    with pytest.raises(RsiEnvError, match="submitted.*reset"):
        env.step({"kind": 3})
    env.close()


def test_the_wrapped_env_refuses_too() -> None:
    env = gym.make(ENV_ID, max_steps=1)
    env.reset(seed=0)
    assert env.step({"kind": 3})[3]
    with pytest.raises(RsiEnvError):
        env.step({"kind": 3})
    env.close()


# ---- validate ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good_state() -> dict[str, Any]:
    env = gym.make(ENV_ID).unwrapped
    env.reset(seed=1)
    for f in env.flag_names[:2]:
        env.step(env.flag_action(f, env.task.ladder(f)[-1]))
    env.step({"kind": 4})
    state = env.state()
    env.close()
    return state


def test_a_true_state_validates(good_state: dict[str, Any]) -> None:
    res = validate(good_state)
    assert res.ok, res.error


def _forged(state: dict[str, Any], **changes: Any) -> dict[str, Any]:
    s = copy.deepcopy(state)
    s.update(changes)
    return s


def test_forged_passed_fails_naming_it(good_state: dict[str, Any]) -> None:
    res = validate(_forged(good_state, passed=not good_state["passed"]))
    assert not res.ok and "passed" in (res.error or "")


def test_forged_final_config_fails_naming_it(good_state: dict[str, Any]) -> None:
    cfg = {**good_state["final_config"], "max_num_seqs": 1024}
    res = validate(_forged(good_state, final_config=cfg))
    assert not res.ok and "final_config" in (res.error or "")


def test_forged_guards_fail_naming_them(good_state: dict[str, Any]) -> None:
    env = gym.make(ENV_ID).unwrapped
    env.reset(seed=good_state["seed"])
    for a in good_state["actions"]:
        *_, info = env.step(a)
    env.close()
    guards = info["verdict"]["guards"]
    assert validate(_forged(good_state, guards=guards)).ok
    flipped = {**guards, "workloads": not guards["workloads"]}
    res = validate(_forged(good_state, guards=flipped))
    assert not res.ok and "guards" in (res.error or "")
    res = validate(_forged(good_state, guards="all ok"))
    assert not res.ok and "guards" in (res.error or "")


def test_forged_rewards_fail(good_state: dict[str, Any]) -> None:
    rewards = list(good_state["rewards"])
    rewards[-1] += 1.0
    res = validate(_forged(good_state, rewards=rewards))
    assert not res.ok and res.mismatches


@pytest.mark.parametrize("bad", [
    None, 3, "state", [], {},
    {"task": ENV_ID},
    {"task": "CartPole-v1", "kwargs": {}, "seed": 0, "actions": [], "rewards": []},
    {"task": "RSI/Nope-v0", "kwargs": {}, "seed": 0, "actions": [], "rewards": []},
    {"task": "os:system", "kwargs": {}, "seed": 0, "actions": [], "rewards": []},
    {"task": ENV_ID, "kwargs": {"workloads": ["/etc/passwd"]}, "seed": 0, "actions": [], "rewards": []},
    {"task": ENV_ID, "kwargs": {"workloads": ["../../../etc/passwd"]}, "seed": 0, "actions": [], "rewards": []},
    {"task": ENV_ID, "kwargs": {"workloads": "rag_chat"}, "seed": 0, "actions": [], "rewards": []},
    {"task": ENV_ID, "kwargs": {"model": "/etc/passwd"}, "seed": 0, "actions": [], "rewards": []},
    {"task": ENV_ID, "kwargs": {"hardware": "/etc/hosts.yaml"}, "seed": 0, "actions": [], "rewards": []},
    {"task": ENV_ID, "kwargs": {"max_episode_steps": 3}, "seed": 0, "actions": [], "rewards": []},
    {"task": ENV_ID, "kwargs": {"max_steps": "many"}, "seed": 0, "actions": [], "rewards": []},
    {"task": ENV_ID, "kwargs": {"shell_timeout_s": 1e9}, "seed": 0, "actions": [], "rewards": []},
    {"task": ENV_ID, "kwargs": "tier=sim", "seed": 0, "actions": [], "rewards": []},
    {"task": ENV_ID, "kwargs": {}, "seed": "zero", "actions": [], "rewards": []},
    {"task": ENV_ID, "kwargs": {}, "seed": 0, "actions": {"kind": 3}, "rewards": [0.0]},
    {"task": ENV_ID, "kwargs": {}, "seed": 0, "actions": [{"kind": 3}], "rewards": ["a lot"]},
    {"task": ENV_ID, "kwargs": {}, "seed": 0, "actions": [{"kind": 3}], "rewards": [math.nan]},
    {"task": ENV_ID, "kwargs": {}, "seed": 0, "actions": [{"kind": 3}], "rewards": [math.inf]},
    {"task": ENV_ID, "kwargs": {}, "seed": 0, "actions": [{"kind": 3}], "rewards": []},
    {"task": ENV_ID, "kwargs": {}, "seed": 0, "actions": [], "rewards": [], "passed": "yes"},
    {"task": ENV_ID, "kwargs": {}, "seed": 0, "actions": [], "rewards": [], "final_config": []},
    {"task": ENV_ID, "kwargs": {}, "seed": 0, "actions": [], "rewards": [], "injected": 1},
    {"task": "RSI/Scheduler-v0", "kwargs": {"sandbox": "local"}, "seed": 0, "actions": [], "rewards": []},
])
def test_a_bad_state_fails_and_never_raises(bad: Any) -> None:
    res = validate(bad)
    assert not res.ok and res.error


def test_a_host_file_as_workload_is_refused_with_a_clear_error() -> None:
    res = validate({"task": ENV_ID, "kwargs": {"workloads": ["/etc/passwd"]}, "seed": 0, "actions": [], "rewards": []})
    assert not res.ok and "workloads" in (res.error or "") and "/etc/passwd" in (res.error or "")


def test_a_state_after_truncation_validates() -> None:
    env = gym.make(ENV_ID, max_steps=2).unwrapped
    env.reset(seed=0)
    env.step({"kind": 0, "flag": 0, "value": 1.0})
    env.step({"kind": 3})
    state = env.state()
    env.close()
    assert validate(state).ok
    longer = _forged(state, actions=[*state["actions"], {"kind": 4}], rewards=[*state["rewards"], 1.0])
    assert not validate(longer).ok


def test_validate_is_exported() -> None:
    assert rsi_env.validate is validate


def test_a_field_of_deeply_nested_junk_is_refused_not_raised(env: Any) -> None:
    deep: list[Any] = []
    for _ in range(20000):
        deep = [deep]
    refused(env, {"kind": 3, "command": deep}, "command")
