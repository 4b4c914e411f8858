"""``rsi-env serve``: `RsiOpenEnv` behind OpenEnv's HTTP and WebSocket server, one session per client, many at once.

``rsi-env serve --port P [--host H] [--suite S] [--max-sessions N] [--idle-timeout S]`` serves OpenEnv's routes:
``/ws`` (a session per connection: reset, step, state), ``/mcp`` (MCP JSON-RPC: ``tools/list`` and ``tools/call``
on a session, ``openenv/session/create`` and ``close``), the stateless ``/reset``, ``/step`` and ``/state``,
``/schema``, ``/metadata``, ``/health`` and the Task API (``/rsi-env/splits``, ``/rsi-env/tasks``, ...), and one of
its own, ``/sessions``: how many sessions are open and the cap.

Every session has an env, workspace and sandbox of its own; it is closed when its client goes, or when it has been
idle longer than ``--idle-timeout`` (OpenEnv's reaper; an MCP session whose client vanished is freed so). Beyond
``--max-sessions`` a new client is refused with OpenEnv's capacity error ("Server at capacity: N/N sessions
active"). The module imports OpenEnv only when a server is built, so that the CLI stays light; ``app`` (for
``uvicorn rsi_env.integrations.openenv_server:app`` and ``openenv.yaml``) is built on first use, configured by
``RSI_ENV_SUITE``, ``RSI_ENV_MAX_SESSIONS`` and ``RSI_ENV_IDLE_TIMEOUT_S``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Any

__all__ = ["DEFAULT_IDLE_TIMEOUT_S", "DEFAULT_MAX_SESSIONS", "DEFAULT_SUITE", "ENV_NAME", "add_serve_parser", "build_app",
           "serve", "served_suite"]

ENV_NAME = "rsi-env"
DEFAULT_MAX_SESSIONS = 16
# Longer than any one step (a real-tier bench takes minutes) and than a trainer's pause between steps.
DEFAULT_IDLE_TIMEOUT_S = 1800.0
DEFAULT_SUITE = "rsi-bench-v1"


def served_suite(suite: str | None) -> str | None:
    """The suite a server plays: ``suite`` checked now (a bad one fails at start), or the shipped default if any."""
    from rsi_env.suite.instance import list_suites, load

    if suite is None:
        if DEFAULT_SUITE not in list_suites():
            print(f"rsi-env serve: {DEFAULT_SUITE} is not shipped in this install: reset(instance=...) is refused; "
                  "give --suite FILE.yaml, or reset(env_id=...)", file=sys.stderr)
            return None
        suite = DEFAULT_SUITE
    load(suite)
    return suite


def build_app(suite: str | None = None, max_sessions: int = DEFAULT_MAX_SESSIONS,
              idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S) -> Any:
    """The FastAPI app serving `RsiOpenEnv` sessions (``suite`` None: the shipped rsi-bench-v1, if there is one)."""
    from fastapi import FastAPI
    from openenv.core.env_server.http_server import HTTPEnvServer
    from openenv.core.env_server.types import ConcurrencyConfig, ServerMode

    from rsi_env import __version__
    from rsi_env.errors import RsiEnvError
    from rsi_env.integrations.openenv_env import RsiOpenEnv
    from rsi_env.integrations.openenv_models import RsiAction, RsiObservation, RsiState

    if max_sessions < 1:
        raise RsiEnvError(f"--max-sessions must be at least 1, got {max_sessions}")
    if not idle_timeout_s > 0:
        raise RsiEnvError(f"--idle-timeout must be a positive number of seconds, got {idle_timeout_s}")
    server = HTTPEnvServer(
        functools.partial(RsiOpenEnv, suite=served_suite(suite)), RsiAction, RsiObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s),
        env_name=ENV_NAME, state_cls=RsiState)
    app = FastAPI(title="rsi-env (OpenEnv)", version=__version__,
                  description="rsi-env's environments over OpenEnv: /ws sessions, /mcp tools, the Task API.")
    server.register_routes(app, mode=ServerMode.SIMULATION)

    @app.get("/sessions", tags=["Health"])
    def sessions() -> dict[str, int]:
        """The sessions open now and the cap."""
        status = server.get_capacity_status()
        return {"active": status.active_sessions, "max": status.max_sessions}

    return app


def serve(host: str, port: int, suite: str | None = None, max_sessions: int = DEFAULT_MAX_SESSIONS,
          idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S, log_level: str = "warning") -> None:
    """Serve until interrupted."""
    import uvicorn

    app = build_app(suite, max_sessions, idle_timeout_s)
    print(f"rsi-env serve: OpenEnv on http://{host}:{port} (ws://{host}:{port}/ws; at most {max_sessions} sessions, "
          f"closed after {idle_timeout_s:g} s idle)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        import openenv  # noqa: F401
    except ImportError:
        from rsi_env.errors import RsiEnvError

        raise RsiEnvError("rsi-env serve needs OpenEnv: pip install 'rsi-env[openenv]'") from None
    serve(args.host, args.port, args.suite, args.max_sessions, args.idle_timeout, args.log_level)
    return 0


def add_serve_parser(sub: Any) -> None:
    """``rsi-env serve`` on the CLI's subparsers."""
    s = sub.add_parser("serve", help="serve the environments over OpenEnv (HTTP, WebSocket, MCP): a session per client")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    s.add_argument("--suite", default=None, help=f"suite id or FILE.yaml that reset(instance=...) plays (default: "
                                                 f"{DEFAULT_SUITE} where shipped)")
    s.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS, help="sessions open at once")
    s.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT_S,
                   help="seconds without a message after which a session is closed")
    s.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    s.set_defaults(func=_cmd_serve)


def __getattr__(name: str) -> Any:
    if name == "app":  # uvicorn's ``module:app``, configured from the environment
        app = build_app(os.environ.get("RSI_ENV_SUITE") or None,
                        int(os.environ.get("RSI_ENV_MAX_SESSIONS", DEFAULT_MAX_SESSIONS)),
                        float(os.environ.get("RSI_ENV_IDLE_TIMEOUT_S", DEFAULT_IDLE_TIMEOUT_S)))
        globals()["app"] = app
        return app
    raise AttributeError(name)
