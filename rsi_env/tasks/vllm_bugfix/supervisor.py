"""The trusted side of a VLLMBugFix engine run: it serves the job through the engine's process and times it from outside.

``python -I supervisor.py JOB.json OUT.json``, in a fresh sandbox holding this file, ``isolation.py``
(`rsi_env.sandbox.isolation`), the harness (``run_engine.py``, `rsi_env.tasks.vllm_bugfix.harness`), the
deployment's ``engine_args.yaml`` and the workspace's copies of the shadowed vLLM modules. It imports
neither vLLM nor anything of the workspace's. It reads the job and the secret it signs its report with,
deletes the job and itself, makes itself undumpable (no process of the same user can read or write its
memory) and the subreaper of every process started below it, and only then starts the engine's process:
the harness in ``--serve`` mode, which imports vLLM with the workspace's modules in place of its own.

What is trusted, and what is not:

- **times**: each repetition of a phase is one request to the engine's process. Outside requests its
  whole process tree (every descendant, its own session or not: orphans come back to this subreaper) is
  SIGSTOPped and waited for until every thread is stopped (`isolation.ProcessTree`). A repetition's wall
  seconds run from before the tree is continued until it is sent SIGSTOP again; its CPU seconds are what
  the tree spent meanwhile (`isolation.CpuClock`: utime + stime of every process and thread, the children
  they reaped and those this process reaped, from ``/proc``). Nothing the engine's process does to its own
  clocks, its report or its files moves them, and work deferred past a reply is not done until the next
  request, whose time it is counted in.
- **report**: ``OUT.json`` = ``{"body": JSON text, "mac": HMAC-SHA256}`` under the run's secret
  (`rsi_env.sandbox.signed.signed_body`); the env refuses a report without a valid signature. The body is
  the harness's report as this process received it (the engine's head, each repetition's report under
  ``phases``, the KV blocks free), plus ``measured``: per phase, each repetition's ``cpu_s`` and ``wall_s``
  as this process measured them.
- **not trusted**: everything under ``phases`` and the head (tokens, steps, counters, the configuration, the
  blocks free, the per-step times) is the word of a process that ran the agent's code; the checks hold
  each number to the clean engine's on requests the agent never saw.

Not covered: the CPU of a process of the tree that ends within one sample (50 ms) and that no process
reaps into its times (its parent ignoring SIGCHLD) is not counted; clock ticks are 10 ms a process.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import hmac
import importlib.util
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

HERE = Path.cwd()
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
WORKER = "run_engine.py"
LOG = "engine.log"
SAMPLE_S = 0.05         # the CPU clock samples the tree this often while waiting for a reply
MAX_REPLY_BYTES = 64 << 20


class EngineGone(Exception):
    """The engine's process ended, garbled its reply, or could not be stopped; the message says which."""


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(option, value, 0, 0, 0)


def _isolation() -> Any:
    """``isolation.py`` beside this file, loaded by its path (``-I`` leaves the folder off the import path)."""
    spec = importlib.util.spec_from_file_location("isolation", HERE / "isolation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _log_tail(n: int) -> str:
    with contextlib.suppress(OSError):
        return (HERE / LOG).read_bytes()[-n:].decode(errors="replace")
    return ""


class Engine:
    """The engine's process, the request/reply protocol with it, and its tree stopped between requests."""

    def __init__(self, iso: Any, log: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-s", WORKER, "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        self.tree, self.clock, self.iso = iso.ProcessTree(self.proc.pid, "engine"), iso.CpuClock(), iso
        self.turn = 0   # every request is numbered; a reply must carry its request's number
        self._buf = b""

    def ask(self, cmd: str, **kw: Any) -> tuple[dict[str, Any], float, float]:
        """One request and its reply; the CPU and wall seconds from continuing the tree to stopping it again."""
        assert self.proc.stdin is not None
        self.turn += 1
        text = (json.dumps({"cmd": cmd, "turn": self.turn, **kw}) + "\n").encode()
        self.clock.start()
        t0 = time.perf_counter()
        self.tree.resume()
        try:
            self.proc.stdin.write(text)
            self.proc.stdin.flush()
            line = self._readline()
        except OSError:
            raise EngineGone(f"the engine's process is gone (before {cmd})") from None
        finally:
            self.tree.halt()
            wall = time.perf_counter() - t0
            try:
                self.tree.stop()
            except self.iso.StopFailure as exc:
                raise EngineGone(str(exc)) from None
            cpu = self.clock.read()
        return self._reply(line, cmd), cpu, wall

    def _readline(self) -> bytes:
        """The next reply line (b"" at the process's end), sampling the tree's CPU while waiting."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            if not select.select([fd], [], [], SAMPLE_S)[0]:
                self.clock.sample()
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            self._buf += chunk
            if len(self._buf) > MAX_REPLY_BYTES:
                raise EngineGone("the engine's process flooded the reply channel")
        line, sep, self._buf = self._buf.partition(b"\n")
        return line + sep

    def _reply(self, line: bytes, cmd: str) -> dict[str, Any]:
        if not line:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            raise EngineGone(f"the engine's process ended during {cmd} (exit code {self.proc.returncode}); its "
                             f"log ends:\n{_log_tail(1500)}")
        try:
            reply = json.loads(line)
        except ValueError:
            raise EngineGone(f"the engine's process sent a garbled reply during {cmd}: {line[:200]!r}") from None
        if not isinstance(reply, dict) or reply.get("turn") != self.turn:
            raise EngineGone(f"the engine's process sent a reply out of turn during {cmd}: {line[:200]!r}")
        return reply

    def close(self) -> None:
        self.tree.kill()
        self.proc.kill()
        self.proc.wait()


def serve(job: dict[str, Any], engine: Engine) -> dict[str, Any]:
    """The job's report: the engine's head, its repetitions' reports as received, and ``measured`` (this process's
    times of each repetition); what failed is ``error``, after what ran before it."""
    out: dict[str, Any] = {"phases": {}, "measured": {}}
    try:
        head, _, _ = engine.ask("start", job=job)
        out.update({k: head[k] for k in ("vllm_version", "device", "startup_s", "resolved", "error") if k in head})
        if "error" not in out and _phases(job, engine, out):
            end, _, _ = engine.ask("finish")
            out.update({k: end[k] for k in ("free_blocks", "num_blocks") if k in end})
    except EngineGone as exc:
        out["error"] = {"stage": "supervisor", "type": "EngineGone", "message": str(exc), "traceback": ""}
    return out


def _phases(job: dict[str, Any], engine: Engine, out: dict[str, Any]) -> bool:
    """Every repetition of every phase, one request each, into ``out``; False where one failed (its ``error`` set)."""
    for phase in job["phases"]:
        reps: list[Any] = []
        measured: list[dict[str, float]] = []
        out["phases"][phase["name"]], out["measured"][phase["name"]] = reps, measured
        for k in range(len(phase["reps"])):
            reply, cpu, wall = engine.ask("phase", phase=phase["name"], rep=k)
            if "error" in reply:
                out["error"] = reply["error"]
                return False
            reps.append(reply.get("rep"))
            measured.append({"cpu_s": cpu, "wall_s": wall})
            if isinstance(reps[-1], dict) and reps[-1].get("stalled"):
                break
    return True


def main(argv: list[str]) -> int:
    job_path, out_path = Path(argv[1]), Path(argv[2])
    job = json.loads(job_path.read_text())
    job_path.unlink()
    secret = bytes.fromhex(job.pop("secret"))
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    iso = _isolation()
    Path(__file__).unlink(missing_ok=True)
    log = os.open(HERE / LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    engine = Engine(iso, log)
    try:
        body = serve(job, engine)
    finally:
        engine.close()
        os.close(log)
    text = json.dumps(body, sort_keys=True)
    with contextlib.suppress(OSError):
        out_path.unlink()
    out_path.write_text(json.dumps({"body": text, "mac": hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()}))
    print(_log_tail(4000), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
