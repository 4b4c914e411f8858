"""`BubblewrapSandbox`: the host's root read-only, only the workspace writable, no network.

Each command runs under ``bwrap`` in new user, mount, PID, network, IPC and UTS namespaces with every
capability dropped: ``/`` is bound read-only, ``/tmp`` is a private tmpfs, ``/dev`` and ``/proc`` are
minimal, the workspace is the one writable bind, and ``hidden`` paths are masked by empty tmpfs (or
``/dev/null`` for files). Killing the command's ``bwrap`` kills its PID namespace, and ``bwrap`` dies
with its parent, so no process outlives a command; the shared limits of `rsi_env.sandbox.process`
apply on top (a ``pids`` cgroup where the machine allows one, rlimits otherwise).
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

import rsi_env
from rsi_env.sandbox.base import Sandbox, ShellResult, sandbox_environ
from rsi_env.sandbox.process import run_process

__all__ = ["BubblewrapSandbox"]

_PACKAGE = Path(rsi_env.__file__).resolve().parent  # read-only like the rest of the root; its hidden parts masked


@cache
def _probe() -> str | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    try:
        out = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "--cap-drop", "ALL",
                              "/bin/true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap does not run here: {exc}"
    if out.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {out.stderr.decode(errors='replace').strip()}"
    return None


class BubblewrapSandbox(Sandbox):
    """Commands under bubblewrap; see the module docstring for what is contained and how."""

    backend = "bubblewrap"

    @classmethod
    def unavailable(cls) -> str | None:
        return _probe()

    def argv(self, command: str) -> list[str]:
        """The ``bwrap`` command line that runs ``command``."""
        ws = str(self.workspace)
        bwrap = shutil.which("bwrap") or "bwrap"
        argv = [bwrap, "--ro-bind", "/", "/", "--tmpfs", "/tmp"]
        if _PACKAGE.is_relative_to("/tmp"):  # a checkout under /tmp: the private /tmp would hide rsi-env itself
            argv += ["--ro-bind", str(_PACKAGE), str(_PACKAGE)]
        argv += ["--bind", ws, ws, "--dev", "/dev", "--proc", "/proc"]
        for p in self.hidden:
            argv += ["--tmpfs", str(p)] if p.is_dir() else ["--ro-bind", "/dev/null", str(p)]
        return argv + ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--chdir", ws,
                       "/bin/sh", "-c", command]

    def _run(self, command: str, timeout_s: float, max_output: int) -> ShellResult:
        if (why := _probe()) is not None:
            return ShellResult(None, "", error=f"refused: {why}", backend=self.backend)
        return run_process(self.argv(command), cwd=self.workspace, env=sandbox_environ(self.workspace),
                           limits=self.limits, timeout_s=timeout_s, max_output=max_output, backend=self.backend)
