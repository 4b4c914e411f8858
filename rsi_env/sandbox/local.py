"""`LocalSandbox`: a plain subprocess in the workspace, under resource limits — it CONTAINS NOTHING.

For development only: `rsi_env.sandbox.make_sandbox` never picks it by itself (``"auto"`` refuses
where neither Docker nor bubblewrap works), it warns each time one is made, and a score earned under
it says so (``info["sandbox"]``). Its profile is not applied: every file the env's user can read, the
command can read too, hidden checks and clean originals included.

What it bounds: CPU seconds, address space, file size and process count (rlimits, and a ``pids``
cgroup where the machine allows one), wall time and output (its whole process group, and its cgroup,
is killed at the end). What it cannot do by itself: keep a command's writes and reads inside the
workspace — it shares the host's filesystem. Run by root it therefore drops to the unprivileged user
``nobody`` (and hands the workspace to that user), so that a command can neither signal the
environment's process nor write where root's files are, and starts it in a network namespace of its
own (no network); ``/tmp`` and other world-writable places stay writable, and a non-root env gets
neither protection.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import warnings
from pathlib import Path
from typing import Any

from rsi_env.sandbox.base import Sandbox, ShellResult, sandbox_environ
from rsi_env.sandbox.process import hand_over, run_process
from rsi_env.sandbox.profile import NOBODY

__all__ = ["LocalSandbox", "NOBODY", "UNCONTAINED"]

UNCONTAINED = ("the 'local' sandbox contains nothing: the agent's commands can read every file this user can, "
               "hidden checks included; use it for development, never for a score")


def _others_can_run(path: Path) -> bool:
    """Whether a user with no relation to ``path``'s owner can execute it (every folder above searchable).

    A link is followed to its end: a venv's ``python3`` in an open folder may point into a closed home.
    """
    try:
        path = path.resolve(strict=True)
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        return all(os.stat(p).st_mode & stat.S_IXOTH for p in path.parents)
    except OSError:
        return False


class LocalSandbox(Sandbox):
    """Commands as host subprocesses under limits; see the module docstring for what it cannot contain."""

    backend = "local"
    contains = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        warnings.warn(UNCONTAINED, RuntimeWarning, stacklevel=3)

    @classmethod
    def unavailable(cls) -> str | None:
        return None if os.name == "posix" else "the local backend needs a POSIX system"

    @property
    def uid(self) -> int | None:
        """The user commands run as: ``nobody`` when the env runs as root, else the env's own user."""
        return NOBODY if os.geteuid() == 0 else None

    @property
    def python(self) -> str:
        if self.uid is None or _others_can_run(Path(sys.executable)):
            return sys.executable
        return shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable

    def _run(self, command: str, timeout_s: float, max_output: int) -> ShellResult:
        uid = self.uid
        if uid is not None:
            hand_over(self.workspace, uid)
        env = sandbox_environ(self.workspace, str(Path(self.python).parent))
        return run_process(["/bin/sh", "-c", command], cwd=self.workspace, env=env, limits=self.limits,
                           timeout_s=timeout_s, max_output=max_output, backend=self.backend, uid=uid,
                           no_network=uid is not None,
                           disk=self.disk_cap())
