"""Choosing a sandbox backend: the strongest one this machine has, and why the others are not used.

Strength order: ``docker`` (own root filesystem, cgroup limits on memory, CPU and processes) >
``bubblewrap`` (a root of the profile's allowlist, namespaces, cgroups). ``local`` (limits only: it
contains nothing) is never chosen by ``"auto"``: a caller gets it only by naming it, and it warns.
"""

from __future__ import annotations

from pathlib import Path

from rsi_env.errors import RsiEnvError
from rsi_env.sandbox.base import Limits, Sandbox
from rsi_env.sandbox.bubblewrap import BubblewrapSandbox
from rsi_env.sandbox.docker_sandbox import DockerSandbox
from rsi_env.sandbox.local import LocalSandbox
from rsi_env.sandbox.profile import Profile

__all__ = ["BACKENDS", "available_backends", "default_backend", "make_sandbox", "default_sandbox"]

BACKENDS: dict[str, type[Sandbox]] = {"docker": DockerSandbox, "bubblewrap": BubblewrapSandbox, "local": LocalSandbox}


def available_backends() -> dict[str, str | None]:
    """Each backend, strongest first, with None where it works here or the reason it does not."""
    return {name: cls.unavailable() for name, cls in BACKENDS.items()}


def default_backend() -> str:
    """The strongest containing backend that works on this machine (never ``local``, which contains nothing)."""
    for name, cls in BACKENDS.items():
        if cls.contains and cls.unavailable() is None:
            return name
    raise RsiEnvError(f"no containing sandbox backend works here ({available_backends()}); install bubblewrap "
                      "(apt-get install bubblewrap) or start Docker, or ask for sandbox='local' by name to run "
                      "uncontained, for development only")


def make_sandbox(backend: str, workspace: Path | str, *, limits: Limits | None = None,
                 profile: Profile | None = None) -> Sandbox:
    """A sandbox of ``backend`` (``"auto"`` = the strongest available) over ``workspace``, showing ``profile``."""
    name = default_backend() if backend == "auto" else backend
    cls = BACKENDS.get(name)
    if cls is None:
        raise RsiEnvError(f"unknown sandbox backend {backend!r}; known: auto, {', '.join(BACKENDS)}")
    why = cls.unavailable()
    if why is not None:
        raise RsiEnvError(f"sandbox backend {name!r} is not available: {why}")
    return cls(workspace, limits=limits, profile=profile)


def default_sandbox(workspace: Path | str, *, limits: Limits | None = None,
                    profile: Profile | None = None) -> Sandbox:
    """A sandbox of the strongest backend available; its ``backend`` attribute says which."""
    return make_sandbox("auto", workspace, limits=limits, profile=profile)
