"""Workspaces and commands an agent runs in them: edits that stay inside, shells that cannot escape."""

from __future__ import annotations

from rsi_env.sandbox.shell import ShellResult, run_shell, shell_backend
from rsi_env.sandbox.workspace import EditError, Workspace

__all__ = ["EditError", "ShellResult", "Workspace", "run_shell", "shell_backend"]
