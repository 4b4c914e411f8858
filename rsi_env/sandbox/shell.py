"""Run an agent's shell command in its workspace: bubblewrap, a timeout, an output cap.

The command runs under ``bwrap`` with the root filesystem read-only, a private ``/tmp``, only the
workspace writable, no network, its own PID namespace, and dies with its parent. Its whole process
group is killed at the timeout and its output is cut at ``max_output`` bytes. Where bubblewrap is
missing, commands are refused with the reason (never run unconfined).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ShellResult", "run_shell", "shell_backend"]


@dataclass(frozen=True)
class ShellResult:
    """What a command did: exit code (None if it never ran or was killed), output, and why it stopped."""

    returncode: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    error: str | None = None
    seconds: float = 0.0

    def summary(self) -> str:
        head = (f"$ exit {self.returncode}" if self.returncode is not None else "$ not completed")
        if self.timed_out:
            head += " (killed: timeout)"
        if self.truncated:
            head += " (output truncated)"
        if self.error:
            head += f" ({self.error})"
        return f"{head}\n{self.output}"


def shell_backend() -> str | None:
    """``"bubblewrap"`` where ``bwrap`` works on this machine, else None."""
    return "bubblewrap" if shutil.which("bwrap") else None


def run_shell(command: str, workspace: Path, *, timeout_s: float = 10.0, max_output: int = 16384) -> ShellResult:
    if not isinstance(command, str) or not command.strip():
        return ShellResult(None, "", error="empty command")
    if "\x00" in command:
        return ShellResult(None, "", error="the command contains a NUL byte")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return ShellResult(None, "", error="shell commands need bubblewrap (apt-get install bubblewrap); refused")
    ws = str(Path(workspace).resolve())
    argv = [bwrap, "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--bind", ws, ws, "--dev", "/dev", "--proc", "/proc",
            "--unshare-all", "--die-with-parent", "--new-session", "--chdir", ws,
            "--setenv", "HOME", ws, "/bin/sh", "-c", command]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    out = bytearray()
    truncated = timed_out = False
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    while True:
        left = timeout_s - (time.monotonic() - t0)
        if left <= 0:
            timed_out = True
            break
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            chunk = None
        if chunk:
            if len(out) < max_output:
                out += chunk[: max_output - len(out)]
            if len(out) >= max_output:
                truncated = True
                break  # a flood: stop reading and kill it
            continue
        if chunk == b"" and proc.poll() is not None:
            break
        time.sleep(0.005)
    rc: int | None
    if timed_out or truncated or proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = None if (timed_out or truncated) else proc.returncode
    else:
        rc = proc.returncode
    proc.stdout.close()
    return ShellResult(rc, out.decode(errors="replace"), timed_out, truncated, None, time.monotonic() - t0)

