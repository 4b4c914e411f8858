"""A scripted OpenAI-compatible chat endpoint on loopback, for the tests of the code that talks to one.

It stands in only for the model: each POST to ``/v1/chat/completions`` gets the next scripted reply (the last
repeats): a dict sent as JSON (as server-sent events, the chunks a streamed completion arrives in, where the
request asks ``"stream": true``), an int sent as that HTTP status, ``"hang"`` never answered, a callable called
with the request's body for one of those. Other paths get 404. Every request body is kept in ``requests``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def text_reply(text: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


def tool_reply(*calls: tuple[str, dict[str, Any]], tokens: int = 50) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(calls)]}}], "usage": {"total_tokens": tokens}}


def stream_events(reply: dict[str, Any]) -> bytes:
    """A chat completion as a streamed one arrives: its message in one chunk, the finish reason, the usage, [DONE]."""
    message = reply["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if calls:
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": "scripted"}
    tokens = int((reply.get("usage") or {}).get("total_tokens", 0))
    chunks = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
              {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]},
              {**base, "choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": tokens,
                                                "total_tokens": tokens}}]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


class ScriptedChat:
    """The endpoint, served from a thread until `close`; ``url`` is its ``/v1`` base."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies: list[Any] = replies
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                reply = outer.replies[min(len(outer.requests), len(outer.replies)) - 1]
                if callable(reply):
                    reply = reply(body)
                if reply == "hang":
                    time.sleep(5)
                    return
                if isinstance(reply, int):
                    self.send_error(reply)
                    return
                streamed = isinstance(body, dict) and body.get("stream") is True
                data = stream_events(reply) if streamed else json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream" if streamed else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
