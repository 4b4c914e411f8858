"""`EpisodeSandbox`: the agent's sandbox for one episode of a code task, started on its first command.

An env holds one per episode over the episode's workspace: the backend is chosen once (the strongest
available unless the env was told otherwise), the sandbox itself is made on the first shell command
(a Docker container costs a fraction of a second; episodes that never run a command pay nothing), it
shows what its profile allows (`rsi_env.sandbox.profile`), and it is closed with the episode.
"""

from __future__ import annotations

from pathlib import Path

from rsi_env.errors import RsiEnvError
from rsi_env.sandbox.backends import BACKENDS, default_backend, make_sandbox
from rsi_env.sandbox.base import Limits, Sandbox, ShellResult
from rsi_env.sandbox.profile import Profile

__all__ = ["EpisodeSandbox", "resolve_backend"]


def resolve_backend(backend: str) -> str:
    """``"auto"`` → the strongest backend available here; a named one is checked to exist."""
    if backend == "auto":
        return default_backend()
    if backend not in BACKENDS:
        raise RsiEnvError(f"unknown sandbox backend {backend!r}; known: auto, {', '.join(BACKENDS)}")
    return backend


class EpisodeSandbox:
    """A lazily started sandbox of ``backend`` over ``workspace``."""

    def __init__(self, backend: str, workspace: Path, limits: Limits | None = None,
                 profile: Profile | None = None) -> None:
        self.backend = backend
        self.workspace = workspace
        self.limits = limits
        self.profile = profile
        self._sandbox: Sandbox | None = None

    def run(self, command: str, timeout_s: float, max_output: int = 16384) -> ShellResult:
        """Run an agent's command; a sandbox that cannot start comes back as an error, never raised."""
        if self._sandbox is None:
            try:
                self._sandbox = make_sandbox(self.backend, self.workspace, limits=self.limits,
                                             profile=self.profile)
            except RsiEnvError as exc:
                return ShellResult(None, "", error=f"refused: {exc}", backend=self.backend)
        return self._sandbox.run(command, timeout_s=timeout_s, max_output=max_output)

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
