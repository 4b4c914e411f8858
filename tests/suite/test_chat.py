"""The chat agent (`rsi_env.suite.chat`) against a scripted OpenAI-compatible server on loopback (a stand-in
only for the model; the env, its tools and the HTTP are real): tool calls play the episode as dict actions
would, an endpoint without tools is played in text, and garbage, silence or a model that never submits all
end the episode cleanly, with the reason."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401
from rsi_env.suite.chat import ChatEndpoint, ChatLimits, play_chat


def tool_reply(*calls: tuple[str, dict[str, Any]], tokens: int = 50) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(calls)]}}], "usage": {"total_tokens": tokens}}


def text_reply(text: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


class Scripted:
    """Answers each POST with the next scripted reply (the last repeats): a dict as JSON, an int as that HTTP
    status, ``"hang"`` by never answering."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies, self.requests = replies, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                outer.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                reply = outer.replies[min(len(outer.requests), len(outer.replies)) - 1]
                if reply == "hang":
                    time.sleep(5)
                    return
                if isinstance(reply, int):
                    self.send_error(reply)
                    return
                body = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def serve() -> Iterator[Any]:
    made: list[Scripted] = []

    def start(replies: list[Any]) -> Scripted:
        made.append(Scripted(replies))
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
