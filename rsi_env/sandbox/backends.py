"""Choosing a sandbox backend: the strongest one this machine has, and why the others are not used.

Strength order: ``docker`` (own root filesystem, cgroup limits on memory, CPU and processes) >
``bubblewrap`` (host root read-only, namespaces) > ``local`` (limits only: it cannot keep writes
inside the workspace). ``local`` is chosen only where neither of the others works.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rsi_env.errors import RsiEnvError
from rsi_env.sandbox.base import Limits, Sandbox
from rsi_env.sandbox.bubblewrap import BubblewrapSandbox
from rsi_env.sandbox.docker_sandbox import DockerSandbox
from rsi_env.sandbox.local import LocalSandbox

__all__ = ["BACKENDS", "available_backends", "default_backend", "make_sandbox", "default_sandbox"]

BACKENDS: dict[str, type[Sandbox]] = {"docker": DockerSandbox, "bubblewrap": BubblewrapSandbox, "local": LocalSandbox}


def available_backends() -> dict[str, str | None]:
    """Each backend, strongest first, with None where it works here or the reason it does not."""
    return {name: cls.unavailable() for name, cls in BACKENDS.items()}


def default_backend() -> str:
    """The strongest backend that works on this machine."""
    for name, cls in BACKENDS.items():
        if cls.unavailable() is None:
            return name
    raise RsiEnvError(f"no sandbox backend works here: {available_backends()}")


def make_sandbox(backend: str, workspace: Path | str, *, limits: Limits | None = None,
                 hidden: Sequence[Path | str] = ()) -> Sandbox:
    """A sandbox of ``backend`` (``"auto"`` = the strongest available) over ``workspace``."""
    name = default_backend() if backend == "auto" else backend
    cls = BACKENDS.get(name)
    if cls is None:
        raise RsiEnvError(f"unknown sandbox backend {backend!r}; known: auto, {', '.join(BACKENDS)}")
    why = cls.unavailable()
    if why is not None:
        raise RsiEnvError(f"sandbox backend {name!r} is not available: {why}")
    return cls(workspace, limits=limits, hidden=hidden)


def default_sandbox(workspace: Path | str, *, limits: Limits | None = None,
                    hidden: Sequence[Path | str] = ()) -> Sandbox:
    """A sandbox of the strongest backend available; its ``backend`` attribute says which."""
    return make_sandbox("auto", workspace, limits=limits, hidden=hidden)
