"""A scripted OpenAI-compatible chat endpoint on loopback, for the tests of the code that talks to one.

It stands in only for the model: each POST to ``/v1/chat/completions`` gets the next scripted reply (the last
repeats): a dict sent as JSON, an int sent as that HTTP status, ``"hang"`` never answered. Other paths get 404.
Every request body is kept in ``requests``.
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


class ScriptedChat:
    """The endpoint, served from a thread until `close`; ``url`` is its ``/v1`` base."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies: list[Any] = replies
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                outer.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
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
