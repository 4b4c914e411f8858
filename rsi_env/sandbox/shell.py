"""`run_shell`: one command in a workspace under bubblewrap — the stateless form the flag tasks use.

A thin function over `BubblewrapSandbox` (read-only root, private ``/tmp``, only the workspace
writable, no network, own PID namespace, dies with its parent, whole sandbox killed at the timeout,
output capped). Where bubblewrap is missing, commands are refused with the reason — never run
unconfined. Code tasks keep a `Sandbox` per episode instead (`rsi_env.sandbox.default_sandbox`).
"""

from __future__ import annotations

from pathlib import Path

from rsi_env.sandbox.base import ShellResult
from rsi_env.sandbox.bubblewrap import BubblewrapSandbox

__all__ = ["ShellResult", "run_shell", "shell_backend"]


def shell_backend() -> str | None:
    """``"bubblewrap"`` where bubblewrap works on this machine, else None."""
    return "bubblewrap" if BubblewrapSandbox.unavailable() is None else None


def run_shell(command: str, workspace: Path, *, timeout_s: float = 10.0, max_output: int = 16384) -> ShellResult:
    """Run ``command`` in ``workspace`` under bubblewrap (see the module docstring)."""
    with BubblewrapSandbox(workspace) as sandbox:
        return sandbox.run(command, timeout_s=timeout_s, max_output=max_output)
