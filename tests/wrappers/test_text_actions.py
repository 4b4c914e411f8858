"""`TextActions`: the syntax an LLM writes, parsed into env actions; garbage comes back as a clear error."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rsi_env  # noqa: F401
from rsi_env.errors import RsiEnvError
from rsi_env.wrappers import TEXT_SYNTAX, TextActionError, TextActions, parse_text_action


@pytest.fixture()
def env():
    e = TextActions(gym.make("RSI/Batching-v0", shell_timeout_s=2.0))
    e.reset(seed=0)
    yield e
    e.close()


def test_set_moves_a_flag_and_measures(env):
    obs, *_ = env.step("set max_num_seqs 512")
    assert env.unwrapped.config.max_num_seqs == 512 and env.unwrapped.measurements == 1
    assert "set max_num_seqs = 512" in obs["text"]
    env.step("SET cudagraph_capture_sizes [1, 2, 4, 8, 16, 32, 64, 128, 256]")
    assert env.unwrapped.config.cudagraph_capture_sizes == (1, 2, 4, 8, 16, 32, 64, 128, 256)


def test_edit_block_replaces_text_and_empty_search_writes_the_file(env):
    env.step("set max_num_seqs 512")
    obs, *_ = env.step("edit serving.yaml\n<<<<<<< SEARCH\nmax_num_seqs: 512\n=======\nmax_num_seqs: 300\n"
                       ">>>>>>> REPLACE\n")
    assert env.unwrapped.config.max_num_seqs == 300, obs["text"]
    env.step("edit serving.yaml\n<<<<<<< SEARCH\n=======\nmax_num_seqs: 128\nenforce_eager: true\n>>>>>>> REPLACE")
    assert env.unwrapped.config.max_num_seqs == 128 and env.unwrapped.config.enforce_eager


def test_run_bench_submit(env):
    obs, *_ = env.step("run cat serving.yaml")
    assert "max_num_seqs" in obs["text"]
    env.step("bench")
    assert env.unwrapped.measurements == 1
    *_, terminated, _, info = env.step("submit")
    assert terminated and info["verdict"] is not None


def test_parse_builds_the_envs_own_actions(env):
    rsi = env.unwrapped
    assert parse_text_action("  bench  ", rsi) == {"kind": 3}
    assert parse_text_action("run echo a\necho b", rsi) == {"kind": 2, "command": "echo a\necho b"}
    assert parse_text_action("set max_num_seqs 512", rsi) == rsi.flag_action("max_num_seqs", 512)
    act = parse_text_action("edit 'serving.yaml'\n<<<<<<< SEARCH\na\nb\n=======\nc\n>>>>>>> REPLACE", rsi)
    assert act == {"kind": 1, "path": "serving.yaml", "old": "a\nb", "new": "c"}


@pytest.mark.parametrize("text, says", [
    ("", "empty action"),
    ("   \n ", "empty action"),
    ("flurb the engine", "unknown action 'flurb the engine'"),
    ("set max_num_seqs", "set takes a FLAG and a VALUE"),
    ("set max_num_seqs 300", "not on this task's ladder"),
    ("set not_a_flag 3", "not tunable"),
    ("set max_num_seqs [unbalanced", "cannot read the value"),
    ("bench now", "bench takes no arguments"),
    ("run", "run needs a COMMAND"),
    ("edit serving.yaml", "<<<<<<< SEARCH"),
    ("edit serving.yaml\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE", "exactly one '======='"),
    ("edit serving.yaml\n<<<<<<< SEARCH\nx\n=======\ny", "must end with '>>>>>>> REPLACE'"),
    ("edit a b\n<<<<<<< SEARCH\n=======\n>>>>>>> REPLACE", "one PATH"),
    ("\u00e9t\u00e9 \x00\x07", "unknown action"),
])
def test_garbage_is_refused_with_a_clear_error(env, text, says):
    with pytest.raises(RsiEnvError):  # TextActionError, or the env's own error for a flag it cannot set
        parse_text_action(text, env.unwrapped)
    before = (env.unwrapped.config, env.unwrapped.measurements, env.unwrapped.steps)
    obs, reward, terminated, truncated, _ = env.step(text)
    assert obs["text"].startswith("error:") and says in obs["text"], obs["text"]
    assert TEXT_SYNTAX.splitlines()[1] in obs["text"]
    assert (env.unwrapped.config, env.unwrapped.measurements) == before[:2] and env.unwrapped.steps == before[2] + 1
    assert reward == 0.0 and not terminated and env.observation_space.contains(obs)


def test_parse_errors_are_text_action_errors(env):
    with pytest.raises(TextActionError, match="unknown action"):
        parse_text_action("launch", env.unwrapped)


def test_edit_refused_by_the_workspace_is_reported(env):
    obs, *_ = env.step("edit ../../etc/passwd\n<<<<<<< SEARCH\n=======\nx\n>>>>>>> REPLACE")
    assert "outside the workspace" in obs["text"]


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_an_observation_never_an_exception(text):
    env = TextActions(gym.make("RSI/Batching-v0", shell_timeout_s=1.0))
    env.reset(seed=0)
    if text.strip().lower().startswith("run"):
        text = "bench"  # a shell command is the sandbox's business, not the parser's
    obs, reward, *_ = env.step(text)
    assert env.observation_space.contains(obs)
    env.close()
