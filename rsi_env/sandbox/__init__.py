"""Workspaces and commands an agent runs in them: edits that stay inside, shells that cannot escape.

`Workspace` guards edits; a `Sandbox` runs commands (backends ``docker`` > ``bubblewrap`` > ``local``,
see `rsi_env.sandbox.backends`); `run_shell` is the stateless bubblewrap form. The Docker backend
loads the ``docker`` package only when used.
"""

from __future__ import annotations

from rsi_env.sandbox.backends import BACKENDS, available_backends, default_backend, default_sandbox, make_sandbox
from rsi_env.sandbox.base import Limits, Sandbox, ShellResult, check_command
from rsi_env.sandbox.bubblewrap import BubblewrapSandbox
from rsi_env.sandbox.docker_sandbox import DockerSandbox
from rsi_env.sandbox.local import LocalSandbox
from rsi_env.sandbox.shell import run_shell, shell_backend
from rsi_env.sandbox.workspace import EditError, Workspace

__all__ = ["BACKENDS", "BubblewrapSandbox", "DockerSandbox", "EditError", "Limits", "LocalSandbox", "Sandbox",
           "ShellResult", "Workspace", "available_backends", "check_command", "default_backend", "default_sandbox",
           "make_sandbox", "run_shell", "shell_backend"]
