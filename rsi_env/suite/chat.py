"""A chat agent: any OpenAI-compatible chat-completions endpoint plays an env through its tools.

`ChatEndpoint` posts ``{base_url}/chat/completions`` (stdlib HTTP, a timeout on every request) with the env's
tools (`rsi_env.wrappers.tool_calls.tool_schemas`). `play_chat` runs one episode: the system message is the
task (its ``TASK.md``), the first user message the reset's observation; each tool call the model makes is one
env step, and the observation's text goes back as that call's tool result. An endpoint that refuses ``tools``
(HTTP 400) or answers in plain text is played in the text syntax instead (`TextActions`: ``set …``, ``bench``,
``submit``; the reply's first fenced block, else the reply). A malformed call or text comes back to the model as
the error naming the problem. The episode is bounded by requests, tokens (the endpoint's ``usage``, else a
character estimate) and wall seconds; an episode the model does not submit within them has not passed. An
endpoint that cannot be reached, or answers with no choice, ends the episode there, with the reason.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from rsi_env.errors import EndpointError, RsiEnvError
from rsi_env.wrappers.ladders import rsi_env_of
from rsi_env.wrappers.text_actions import TEXT_SYNTAX, parse_text_action
from rsi_env.wrappers.tool_calls import parse_tool_call, tool_schemas

__all__ = ["INSTANCE_LINE", "ChatEndpoint", "ChatEpisode", "ChatLimits", "ChatReply", "extract_action", "play_chat"]

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class ChatReply:
    """The first choice of a chat completion: its text, its tool calls (``{"id", "name", "arguments"}``), tokens."""

    content: str
    tool_calls: list[dict[str, Any]]
    tokens: int


def _said(exc: urllib.error.HTTPError) -> str:
    """What an endpoint's error body says (OpenAI's ``{"error": {"message"}}``, else its first line), or nothing."""
    try:
        body = exc.read(4096).decode(errors="replace")
    except Exception:
        return ""
    try:
        message = json.loads(body)["error"]["message"]
    except (json.JSONDecodeError, KeyError, TypeError):
        message = body.strip().splitlines()[0] if body.strip() else ""
    return f": {str(message)[:300]}" if message else ""


class ChatEndpoint:
    """``POST {base_url}/chat/completions`` with a bounded timeout."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 120.0,
                 max_tokens: int = 512, temperature: float = 0.0) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key, self.timeout_s = model, api_key, timeout_s
        self.max_tokens, self.temperature = max_tokens, temperature
        self.requests = 0

    def chat(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> ChatReply:
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), "max_tokens": self.max_tokens,
                                "temperature": self.temperature}
        if tools:
            body["tools"] = tools
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        self.requests += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read(8 << 20)
        except urllib.error.HTTPError as exc:
            raise EndpointError(f"chat endpoint {self.url}: HTTP {exc.code} {exc.reason}{_said(exc)}",
                                status=exc.code) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise EndpointError(f"chat endpoint {self.url}: {exc}") from None
        try:
            payload = json.loads(raw.decode(errors="replace"))
            message = payload["choices"][0]["message"]
            calls = [{"id": str(c.get("id") or f"call_{i}"), "name": c["function"]["name"],
                      "arguments": c["function"].get("arguments")}
                     for i, c in enumerate(message.get("tool_calls") or [])]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            raise EndpointError(f"chat endpoint {self.url} answered something that is not a chat completion "
                                "(no choices[0].message, or malformed tool_calls)") from None
        content = str(message.get("content") or "")
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        tokens = usage.get("total_tokens")
        if not isinstance(tokens, int) or isinstance(tokens, bool):
            tokens = (len(json.dumps(body)) + len(raw)) // 4  # no usage reported: about four characters a token
        return ChatReply(content, calls, tokens)

    def complete(self, messages: Sequence[dict[str, Any]]) -> str:
        """The first choice's text, no tools offered."""
        return self.chat(messages).content


def extract_action(reply: str) -> str:
    """The action in a model's reply: its first fenced code block, else the reply itself, stripped."""
    m = _FENCE.search(reply)
    return (m.group(1) if m else reply).strip()


@dataclass(frozen=True)
class ChatLimits:
    """What one episode may spend: endpoint requests, tokens and wall seconds."""

    max_requests: int = 40
    max_tokens: int = 200_000
    max_seconds: float = 1800.0


@dataclass
class ChatEpisode:
    """One played episode: how it ended, its reward, and the conversation (messages with their tool calls)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    mode: str = "tools"
    requests: int = 0
    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0
    reward: float = 0.0
    submitted: bool = False
    passed: bool = False
    ended_by: str = ""


INSTANCE_LINE = "Suite instance: "  # how the system message names a suite instance (the reference endpoint reads it)


def _system(env: gym.Env[Any, Any], mode: str, instance: str | None = None) -> str:
    rsi = rsi_env_of(env)
    task = rsi.workspace.read("TASK.md") if rsi.workspace is not None else rsi.task.summary
    how = ("Act with the tools; each call's result is what the environment shows." if mode == "tools" else
           f"Reply with exactly one action.\n{TEXT_SYNTAX}")
    named = f"{INSTANCE_LINE}{instance}\n" if instance else ""
    return (f"You are an LLM-inference engineer.\n{named}\n{task}\n\n{how}\nEach measurement spends budget; "
            "submit when done (an episode that is not submitted has not passed).")


def play_chat(env: gym.Env[Any, Any], endpoint: ChatEndpoint, *, seed: int | None = None,
              limits: ChatLimits = ChatLimits(), instance: str | None = None) -> ChatEpisode:
    """One episode of ``env`` (an `RsiEnv`, wrapped or not) played by ``endpoint``'s model.

    ``instance``: the suite instance the episode plays, named in the system message (a public id: the
    instance's reference solution stays hidden).
    """
    t0 = time.monotonic()
    ep = ChatEpisode()
    obs, _ = env.reset(seed=seed)
    tools = tool_schemas(env)
    ep.messages = [{"role": "system", "content": _system(env, "tools", instance)},
                   {"role": "user", "content": str(obs["text"])}]

    def act(action: dict[str, Any]) -> tuple[str, bool]:
        nonlocal obs
        obs, reward, terminated, truncated, info = env.step(action)
        ep.steps += 1
        ep.reward = float(reward)
        if terminated and info.get("verdict") is not None:
            ep.submitted, ep.passed = True, bool(info["verdict"].get("passed"))
        return str(obs["text"]), bool(terminated or truncated)

    while not ep.ended_by:
        if ep.requests >= limits.max_requests or ep.tokens >= limits.max_tokens:
            ep.ended_by = "max_requests" if ep.requests >= limits.max_requests else "max_tokens"
            break
        if time.monotonic() - t0 > limits.max_seconds:
            ep.ended_by = "max_seconds"
            break
        ep.requests += 1
        try:
            reply = endpoint.chat(ep.messages, tools if ep.mode == "tools" else None)
        except EndpointError as exc:
            if ep.mode == "tools" and exc.status == 400 and ep.requests == 1:  # no tool calling: the text syntax
                ep.mode = "text"
                ep.messages[0]["content"] = _system(env, "text", instance)
                continue
            ep.ended_by = f"endpoint: {exc}"
            break
        ep.tokens += reply.tokens
        done = False
        if reply.tool_calls and ep.mode == "tools":
            ep.messages.append({"role": "assistant", "content": reply.content or None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {
                    "name": c["name"], "arguments": c["arguments"] if isinstance(c["arguments"], str)
                    else json.dumps(c["arguments"])}} for c in reply.tool_calls]})
            for c in reply.tool_calls:
                if done:
                    result = "not run: the episode had ended"
                else:
                    try:
                        action = parse_tool_call({"name": c["name"], "arguments": c["arguments"]}, env)
                    except RsiEnvError as exc:
                        result = f"tool call refused: {exc}"
                    else:
                        result, done = act(action)
                ep.messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
        else:
            ep.messages.append({"role": "assistant", "content": reply.content})
            try:
                action = parse_text_action(extract_action(reply.content), rsi_env_of(env))
            except RsiEnvError as exc:
                result = f"{exc}\n" + ("Call one of the tools." if ep.mode == "tools" else TEXT_SYNTAX)
            else:
                result, done = act(action)
            ep.messages.append({"role": "user", "content": result})
        if done:
            ep.ended_by = "submitted" if ep.submitted else "episode ended"
    ep.seconds = time.monotonic() - t0
    return ep
