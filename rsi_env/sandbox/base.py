"""The `Sandbox` interface: run an agent's command in its workspace, contained, and say what happened.

Three backends implement it, strongest first: ``docker`` (a container per episode with its own root
filesystem, no network, memory/CPU/PID limits), ``bubblewrap`` (the host's root read-only, a private
``/tmp``, only the workspace writable, no network, its own PID namespace) and ``local`` (a plain
subprocess under resource limits, which cannot stop writes outside the workspace by itself).
Every backend caps a command's time and output and kills everything it started when it ends, so a
command never outlives its call. A refused or contained command comes back as a `ShellResult` whose
``error`` says why; no backend raises for anything a command does.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rsi_env.sandbox.profile import Profile

if TYPE_CHECKING:
    from rsi_env.sandbox.process import DiskCap

__all__ = ["Limits", "Sandbox", "ShellResult", "check_command", "sandbox_environ"]

MAX_COMMAND_CHARS = 8192


@dataclass(frozen=True)
class ShellResult:
    """What a command did: exit code (None if it never ran or was killed), output, and why it stopped."""

    returncode: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    error: str | None = None
    seconds: float = 0.0
    backend: str | None = None

    @property
    def ok(self) -> bool:
        """The command ran to its end and exited 0."""
        return self.returncode == 0 and not (self.timed_out or self.truncated or self.error)

    def summary(self) -> str:
        head = f"$ exit {self.returncode}" if self.returncode is not None else "$ not completed"
        if self.timed_out:
            head += " (killed: timeout)"
        if self.truncated:
            head += " (output truncated)"
        if self.error:
            head += f" ({self.error})"
        return f"{head}\n{self.output}"


@dataclass(frozen=True)
class Limits:
    """What one command may use. Each backend enforces what its mechanism can (see its docstring)."""

    cpu_s: int = 120                 # CPU seconds per process (RLIMIT_CPU)
    memory_bytes: int = 4 << 30      # memory of all the sandbox's processes together (memory cgroup; Docker's
    #                                  memory limit), and address space per process (RLIMIT_AS)
    file_bytes: int = 64 << 20       # largest file a command may write (RLIMIT_FSIZE)
    max_procs: int = 128             # processes at once (pids cgroup / RLIMIT_NPROC / Docker's pids limit)
    cpus: float = 1.0                # CPU share of a Docker container
    disk_bytes: int = 1 << 30        # bytes the workspace and the private /tmp may hold together

    @property
    def tmp_bytes(self) -> int:
        """The private ``/tmp``'s share of `disk_bytes` (a quarter); the workspace may hold the rest."""
        return self.disk_bytes // 4


def check_command(command: object) -> str | None:
    """Why ``command`` is refused before it runs (not text, empty, NUL, too long), or None."""
    if not isinstance(command, str):
        return f"a command is text, got {type(command).__name__}"
    if not command.strip():
        return "empty command"
    if "\x00" in command:
        return "the command contains a NUL byte"
    if len(command) > MAX_COMMAND_CHARS:
        return f"the command is {len(command)} characters; the cap is {MAX_COMMAND_CHARS}"
    return None


def sandbox_environ(workspace: Path, python_dir: str | None = None) -> dict[str, str]:
    """The whole environment a command sees: nothing of the env's own (no tokens, no keys leak in)."""
    bindir = python_dir or str(Path(sys.executable).parent)
    return {"PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(workspace), "TMPDIR": "/tmp",
            "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}


class Sandbox(ABC):
    """Runs commands in one workspace until closed, showing them only what ``profile`` allows.

    ``profile`` (`rsi_env.sandbox.profile.Profile`) is the allowlist of what is visible read-only
    besides the workspace. Nothing else of the host is there to hide: what is not listed is not visible.
    """

    backend: ClassVar[str] = ""
    # Whether commands are contained at all; the local backend is not, and says so.
    contains: ClassVar[bool] = True

    def __init__(self, workspace: Path | str, *, limits: Limits | None = None, hidden: Sequence[Path | str] = (),
                 profile: Profile | None = None) -> None:
        self.workspace = Path(workspace).resolve()
        if not self.workspace.is_dir():
            raise FileNotFoundError(f"sandbox workspace {self.workspace} is not a directory")
        self.limits = limits or Limits()
        self.profile = profile or Profile()
        self.closed = False

    @classmethod
    @abstractmethod
    def unavailable(cls) -> str | None:
        """None where this backend works on this machine, else the reason (with the fix)."""

    @property
    def python(self) -> str:
        """The Python interpreter a command can run in this sandbox."""
        return sys.executable

    def disk_cap(self) -> DiskCap:
        """The workspace's share of `Limits.disk_bytes` (the private ``/tmp`` holds the rest), polled per command."""
        from rsi_env.sandbox.process import DiskCap  # process.py builds on this module

        return DiskCap(self.workspace, self.limits.disk_bytes - self.limits.tmp_bytes)

    def run(self, command: str, timeout_s: float = 10.0, max_output: int = 16384) -> ShellResult:
        """Run ``command`` with ``/bin/sh -c`` in the workspace; never raises for what the command does."""
        why = check_command(command)
        if why is None and self.closed:
            why = "the sandbox is closed"
        if why is None and not (timeout_s > 0 and max_output > 0):
            why = f"timeout_s and max_output must be positive, got {timeout_s} and {max_output}"
        if why is not None:
            return ShellResult(None, "", error=f"refused: {why}", backend=self.backend)
        return self._run(command, float(timeout_s), int(max_output))

    @abstractmethod
    def _run(self, command: str, timeout_s: float, max_output: int) -> ShellResult:
        """Run a command already checked by :meth:`run`."""

    def close(self) -> None:
        """Release what the sandbox holds (a container, a cgroup); later commands are refused."""
        self.closed = True

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.workspace)!r})"
