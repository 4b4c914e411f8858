"""The LLM harness against a scripted OpenAI-compatible endpoint served on 127.0.0.1 for the test."""

from __future__ import annotations

import pytest

from baselines.llm_agent import ChatEndpoint, EndpointError, extract_action, run_llm
from tests.chat_server import ScriptedChat, text_reply


@pytest.fixture()
def server():
    srv = ScriptedChat([])
    yield srv
    srv.close()


def test_agent_plays_an_episode_through_text_actions(server):
    server.replies = [text_reply(r) for r in (
        "Let me raise the token budget first.\n```\nset max_num_batched_tokens 16384\n```",
        "set max_num_seqs 512",
        "I will just do something odd",            # refused with the syntax, the episode goes on
        "```text\nbench\n```",
        "submit",
    )]
    endpoint = ChatEndpoint(server.url, "scripted", api_key="k", timeout_s=10)
    [result] = run_llm(endpoint, "RSI/Batching-v0", [1000], budget=10, max_turns=8)
    assert endpoint.requests == 5 and len(server.requests) == 5
    assert result.config.get("max_num_batched_tokens") == 16384
    assert result.measurements == 3 and result.seed == 1000
    first, third = server.requests[0]["messages"], server.requests[3]["messages"]
    assert first[0]["role"] == "system" and "max_num_seqs" in first[0]["content"] and "SEARCH" in first[0]["content"]
    assert "error: unknown action" in third[-1]["content"]  # the refusal is what the model sees next
    assert server.requests[0]["model"] == "scripted"


def test_turns_are_bounded(server):
    server.replies = [text_reply("run true")]  # never measures, never submits
    endpoint = ChatEndpoint(server.url, "scripted", timeout_s=10)
    [result] = run_llm(endpoint, "RSI/Batching-v0", [1000], budget=5, max_turns=3)
    assert endpoint.requests == 3 and result.measurements == 0


def test_endpoint_errors_are_named(server):
    with pytest.raises(EndpointError, match="chat endpoint"):
        ChatEndpoint(server.url.replace("/v1", "/nope"), "m", timeout_s=5).complete([{"role": "user", "content": "x"}])
    with pytest.raises(EndpointError, match="127.0.0.1:9"):
        ChatEndpoint("http://127.0.0.1:9/v1", "m", timeout_s=2).complete([{"role": "user", "content": "x"}])


def test_extract_action():
    assert extract_action("```\nbench\n```") == "bench"
    assert extract_action("thinking...\n```bash\nrun ls\n```\nmore") == "run ls"
    assert extract_action("  submit \n") == "submit"
