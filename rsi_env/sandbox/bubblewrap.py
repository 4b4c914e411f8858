"""`BubblewrapSandbox`: a root built from the profile's allowlist, only the workspace writable, no network.

Each command runs under ``bwrap`` in new mount, PID, network, IPC and UTS namespaces. Its root is an
empty tmpfs holding only what `rsi_env.sandbox.profile.Profile` lists, read-only, plus a private
``/tmp`` (a tmpfs of `Limits.tmp_bytes`), a minimal ``/dev`` with a ``/dev/shm`` of the same size (shared
memory, charged to the memory cgroup), and ``/proc``, and the workspace, the one
writable bind. The command runs as ``nobody``: when the env runs
as root, ``bwrap`` builds the root with root's rights (so an interpreter under ``/root`` can be bound)
and ``setpriv`` drops to uid/gid 65534 with no capabilities and ``no_new_privs`` before the command
starts, a real unprivileged user on the host (no user namespace maps it back to root); otherwise
``bwrap`` runs as the env's user in a user namespace. Killing the command's ``bwrap`` kills its PID
namespace, and ``bwrap`` dies with its parent, so no process outlives a command; the limits of
`rsi_env.sandbox.process` apply on top (pids and memory cgroups where the machine allows them,
rlimits otherwise, and the workspace's `DiskCap`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from rsi_env.sandbox.base import Sandbox, ShellResult, sandbox_environ
from rsi_env.sandbox.process import hand_over, run_process
from rsi_env.sandbox.profile import NOBODY, Mount

__all__ = ["BubblewrapSandbox"]

_SETPRIV = "/usr/bin/setpriv"


@cache
def _probe() -> str | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if os.geteuid() == 0 and not Path(_SETPRIV).exists():
        return f"bubblewrap run by root needs {_SETPRIV} (apt-get install util-linux) to drop to nobody"
    try:
        out = subprocess.run([bwrap, "--ro-bind", "/", "/", *_unshare(), "--die-with-parent", "/bin/true"],
                             capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap does not run here: {exc}"
    if out.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {out.stderr.decode(errors='replace').strip()}"
    return None


def _unshare() -> list[str]:
    """Every namespace but the user one for root (whose command then drops to nobody); all of them otherwise."""
    if os.geteuid() == 0:
        return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    return ["--unshare-all", "--uid", str(NOBODY), "--gid", str(NOBODY)]


def _mount_args(mounts: list[Mount]) -> list[str]:
    """``bwrap`` arguments for ``mounts``, each folder above a destination made first as 0755 (not bwrap's 0700)."""
    made: set[str] = {"/"}
    args: list[str] = []
    for m in mounts:
        for parent in reversed(Path(m.dest).parents):
            p = str(parent)
            if p not in made:
                made.add(p)
                args += ["--perms", "0755", "--dir", p]
        made.add(m.dest)
        if m.kind == "ro":
            args += ["--ro-bind", m.source, m.dest]
        elif m.kind == "rw":
            args += ["--bind", m.source, m.dest]
        elif m.kind == "empty":
            args += ["--perms", "0755", "--tmpfs", m.dest]
        elif m.kind == "link":
            args += ["--symlink", m.source, m.dest]
        elif m.kind == "dev":
            args += ["--dev-bind", m.source, m.dest]
    return args


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
        tmp = ["--size", str(self.limits.tmp_bytes), "--perms", "1777", "--tmpfs"]
        argv = [bwrap, "--dev", "/dev", *tmp, "/dev/shm", "--proc", "/proc", *tmp, "/tmp"]
        argv += _mount_args([*self.profile.mounts(), Mount("rw", ws, ws)])
        argv += [*_unshare(), "--die-with-parent", "--new-session", "--chdir", ws]
        if os.geteuid() == 0:  # bwrap keeps what setpriv needs; setpriv drops it all before the command starts
            keep = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH")
            argv += ["--cap-drop", "ALL", *(a for c in keep for a in ("--cap-add", c)), "--", _SETPRIV,
                     "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "--inh-caps", "-all",
                     "--bounding-set", "-all", "--no-new-privs"]
        else:
            argv += ["--cap-drop", "ALL"]
        return argv + ["--", "/bin/sh", "-c", command]

    def _run(self, command: str, timeout_s: float, max_output: int) -> ShellResult:
        if (why := _probe()) is not None:
            return ShellResult(None, "", error=f"refused: {why}", backend=self.backend)
        if os.geteuid() == 0:
            hand_over(self.workspace, NOBODY)
        disk = self.disk_cap()
        return run_process(self.argv(command), cwd=self.workspace, env=sandbox_environ(self.workspace),
                           limits=self.limits, timeout_s=timeout_s, max_output=max_output, backend=self.backend,
                           disk=disk)
