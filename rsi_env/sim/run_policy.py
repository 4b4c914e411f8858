"""Run inside a fresh sandbox (by `rsi_env.sim.sandboxed_policy`): ``policy.py``'s keys, one request at a time.

Standard library only: it is copied into the sandbox beside ``policy.py``, away from the rsi_env
package. It plays two parts, each in a process of its own.

``python -I run_policy.py policy.py REQUESTS.json KEYS.json`` is the **driver**, the trusted part. It
reads REQUESTS.json (``{"secret": hex, "tables": [[request, ...], ...]}``, one table per workload,
unnamed), deletes it and makes itself undumpable (so that no process of the same user can read its
memory or its descriptors) before any of the agent's code runs. Then each table gets a **server** of
its own (``python -I run_policy.py --serve policy.py``), a fresh process that imports ``policy.py``:
the driver sends it one request at a time, only the fields the contract names (`FIELDS`), and reads
back that request's two keys before it sends the next, checking them (one reply per request, naming
the request, two finite numbers). The servers are started together, so that their start-ups
overlap, and each is stopped (its whole process group killed) when its table is done. So no policy
sees a workload's name, a table, a request ahead of its turn, or another workload's requests in its
memory. KEYS.json is ``{"body": text, "mac": hex}``: the body (``{"keys": [{"waiting": [...],
"victim": [...]}, ...]}`` in the tables' order, or ``{"error": text}``) and its HMAC-SHA256 under the
request's secret; the env refuses a report without a valid signature, since the policy's processes
can write files but not sign them.

Known limit: the servers share the sandbox's files, so a policy can leave itself notes (how many
requests it has seen, in which order) and tell workloads apart by them. That buys it nothing: every
check runs on every workload, scored and hidden (`rsi_env.sim.policy_checks`).

The server is the agent's process: nothing in it is trusted. It moves the pipes it talks over off its
standard input and output first, so that ``policy.py`` reads nothing from its standard input and its
prints go to standard error (the run's output, shown on failure) rather than into the replies.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import hmac
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

FIELDS = ("id", "arrival_s", "prompt_tokens", "prefix_group", "prefix_tokens")  # = policy_hook.REQUEST_FIELDS
FUNCTIONS = {"waiting_key": "waiting_key(request) -> float", "victim_key": "victim_key(request) -> float"}
PR_SET_DUMPABLE = 4
MAX_REPLY = 65536  # bytes in one reply line (a traceback fits)


class PolicyFailure(Exception):
    """policy.py failed, or broke the protocol; the message is for the agent."""


# ---- the server: the agent's process ----------------------------------------------------------------
def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path.resolve())
    if spec is None or spec.loader is None:
        raise ImportError(f"{path.name} not found in the workspace")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, call in FUNCTIONS.items():
        if not callable(getattr(mod, name, None)):
            raise AttributeError(f"{path.name} must define a function {call}")
    return mod


def _protocol_fds() -> tuple[int, int]:
    """The pipes to the driver, moved off fds 0 and 1; then stdin reads nothing and stdout goes to stderr."""
    rx, tx = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return rx, tx


def read_line(fd: int, limit: int) -> bytes:
    """Bytes from ``fd`` up to a newline (the other side writes one line and waits), ``limit`` at most."""
    buf = b""
    while not buf.endswith(b"\n") and len(buf) < limit:
        chunk = os.read(fd, limit - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def write_line(fd: int, obj: Any) -> None:
    data = json.dumps(obj).encode() + b"\n"
    while data:
        data = data[os.write(fd, data):]


def serve(agent_file: Path) -> int:
    rx, tx = _protocol_fds()
    try:
        policy = _load(agent_file)
        while line := read_line(rx, MAX_REPLY):
            req = json.loads(line)
            r = SimpleNamespace(**req)
            write_line(tx, [req["id"], float(policy.waiting_key(r)), float(policy.victim_key(r))])
    except Exception as exc:  # the agent's own failure, reported to the agent
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
        write_line(tx, {"error": "".join(tb)[-1500:]})
    return 0


# ---- the driver: trusted ----------------------------------------------------------------------------
def _undumpable() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _refuse_constant(name: str) -> float:
    raise PolicyFailure(f"every key must be a finite number, got {name}")


def _parse_reply(line: bytes, rid: int) -> tuple[float, float]:
    """The two keys of request ``rid`` in ``line``, or `PolicyFailure` saying what is wrong with it."""
    if not line.endswith(b"\n"):
        raise PolicyFailure(f"policy.py's process exited before answering request {rid}" if len(line) < MAX_REPLY
                            else f"policy.py's answer to request {rid} is longer than {MAX_REPLY} bytes")
    if line.count(b"\n") > 1:
        raise PolicyFailure(f"policy.py's process answered request {rid} more than once")
    try:
        reply = json.loads(line, parse_constant=_refuse_constant)
    except ValueError:
        raise PolicyFailure(f"policy.py's answer to request {rid} is not a reply of this harness") from None
    if isinstance(reply, dict) and isinstance(reply.get("error"), str):
        raise PolicyFailure(reply["error"])
    if not (isinstance(reply, list) and len(reply) == 3 and type(reply[0]) is int and reply[0] == rid):
        raise PolicyFailure(f"policy.py's answer to request {rid} is not that request's keys, in turn")
    for name, v in zip(FUNCTIONS, reply[1:], strict=True):
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)):
            raise PolicyFailure(f"every {name} must be a finite number (request {rid}: {v!r})")
    return float(reply[1]), float(reply[2])


class Server:
    """A fresh process of the agent's that imports ``policy.py`` and answers one request at a time."""

    def __init__(self, agent_file: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-I", str(Path(__file__).resolve()), "--serve", agent_file],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, start_new_session=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.tx, self.rx = self.proc.stdin.fileno(), self.proc.stdout.fileno()

    def keys(self, request: dict[str, Any]) -> tuple[float, float]:
        """``request``'s two keys: its contract's fields sent, the reply read back and checked."""
        with contextlib.suppress(BrokenPipeError):  # it exited: reading its reply says so
            write_line(self.tx, {f: request[f] for f in FIELDS})
        return _parse_reply(read_line(self.rx, MAX_REPLY), int(request["id"]))

    def stop(self) -> None:
        """Kill the process and its whole group (whatever it started that stayed in it)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()


def _table_keys(server: Server, table: list[dict[str, Any]]) -> dict[str, list[float]]:
    """One table's keys, asked one request at a time, in arrival order; the server stopped afterwards."""
    try:
        pairs = [server.keys(r) for r in table]
    finally:
        server.stop()
    return {"waiting": [w for w, _ in pairs], "victim": [v for _, v in pairs]}


def drive(agent_file: str, src: Path, dst: Path) -> int:
    request = json.loads(src.read_text())
    src.unlink()
    _undumpable()
    secret = bytes.fromhex(request["secret"])
    tables = request["tables"]
    servers = [Server(agent_file) for _ in tables]  # started together, so their start-ups overlap
    try:
        body: dict[str, Any] = {"keys": [_table_keys(s, t) for s, t in zip(servers, tables, strict=True)]}
    except PolicyFailure as exc:
        body = {"error": str(exc)}
    finally:
        for s in servers:
            s.stop()
    text = json.dumps(body)
    mac = hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()
    with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
        dst.unlink()  # whatever the policy's processes left there
    dst.write_text(json.dumps({"body": text, "mac": mac}))
    return 0


def main(argv: list[str]) -> int:
    if argv[1] == "--serve":
        return serve(Path(argv[2]))
    return drive(argv[1], Path(argv[2]), Path(argv[3]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
