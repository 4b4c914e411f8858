"""`ToolCalls`: the env's actions as OpenAI-style tools; a call does what the dict action does, and a malformed
call comes back as an error naming the problem, with the episode going on and nothing measured."""

from __future__ import annotations

import json

import gymnasium as gym
import jsonschema
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rsi_env  # noqa: F401
from rsi_env.wrappers import TOOL_NAMES, ToolCallError, ToolCalls, parse_tool_call, tool_schemas


@pytest.fixture()
def env():
    e = ToolCalls(gym.make("RSI/Batching-v0", shell_timeout_s=5.0, sandbox="bubblewrap"))
    e.reset(seed=0)
    yield e
    e.close()


def call(name: str, **arguments) -> str:
    return json.dumps({"name": name, "arguments": json.dumps(arguments)})  # a chat completion's shape


def test_the_tools_are_json_schema_and_follow_the_env():
    batching = tool_schemas(gym.make("RSI/Batching-v0"))
    assert [t["function"]["name"] for t in batching] == list(TOOL_NAMES)
    for tool in batching:
        assert tool["type"] == "function" and tool["function"]["description"]
        jsonschema.Draft202012Validator.check_schema(tool["function"]["parameters"])
    flags = batching[0]["function"]["parameters"]["properties"]["flag"]["enum"]
    assert "max_num_seqs" in flags and "max_num_seqs: [" in batching[0]["function"]["description"]
    kernel = [t["function"]["name"] for t in tool_schemas(gym.make("RSI/Kernel-v0"))]
    assert "set_flag" not in kernel and "edit_file" in kernel  # no engine flags to set


def test_calls_do_what_the_dict_actions_do():
    twin = gym.make("RSI/Batching-v0").unwrapped
    tools = ToolCalls(gym.make("RSI/Batching-v0"))
    twin.reset(seed=3)
    tools.reset(seed=3)
    plays = [(call("set_flag", flag="max_num_seqs", value=512), twin.flag_action("max_num_seqs", 512)),
             ({"name": "set_flag", "arguments": {"flag": "enforce_eager", "value": True}},
              twin.flag_action("enforce_eager", True)),
             (call("edit_file", path="serving.yaml", old="max_num_seqs: 512", new="max_num_seqs: 256"),
              {"kind": 1, "path": "serving.yaml", "old": "max_num_seqs: 512", "new": "max_num_seqs: 256"}),
             (call("bench"), {"kind": 3}), ({"name": "submit"}, {"kind": 4})]
    for tool_call, action in plays:
        a, ra, ta, *_ = tools.step(tool_call)
        b, rb, tb, *_ = twin.step(action)
        assert a["text"] == b["text"] and ra == rb and ta == tb
        assert np.array_equal(a["config"], b["config"]) and np.array_equal(a["telemetry"], b["telemetry"])
    assert ta and "submission" in a["text"]
    tools.close()
    twin.close()


@pytest.mark.parametrize("bad, names", [
    ("not json", "is JSON"),
    ('["bench"]', "is an object"),
    ('{"name": "bench", "arguments": {}, "id": 3}', "only 'name' and 'arguments'"),
    ('{"name": "rm_rf"}', "unknown tool 'rm_rf'"),
    ('{"name": "bench", "arguments": "{nope"}', "bench: the arguments are not JSON"),
    ('{"name": "bench", "arguments": [1]}', "must be a JSON object"),
    ('{"name": "bench", "arguments": {"now": true}}', "unknown argument(s) ['now']"),
    ('{"name": "set_flag", "arguments": {"flag": "max_num_seqs"}}', "argument 'value' is missing"),
    ('{"name": "set_flag", "arguments": {"flag": "max_num_seqs", "value": {"a": 1}}}', "'value' must be number"),
    ('{"name": "set_flag", "arguments": {"flag": "max_num_seqs", "value": 7}}', "not on this task's ladder"),
    ('{"name": "set_flag", "arguments": {"flag": "nope", "value": 7}}', "'nope' is not tunable"),
    ('{"name": "run_shell", "arguments": {"command": 5}}', "'command' must be string, got int"),
    ('{"name": "edit_file", "arguments": {"path": "serving.yaml", "old": true, "new": ""}}', "'old' must be string"),
    ('{"name": "read_file", "arguments": {"path": "../../etc/passwd"}}', "outside the workspace"),
    ('{"name": "read_file", "arguments": {"path": "/etc/passwd"}}', "outside the workspace"),
])
def test_a_malformed_call_is_refused_by_name_and_the_episode_goes_on(env, bad, names):
    before = env.unwrapped.config
    obs, r, term, trunc, _ = env.step(bad)
    assert names in obs["text"] and "tool call refused" in obs["text"], obs["text"]
    assert env.unwrapped.config == before and env.unwrapped.measurements == 0 and not term
    assert env.observation_space.contains(obs) and np.isfinite(r)
    obs, *_ = env.step(call("run_shell", command="echo alive"))
    assert "alive" in obs["text"]


def test_files_are_read_and_listed_as_the_sandbox_sees_them(env):
    listed, *_ = env.step(call("list_files"))
    assert "serving.yaml" in listed["text"].split()
    obs, *_ = env.step(call("read_file", path="serving.yaml"))
    assert obs["text"].strip().endswith(env.unwrapped.workspace.read("serving.yaml").strip())
    obs, *_ = env.step(call("read_file", path="no such file"))
    assert "No such file" in obs["text"]  # quoted for the shell: one path, not three


def test_the_mask_follows_the_env(env):
    assert env.action_masks().all()
    env.unwrapped.measurements = env.unwrapped.task.max_measurements  # the budget spent: bench is the env's masked kind
    obs, *_ = env.step(call("run_shell", command="true"))
    mask = dict(zip(TOOL_NAMES, obs["action_mask"], strict=True))
    assert mask["bench"] == 0 and mask["submit"] == 1 and mask["set_flag"] == 1


def test_check_env_passes():
    e = ToolCalls(gym.make("RSI/Batching-v0"))
    check_env(e, skip_render_check=True)
    e.close()


_JSONISH = st.recursive(st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats(allow_nan=False)
                        | st.text(max_size=12), lambda c: st.lists(c, max_size=3)
                        | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(TOOL_NAMES), args=st.dictionaries(
    st.sampled_from(["flag", "value", "path", "old", "new", "command", "x"]), _JSONISH, max_size=4))
def test_the_parser_takes_what_the_schema_takes(name, args):
    """Fuzzed arguments: the tool's JSON Schema refuses them exactly when the parser refuses their shape (what
    the parser refuses beyond it is a value the env does not take: a flag value off its ladder, a path out)."""
    e = gym.make("RSI/Batching-v0").unwrapped
    schema = next(t for t in tool_schemas(e) if t["function"]["name"] == name)["function"]["parameters"]
    valid = jsonschema.Draft202012Validator(schema).is_valid(args)
    try:
        parse_tool_call({"name": name, "arguments": args}, e)
        parsed = True
    except ToolCallError as exc:
        parsed = False
        if valid:
            assert name in ("set_flag", "read_file", "edit_file", "run_shell"), exc
    assert valid or not parsed
