"""An OpenAI-compatible chat endpoint that plays each suite instance's reference solution through tool calls.

The ``reference`` agent behind the same HTTP protocol an LLM is reached by: ``rsi-env suite run --agent openai
--base-url URL`` against it must pass every instance, which shows that the chat path (tool schemas, tool calls,
results, submit) carries a solution end to end. It is stateless: each ``POST /v1/chat/completions`` reads the
instance from the conversation's system message (`rsi_env.suite.chat.INSTANCE_LINE`) and how far it has got from
the tool calls the assistant has made; the plan is the instance's reference files (`rsi_env.suite.reference`)
reached by ``edit_file`` calls (`rsi_env.suite.edits.edits_to`, from the workspace a reset with the instance's
seed leaves) and then ``submit``, at most `CALLS_PER_REPLY` calls a reply. A request it cannot serve (no instance
named, an unknown one, no tools offered) is answered 400 with the reason. ``GET /v1/models`` lists its model.

    python -m rsi_env.suite.reference_endpoint --suite rsi-bench-v1 --port 8100
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rsi_env.errors import RsiEnvError, SuiteError
from rsi_env.suite.chat import INSTANCE_LINE
from rsi_env.suite.edits import edits_to
from rsi_env.suite.instance import Suite, load
from rsi_env.suite.reference import reference_files
from rsi_env.wrappers.ladders import rsi_env_of

__all__ = ["CALLS_PER_REPLY", "MODEL", "ReferenceEndpoint", "main", "reference_plan"]

MODEL = "rsi-env-reference"
CALLS_PER_REPLY = 16
_MAX_BODY = 32 << 20


def reference_plan(suite: Suite, instance_id: str) -> list[tuple[str, dict[str, str]]]:
    """The tool calls ``(name, arguments)`` that write ``instance_id``'s reference solution and submit it."""
    inst = suite.get(instance_id)
    env = inst.make_env()
    try:
        env.reset(seed=inst.seed)
        rsi = rsi_env_of(env)
        assert rsi.workspace is not None
        calls: list[tuple[str, dict[str, str]]] = []
        for path, text in reference_files(inst, env).items():
            try:
                current: str | None = rsi.workspace.read(path)
            except RsiEnvError:
                current = None
            calls += [("edit_file", {"path": path, "old": old, "new": new}) for old, new in edits_to(current, text)]
    finally:
        env.close()
    return [*calls, ("submit", {})]


def _instance_named(messages: list[Any]) -> str:
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "system" and isinstance(m.get("content"), str):
            for line in m["content"].splitlines():
                if line.startswith(INSTANCE_LINE):
                    return line[len(INSTANCE_LINE):].strip()
    raise SuiteError(f"no suite instance is named in the system message (a line {INSTANCE_LINE!r}...)")


def _calls_made(messages: list[Any]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


class ReferenceEndpoint:
    """The endpoint on ``host``, served from a thread until `close`; ``url`` is its ``/v1`` base."""

    def __init__(self, suite: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.suite = load(suite)
        self._plans: dict[str, list[tuple[str, dict[str, str]]]] = {}
        self._lock = threading.Lock()
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802  (http.server's name)
                if self.path.rstrip("/") != "/v1/models":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "rsi-env"}]})

            def do_POST(self) -> None:  # noqa: N802
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    size = int(self.headers.get("Content-Length") or 0)
                    if not 0 < size <= _MAX_BODY:
                        raise SuiteError(f"a request body of {size} bytes (at most {_MAX_BODY})")
                    body = json.loads(self.rfile.read(size))
                    if not isinstance(body, dict):
                        raise SuiteError("the request body is not a JSON object")
                    self._send(200, outer.complete(body))
                except (SuiteError, json.JSONDecodeError, ValueError) as exc:
                    self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
                except Exception as exc:  # the endpoint's own failure: named, the server goes on
                    self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})

            def _send(self, status: int, payload: Mapping[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://{host}:{self.server.server_address[1]}/v1"

    def plan(self, instance_id: str) -> list[tuple[str, dict[str, str]]]:
        with self._lock:
            if instance_id not in self._plans:
                self._plans[instance_id] = reference_plan(self.suite, instance_id)
            return self._plans[instance_id]

    def complete(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The chat completion answering ``body``: the next reference calls, or an error naming what is wrong."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise SuiteError("the request has no messages")
        if not body.get("tools"):
            raise SuiteError("this endpoint plays through tool calls: offer the env's tools")
        with self._lock:
            self.requests += 1
        plan = self.plan(_instance_named(messages))
        done = _calls_made(messages)
        batch = plan[done:done + CALLS_PER_REPLY]
        if not batch:
            raise SuiteError(f"the reference's {len(plan)} calls have all been made")
        calls = [{"id": f"call_{done + i}", "type": "function",
                  "function": {"name": name, "arguments": json.dumps(args)}} for i, (name, args) in enumerate(batch)]
        prompt = len(json.dumps(messages)) // 4  # about four characters a token
        completion = len(json.dumps(calls)) // 4
        return {"id": f"chatcmpl-ref-{done}", "object": "chat.completion", "created": int(time.time()),
                "model": str(body.get("model") or MODEL),
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                             "message": {"role": "assistant", "content": None, "tool_calls": calls}}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> ReferenceEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rsi_env.suite.reference_endpoint", description=__doc__.split("\n")[0])
    p.add_argument("--suite", default="rsi-bench-v1", help="suite id or FILE.yaml")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100, help="0: any free port")
    args = p.parse_args(argv)
    endpoint = ReferenceEndpoint(args.suite, args.host, args.port)
    print(f"serving {MODEL} for {endpoint.suite.id} at {endpoint.url}", flush=True)
    try:
        endpoint._thread.join()
    except KeyboardInterrupt:
        endpoint.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
