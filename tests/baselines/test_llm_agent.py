"""The LLM harness against a scripted OpenAI-compatible endpoint served on 127.0.0.1 for the test."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from baselines.llm_agent import ChatEndpoint, EndpointError, extract_action, run_llm


class _Scripted(BaseHTTPRequestHandler):
    """Answers each chat completion with the next scripted reply; records the requests it saw."""

    replies: list[str] = []
    seen: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802  (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        if self.path != "/v1/chat/completions":
            self.send_response(404)
            self.end_headers()
            return
        k = len(type(self).seen) - 1
        reply = type(self).replies[min(k, len(type(self).replies) - 1)]
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture()
def server():
    _Scripted.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_agent_plays_an_episode_through_text_actions(server):
    _Scripted.replies = [
        "Let me raise the token budget first.\n```\nset max_num_batched_tokens 16384\n```",
        "set max_num_seqs 512",
        "I will just do something odd",            # refused with the syntax, the episode goes on
        "```text\nbench\n```",
        "submit",
    ]
    endpoint = ChatEndpoint(server, "scripted", api_key="k", timeout_s=10)
    [result] = run_llm(endpoint, "RSI/Batching-v0", [1000], budget=10, max_turns=8)
    assert endpoint.requests == 5 and len(_Scripted.seen) == 5
    assert result.config.get("max_num_batched_tokens") == 16384
    assert result.measurements == 3 and result.seed == 1000
    first, third = _Scripted.seen[0]["messages"], _Scripted.seen[3]["messages"]
    assert first[0]["role"] == "system" and "max_num_seqs" in first[0]["content"] and "SEARCH" in first[0]["content"]
    assert "error: unknown action" in third[-1]["content"]  # the refusal is what the model sees next
    assert _Scripted.seen[0]["model"] == "scripted"


def test_turns_are_bounded(server):
    _Scripted.replies = ["run true"]  # never measures, never submits
    endpoint = ChatEndpoint(server, "scripted", timeout_s=10)
    [result] = run_llm(endpoint, "RSI/Batching-v0", [1000], budget=5, max_turns=3)
    assert endpoint.requests == 3 and result.measurements == 0


def test_endpoint_errors_are_named(server):
    with pytest.raises(EndpointError, match="chat endpoint"):
        ChatEndpoint(server.replace("/v1", "/nope"), "m", timeout_s=5).complete([{"role": "user", "content": "x"}])
    with pytest.raises(EndpointError, match="127.0.0.1:9"):
        ChatEndpoint("http://127.0.0.1:9/v1", "m", timeout_s=2).complete([{"role": "user", "content": "x"}])


def test_extract_action():
    assert extract_action("```\nbench\n```") == "bench"
    assert extract_action("thinking...\n```bash\nrun ls\n```\nmore") == "run ls"
    assert extract_action("  submit \n") == "submit"
