"""Hypothesis fuzzing of every action field and of the text-action parser (issue 26, part 6).

Properties: ``step`` never raises (but for the documented usage error of stepping a finished
episode), its observation is inside ``observation_space``, its reward is finite, and the env stays
usable; ``parse_text_action`` raises nothing but `TextActionError` and returns only actions whose
fields are inside the env's ``action_space``. Example counts stay modest: the suite shares small machines.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rsi_env  # noqa: F401  (registers RSI/*)
from rsi_env.errors import RsiEnvError
from rsi_env.wrappers.text_actions import TextActionError, parse_text_action

FIELDS = ("kind", "flag", "value", "path", "old", "new", "command")
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

_ENVS: dict[str, Any] = {}


def shared_env(env_id: str = "RSI/Batching-v0") -> Any:
    """One env per id for all examples (a fresh one per example would spend the run on resets)."""
    if env_id not in _ENVS:
        env = gym.make(env_id, shell_timeout_s=1.0).unwrapped
        env.reset(seed=0)
        _ENVS[env_id] = env
    return _ENVS[env_id]


@pytest.fixture(scope="module", autouse=True)
def _close_envs() -> Any:
    yield
    for env in _ENVS.values():
        env.close()
    _ENVS.clear()


# ---- junk of every type --------------------------------------------------------------------------------------
numbers = st.one_of(st.integers(-(10**30), 10**30), st.integers(-2, 8),
                    st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 1),
                    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 4.7, 4.0, 1e-320, True, False]))
numpy_values = st.one_of(
    st.integers(-3, 9).map(np.int64), st.integers(0, 255).map(np.uint8), st.floats(width=32).map(np.float32),
    st.floats(0, 1).map(lambda x: np.array(x, dtype=np.float32)), st.integers(0, 4).map(np.array),
    st.integers(0, 4).map(lambda x: np.array([x])), st.just(np.zeros((3, 3))), st.just(np.array("3")),
    st.just(np.bool_(True)), st.just(np.array([], dtype=np.float32)))
texts = st.one_of(st.text(max_size=64), st.text(alphabet=st.characters(codec="ascii"), max_size=300),
                  st.sampled_from(["serving.yaml", "workloads/rag_chat.yaml", "../../etc/passwd", "/etc/hostname",
                                   "", "max_num_seqs: 8\n", "x: &a 1\ny: *a\n", "[" * 2000, "\x00", "\ud800",
                                   "true", "ls -la", "x" * 300, "y" * 9000, "cat /etc/shadow"]))
scalars = st.one_of(st.none(), numbers, numpy_values, texts, st.binary(max_size=32))
junk = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                    max_leaves=8)

# Mostly well-typed values, so that fuzzing reaches the code behind the space check too.
plausible = {"kind": st.integers(0, 4), "flag": st.integers(0, 5), "value": st.floats(0, 1),
             "path": st.sampled_from(["serving.yaml", "workloads/rag_chat.yaml", "TASK.md", "nope.py"]),
             "old": st.sampled_from(["", "max_num_seqs", "null", "# Engine"]),
             "new": st.one_of(st.sampled_from(["max_num_seqs: 64\n", "enable_chunked_prefill: maybe\n", "{}\n",
                                               "- 1\n", "x: &a [1]\ny: *a\n", "1: 2\nb: 3\n", "? [a]\n: 1\n",
                                               "max_num_seqs: [1, 2]\n", "max_num_seqs: {a: 1}\n"]),
                              st.text(alphabet=st.characters(codec="ascii"), max_size=200)),
             "command": st.sampled_from(["true", "cat serving.yaml", "rm -rf workloads; mkdir workloads",
                                         "rm serving.yaml; mkfifo serving.yaml", "ln -sf /etc/passwd serving.yaml",
                                         "head -c 3000000 /dev/zero > serving.yaml"])}
field_values = {f: st.one_of(plausible[f], junk) for f in FIELDS}
actions = st.one_of(
    st.fixed_dictionaries({}, optional=field_values),
    st.fixed_dictionaries({"kind": plausible["kind"]}, optional={k: v for k, v in plausible.items() if k != "kind"}),
    st.builds(lambda a, extra: {**a, **extra}, st.fixed_dictionaries({}, optional=field_values),
              st.dictionaries(st.one_of(st.text(max_size=10), st.integers()), junk, min_size=1, max_size=2)),
    junk)


def step_checked(env: Any, action: Any) -> None:
    """One step: never raises but after the episode ended, obs inside the space, reward finite."""
    try:
        obs, r, term, trunc, _ = env.step(action)
    except RsiEnvError as exc:
        assert env.done or env.truncated, f"step raised {exc!r} on {action!r}"
        env.reset(seed=0)
        return
    assert env.observation_space.contains(obs), (action, obs["text"])
    assert math.isfinite(float(r))
    if term or trunc:
        env.reset(seed=0)


@SETTINGS
@given(action=actions)
def test_step_survives_any_action(action: Any) -> None:
    env = shared_env()
    step_checked(env, action)
    if env.done or env.truncated:
        env.reset(seed=0)
    name = env.flag_names[0]
    obs, *_ = env.step(env.flag_action(name, env.task.ladder(name)[0]))  # still usable
    assert f"set {name}" in obs["text"]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(action=actions)
def test_step_survives_any_action_in_a_code_task(action: Any) -> None:
    step_checked(shared_env("RSI/Scheduler-v0"), action)


# ---- the text-action parser ----------------------------------------------------------------------------------
verbs = st.sampled_from(["set", "edit", "run", "bench", "submit", "SET", "Edit", "", "sett"])
flag_names = st.sampled_from(["max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "block_size",
                              "nope", "\u00e9"])
yaml_values = st.one_of(st.sampled_from(["512", "true", "null", "[1, 2, 4]", "&a [1]", "*a", "[&a [1], *a, *a]",
                                         "{a: 1}", "'x'", "1e999", ".nan", "0x10", "!!binary aGk="]),
                        st.text(max_size=40))
edit_blocks = st.builds(lambda p, o, n: f"edit {p}\n<<<<<<< SEARCH\n{o}\n=======\n{n}\n>>>>>>> REPLACE",
                        st.one_of(st.sampled_from(["serving.yaml", "'a b'", "x" * 300, "caf\u00e9"]), st.text(max_size=20)),
                        st.one_of(st.text(max_size=50), st.just("z" * 9000)),
                        st.one_of(st.text(max_size=50), st.just("w" * 9000)))
lines = st.one_of(
    st.text(max_size=200),
    st.builds(lambda v, rest: f"{v} {rest}", verbs, st.text(max_size=100)),
    st.builds(lambda f, v: f"set {f} {v}", flag_names, yaml_values),
    st.builds(lambda c: f"run {c}", st.one_of(st.text(max_size=80), st.just("q" * 2000))),
    edit_blocks)


def inside_action_space(action: dict[str, Any], env: Any) -> bool:
    """Every field given is inside its part of the env's ``Dict`` action space (missing ones are the kind's unused)."""
    space = env.action_space
    return set(action) <= set(space.spaces) and all(
        space[k].contains(np.asarray(v, dtype=np.float32) if k == "value" else v) for k, v in action.items())


@SETTINGS
@given(text=lines)
def test_the_text_parser_raises_only_text_action_errors_and_stays_in_the_space(text: str) -> None:
    env = shared_env()
    try:
        action = parse_text_action(text, env)
    except TextActionError:
        return
    assert inside_action_space(action, env), action
    step_checked(env, action)


@SETTINGS
@given(text=junk)
def test_the_text_parser_refuses_non_text(text: Any) -> None:
    env = shared_env()
    try:
        action = parse_text_action(text, env)
    except TextActionError:
        return
    assert isinstance(text, str) and inside_action_space(action, env)
