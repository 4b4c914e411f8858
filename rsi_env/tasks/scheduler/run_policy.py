"""Run inside a fresh sandbox (by `rsi_env.tasks.scheduler.sandboxed`): ``policy.py``'s keys, one request at a time.

``python -I run_policy.py policy.py REQUESTS.json KEYS.json`` is the **driver**, the trusted part;
standard library only, copied into the sandbox beside ``policy.py`` and `rsi_env.tasks.scheduler.policy_server`,
away from the rsi_env package. It reads REQUESTS.json (``{"secret": hex, "tables": [[request, ...],
...]}``, one table per workload, unnamed), deletes it and makes itself undumpable (so that no
process of the same user can read its memory or its descriptors) before any of the agent's code
runs. Then each table gets a **server** of its own (``python -I policy_server.py policy.py``), a
fresh process that runs ``policy.py``: the driver sends it one request at a time, only the fields the
contract names (`FIELDS`), and reads back that request's two keys before it sends the next, checking
them (one reply per request, naming the request, two finite numbers). The servers are started
together, so that their start-ups overlap, and each is stopped (its whole process group killed) when
its table is done. So no policy sees a workload's name, a table, a request ahead of its turn, or
another workload's requests in its memory. KEYS.json is ``{"body": text, "mac": hex}``: the body
(``{"keys": [{"waiting": [...], "victim": [...]}, ...]}`` in the tables' order, or ``{"error":
text}``) and its HMAC-SHA256 under the request's secret; the env refuses a report without a valid
signature, since the policy's processes can write files but not sign them.

Known limit: the servers share the sandbox's files, so a policy can leave itself notes (how many
requests it has seen, in which order) and tell workloads apart by them. That buys it nothing: every
check runs on every workload, scored and hidden (`rsi_env.tasks.scheduler.checks`).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import hmac
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

FIELDS = ("id", "arrival_s", "prompt_tokens", "prefix_group", "prefix_tokens")  # = policy_hook.REQUEST_FIELDS
KEYS = ("waiting_key", "victim_key")
SERVER = Path(__file__).resolve().with_name("policy_server.py")
PR_SET_DUMPABLE = 4
MAX_REPLY = 8192  # bytes in one reply line (an escaped traceback fits)


class PolicyFailure(Exception):
    """policy.py failed, or broke the protocol; the message is for the agent."""


def _undumpable() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _on_one_cpu(pid: int) -> None:
    """Run ``pid`` (0: this process) on one CPU, the driver's: a request and its reply then change hands on
    one core instead of waking another, which shortens a round trip on a busy machine."""
    with contextlib.suppress(OSError, AttributeError, ValueError):
        os.sched_setaffinity(pid, {min(os.sched_getaffinity(0))})


def _read_line(fd: int) -> bytes:
    """Bytes from ``fd`` up to a newline (the server writes one line and waits), `MAX_REPLY` at most."""
    buf = b""
    while not buf.endswith(b"\n") and len(buf) < MAX_REPLY:
        chunk = os.read(fd, MAX_REPLY - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def _parse_reply(line: bytes, rid: int) -> tuple[float, float]:
    """The two keys of request ``rid`` in ``line`` (``id waiting victim``), or `PolicyFailure` saying why not."""
    if not line.endswith(b"\n"):
        raise PolicyFailure(f"policy.py's process exited before answering request {rid}" if len(line) < MAX_REPLY
                            else f"policy.py's answer to request {rid} is longer than {MAX_REPLY} bytes")
    if line.count(b"\n") > 1:
        raise PolicyFailure(f"policy.py's process answered request {rid} more than once")
    text = line.decode("ascii", errors="replace").strip()
    if text.startswith("!"):
        raise PolicyFailure(text[1:].strip().encode("ascii", errors="replace").decode("unicode_escape"))
    parts = text.split()
    if len(parts) != 3 or parts[0] != str(rid):
        raise PolicyFailure(f"policy.py's answer to request {rid} is not that request's keys, in turn")
    keys = []
    for name, part in zip(KEYS, parts[1:], strict=True):
        try:
            v = float(part)
        except ValueError:
            v = math.nan
        if not math.isfinite(v):
            raise PolicyFailure(f"every {name} must be a finite number (request {rid}: {part[:40]})")
        keys.append(v)
    return keys[0], keys[1]


class Server:
    """A fresh process of the agent's that runs ``policy.py`` and answers one request at a time."""

    def __init__(self, agent_file: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-I", str(SERVER), agent_file], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0, start_new_session=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.tx, self.rx = self.proc.stdin.fileno(), self.proc.stdout.fileno()

    def keys(self, request: dict[str, Any]) -> tuple[float, float]:
        """``request``'s two keys: its contract's fields sent, the reply read back and checked."""
        data = (" ".join(f"{f}={request[f]!r}" for f in FIELDS) + "\n").encode()
        with contextlib.suppress(BrokenPipeError):  # it exited: reading its reply says so
            while data:
                data = data[os.write(self.tx, data):]
        return _parse_reply(_read_line(self.rx), int(request["id"]))

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
    _on_one_cpu(server.proc.pid)
    try:
        pairs = [server.keys(r) for r in table]
    finally:
        server.stop()
    return {"waiting": [w for w, _ in pairs], "victim": [v for _, v in pairs]}


def main(argv: list[str]) -> int:
    agent_file, src, dst = argv[1], Path(argv[2]), Path(argv[3])
    request = json.loads(src.read_text())
    src.unlink()
    _undumpable()
    secret = bytes.fromhex(request["secret"])
    tables = request["tables"]
    servers = [Server(agent_file) for _ in tables]  # started together, so that their start-ups overlap
    _on_one_cpu(0)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv))
