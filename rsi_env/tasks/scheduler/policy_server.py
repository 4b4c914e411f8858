"""The agent's side of a scheduling policy's keys: ``python -I policy_server.py policy.py``, started by the driver.

Standard library only, and as little of it as will do, since a fresh one starts per workload
(`rsi_env.tasks.scheduler.run_policy`, the trusted driver, starts it and checks every reply). Nothing here is
trusted: this is the agent's process. It moves the pipes it talks over off its standard input and
output first, so that ``policy.py`` reads nothing from its standard input and its prints go to
standard error (the run's output) rather than into the replies; then it runs ``policy.py`` and
answers the driver, one line per request:

    driver:  id=3 arrival_s=0.25 prompt_tokens=812 prefix_group=-1 prefix_tokens=0
    server:  3 0.25 0.25          (the request's id, waiting_key, victim_key)
    server:  ! <traceback>        (policy.py failed; the traceback with its newlines escaped)
"""

from __future__ import annotations

import os
import sys
from types import ModuleType, SimpleNamespace

FUNCTIONS = {"waiting_key": "waiting_key(request) -> float", "victim_key": "victim_key(request) -> float"}
MAX_LINE = 4096


def _protocol_fds() -> tuple[int, int]:
    """The pipes to the driver, moved off fds 0 and 1; then stdin reads nothing and stdout goes to stderr."""
    rx, tx = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return rx, tx


def _load(path: str) -> ModuleType:
    """``path`` run as a module named after the file (the way importlib would, without importing it)."""
    name = os.path.splitext(os.path.basename(path))[0]
    module = ModuleType(name)
    module.__file__ = os.path.abspath(path)
    with open(path, "rb") as f:
        exec(compile(f.read(), module.__file__, "exec"), module.__dict__)
    for fn, call in FUNCTIONS.items():
        if not callable(getattr(module, fn, None)):
            raise AttributeError(f"{os.path.basename(path)} must define a function {call}")
    return module


def _request(line: bytes) -> SimpleNamespace:
    fields = {}
    for pair in line.decode().split():
        name, _, value = pair.partition("=")
        fields[name] = int(value) if value.lstrip("-").isdigit() else float(value)
    return SimpleNamespace(**fields)


class _Lines:
    """The driver's lines, each as it comes (it sends one and waits for the reply)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, b""

    def next(self) -> bytes | None:
        while b"\n" not in self.buf:
            chunk = os.read(self.fd, MAX_LINE)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def _send(fd: int, text: str) -> None:
    data = (text + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def main(argv: list[str]) -> int:
    rx, tx = _protocol_fds()
    try:
        policy = _load(argv[1])
        lines = _Lines(rx)
        while (line := lines.next()) is not None:
            r = _request(line)
            _send(tx, f"{r.id} {float(policy.waiting_key(r))!r} {float(policy.victim_key(r))!r}")
    except Exception as exc:  # the agent's own failure, reported to the agent
        import traceback

        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3))
        tb = tb.replace(os.getcwd() + "/", "")[-1500:]  # the run's random folder left out
        _send(tx, "! " + tb.encode("unicode_escape").decode("ascii"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
