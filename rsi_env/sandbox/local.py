"""`LocalSandbox`: a plain subprocess in the workspace, under resource limits — the weakest backend.

What it bounds: CPU seconds, address space, file size and process count (rlimits, and a ``pids``
cgroup where the machine allows one), wall time and output (its whole process group, and its cgroup,
is killed at the end). What it cannot do by itself: keep a command's writes and reads inside the
workspace — it shares the host's filesystem. Run by root it therefore drops to the unprivileged user
``nobody`` (and hands the workspace to that user), so that a command can neither signal the
environment's process nor write where root's files are, and starts it in a network namespace of its
own (no network); ``/tmp`` and other world-writable places stay writable, and a non-root env gets
neither protection. :func:`rsi_env.sandbox.default_sandbox` chooses it only
where neither Docker nor bubblewrap works.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

from rsi_env.sandbox.base import Sandbox, ShellResult, sandbox_environ
from rsi_env.sandbox.process import run_process

__all__ = ["LocalSandbox", "NOBODY"]

NOBODY = 65534


def _others_can_run(path: Path) -> bool:
    """Whether a user with no relation to ``path``'s owner can execute it (every folder above searchable)."""
    try:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        return all(os.stat(p).st_mode & stat.S_IXOTH for p in path.parents)
    except OSError:
        return False


def _hand_over(root: Path, uid: int) -> None:
    """Give the workspace to ``uid`` without following links (a link out must not change its target's owner)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
                os.lchown(p, uid, uid)
    os.lchown(root, uid, uid)


class LocalSandbox(Sandbox):
    """Commands as host subprocesses under limits; see the module docstring for what it cannot contain."""

    backend = "local"

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
            _hand_over(self.workspace, uid)
        env = sandbox_environ(self.workspace, str(Path(self.python).parent))
        return run_process(["/bin/sh", "-c", command], cwd=self.workspace, env=env, limits=self.limits,
                           timeout_s=timeout_s, max_output=max_output, backend=self.backend, uid=uid,
                           no_network=uid is not None)
