"""The chat agent (`rsi_env.suite.chat`) against a scripted OpenAI-compatible server on loopback (a stand-in
only for the model; the env, its tools and the HTTP are real): tool calls play the episode as dict actions
would, an endpoint without tools is played in text, and garbage, silence or a model that never submits all
end the episode cleanly, with the reason."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401
from rsi_env.suite.chat import ChatEndpoint, ChatLimits, play_chat
from tests.chat_server import ScriptedChat, text_reply, tool_reply


@pytest.fixture()
def serve() -> Iterator[Any]:
    made: list[ScriptedChat] = []

    def start(replies: list[Any]) -> ScriptedChat:
        made.append(ScriptedChat(replies))
        return made[-1]

    yield start
    for s in made:
        s.close()


def batching() -> gym.Env[Any, Any]:
    return gym.make("RSI/Batching-v0", sandbox="bubblewrap", shell_timeout_s=5.0)


def test_tool_calls_play_the_episode_as_dict_actions_do(serve):
    srv = serve([tool_reply(("set_flag", {"flag": "max_num_seqs", "value": 512})),
                 tool_reply(("set_flag", {"flag": "max_num_seqs"})),  # malformed: no value
                 tool_reply(("bench", {}), ("submit", {}), ("bench", {}))])
    env = batching()
    ep = play_chat(env, ChatEndpoint(srv.url, "m"), seed=4)
    twin = gym.make("RSI/Batching-v0").unwrapped
    twin.reset(seed=4)
    twin.step(twin.flag_action("max_num_seqs", 512))
    twin.step({"kind": 3})
    _, want_r, _, _, info = twin.step({"kind": 4})
    assert ep.ended_by == "submitted" and ep.submitted and ep.passed == info["verdict"]["passed"]
    assert ep.reward == want_r and ep.requests == 3 and ep.tokens == 150 and ep.steps == 3 and ep.mode == "tools"
    tools = [m for m in ep.messages if m["role"] == "tool"]
    assert "argument 'value' is missing" in tools[1]["content"] and tools[-1]["content"].startswith("not run")
    assert "submission" in tools[-2]["content"]
    sent = srv.requests[-1]
    assert [t["function"]["name"] for t in sent["tools"]][:2] == ["set_flag", "edit_file"]
    assert [m["tool_call_id"] for m in sent["messages"] if m["role"] == "tool"] == ["c0", "c0"]
    env.close()
    twin.close()


def test_an_endpoint_without_tools_is_played_in_text(serve):
    srv = serve([400, text_reply("I will raise the batch.\n```\nset max_num_seqs 512\n```"),
                 text_reply("make it fast"), text_reply("submit")])
    ep = play_chat(batching(), ChatEndpoint(srv.url, "m"), seed=0)
    assert ep.mode == "text" and ep.ended_by == "submitted" and ep.steps == 2
    assert "tools" not in srv.requests[1] and "set FLAG VALUE" in srv.requests[1]["messages"][0]["content"]
    assert "unknown action 'make it fast'" in srv.requests[3]["messages"][-1]["content"]


@pytest.mark.parametrize("replies, reason", [
    ([{"nope": 1}], "not a chat completion"),
    ([{"choices": [{"message": {"tool_calls": [{"function": 3}]}}]}], "not a chat completion"),
    ([500], "HTTP 500"),
    (["hang"], "timed out"),
])
def test_garbage_or_silence_ends_the_episode_with_the_reason(serve, replies, reason):
    srv = serve(replies)
    ep = play_chat(batching(), ChatEndpoint(srv.url, "m", timeout_s=1.0), seed=0)
    assert ep.ended_by.startswith("endpoint:") and reason in ep.ended_by and not ep.submitted and not ep.passed


def test_an_unreachable_endpoint_ends_the_episode():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    ep = play_chat(batching(), ChatEndpoint(f"http://127.0.0.1:{port}/v1", "m", timeout_s=2.0), seed=0)
    assert ep.ended_by.startswith("endpoint:") and not ep.passed


def test_a_model_that_never_submits_is_stopped_by_its_limits(serve):
    srv = serve([tool_reply(("list_files", {}), tokens=400)])
    ep = play_chat(batching(), ChatEndpoint(srv.url, "m"), seed=0, limits=ChatLimits(max_requests=5))
    assert ep.ended_by == "max_requests" and ep.requests == 5 and not ep.submitted and not ep.passed
    ep = play_chat(batching(), ChatEndpoint(srv.url, "m"), seed=0, limits=ChatLimits(max_tokens=1000))
    assert ep.ended_by == "max_tokens" and ep.requests == 3
