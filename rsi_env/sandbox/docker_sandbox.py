"""`DockerSandbox`: a container per episode — its own root filesystem, no network, capped resources.

The container runs the image of `rsi_env.sandbox.docker_image` (busybox only) as ``nobody`` with a
read-only root, no network, every capability dropped, ``no-new-privileges``, a memory limit (no swap
on top), a CPU share, a PID limit and file-size/CPU-time ulimits; ``/tmp`` is a private tmpfs of
`Limits.tmp_bytes`. The workspace is bound read-write at its own path, and the profile's allowlist
(`rsi_env.sandbox.profile`) read-only. A command is a ``docker
exec`` read through the ``docker`` package with a deadline and an output cap; after each command every
process but the container's init is killed, so nothing outlives a command. The container is removed
on :meth:`close`. Needs the ``docker`` Python package and a running Docker engine.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rsi_env.errors import RsiEnvError
from rsi_env.sandbox.base import Limits, Sandbox, ShellResult, sandbox_environ
from rsi_env.sandbox.docker_image import IMAGE, ensure_image, find_busybox
from rsi_env.sandbox.process import OutputCap, hand_over, pump
from rsi_env.sandbox.profile import NOBODY, Profile

__all__ = ["DockerSandbox", "docker_client"]

# The container's init: reaps orphans and survives the kill-everything sweep (it is PID 1).
_INIT = "trap '' TERM INT HUP; while :; do sleep 3600 & wait; done"
LABEL = "rsi-env.sandbox"


def docker_client(timeout: float = 10.0) -> Any:
    """A client of the local Docker engine, or `RsiEnvError` saying what is missing."""
    try:
        import docker
    except ImportError:
        raise RsiEnvError("the Docker sandbox needs the docker package: pip install 'rsi-env[docker]'") from None
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except docker.errors.DockerException as exc:
        raise RsiEnvError(f"the Docker engine is not reachable (start dockerd): {exc}") from None
    return client


def _volumes(profile: Profile, workspace: str) -> tuple[list[str], dict[str, str], list[str]]:
    """The container's binds, tmpfs mounts and devices for ``profile``, and the workspace read-write.

    A link of a merged ``/usr`` (``/lib64 -> usr/lib64``) is bound as its target: Docker cannot make links,
    and the image's own ``/bin`` (busybox) stays.
    """
    volumes: list[str] = []  # "source:dest:mode", as one source may be bound at two places (/usr/lib and /lib)
    tmpfs: dict[str, str] = {}
    devices: list[str] = []
    for m in profile.mounts():
        if m.kind == "ro":
            volumes.append(f"{m.source}:{m.dest}:ro")
        elif m.kind == "link" and m.dest != "/bin":
            volumes.append(f"{Path(m.dest).resolve()}:{m.dest}:ro")
        elif m.kind == "empty":
            tmpfs[m.dest] = "mode=755,size=64k"
        elif m.kind == "dev":
            devices.append(f"{m.source}:{m.dest}:rwm")
    volumes.append(f"{workspace}:{workspace}:rw")
    return volumes, tmpfs, devices


class DockerSandbox(Sandbox):
    """Commands in a container of their own; see the module docstring for what is contained and how."""

    backend = "docker"

    def __init__(self, workspace: Path | str, *, limits: Limits | None = None, hidden: Sequence[Path | str] = (),
                 profile: Profile | None = None, image: str = IMAGE) -> None:
        super().__init__(workspace, limits=limits, profile=profile)
        import docker

        self._client = docker_client()
        self.image = ensure_image(self._client, image)
        lim = self.limits
        ws = str(self.workspace)
        volumes, tmpfs, devices = _volumes(self.profile, ws)
        tmpfs["/tmp"] = f"size={lim.tmp_bytes}"  # Docker copies the image's /tmp (mode 1777) into it
        self.environ = sandbox_environ(self.workspace)
        try:
            self._container = self._client.containers.run(
                self.image, ["/bin/sh", "-c", _INIT], detach=True, network_disabled=True, network_mode="none",
                read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges"],
                mem_limit=lim.memory_bytes, memswap_limit=lim.memory_bytes, pids_limit=lim.max_procs,
                nano_cpus=int(lim.cpus * 1e9), tmpfs=tmpfs, volumes=volumes, devices=devices, working_dir=ws,
                user=f"{NOBODY}:{NOBODY}",
                environment=self.environ, labels={LABEL: "1"},
                ulimits=[docker.types.Ulimit(name="fsize", soft=lim.file_bytes, hard=lim.file_bytes),
                         docker.types.Ulimit(name="cpu", soft=lim.cpu_s, hard=lim.cpu_s),
                         docker.types.Ulimit(name="core", soft=0, hard=0)])
        except docker.errors.DockerException as exc:
            raise RsiEnvError(f"could not start the sandbox container: {exc}") from None

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            client = docker_client(timeout=3.0)
        except RsiEnvError as exc:
            return str(exc)
        import docker

        try:
            client.images.get(IMAGE)
        except docker.errors.ImageNotFound:
            if find_busybox() is None:
                return "no sandbox image and no busybox to build one (apt-get install busybox-static)"
        except docker.errors.DockerException as exc:
            return f"the Docker engine does not answer: {exc}"
        finally:
            client.close()
        return None

    @property
    def container_id(self) -> str:
        return str(self._container.id)

    def _run(self, command: str, timeout_s: float, max_output: int) -> ShellResult:
        import docker

        if os.geteuid() == 0:
            hand_over(self.workspace, NOBODY)
        api = self._client.api
        t0 = time.monotonic()
        try:
            # The command's stderr joins its stdout in the container: Docker reads the two pipes apart, and
            # under load would hand a shell's complaint over after what the next command printed.
            ex = api.exec_create(self._container.id, ["/bin/sh", "-c", 'exec /bin/sh -c "$1" 2>&1', "sh", command],
                                 workdir=str(self.workspace), environment=self.environ)
            sock = api.exec_start(ex["Id"], socket=True)
        except docker.errors.DockerException as exc:
            return ShellResult(None, "", error=f"the container did not run the command: {exc}", backend=self.backend)
        raw = getattr(sock, "_sock", sock)
        cap = OutputCap(max_output, framed=True)
        disk = self.disk_cap()
        try:
            got = pump(raw.fileno(), cap, t0 + timeout_s, disk.over)
        finally:  # shut the upgraded connection down: a half-read one would stall the client's next call
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)
            sock.close()
        rc: int | None = None
        timed_out = got.timed_out
        if got.eof and not cap.truncated:
            rc = self._exit_code(ex["Id"], t0 + timeout_s)
            timed_out = timed_out or rc is None
        self._sweep()
        return ShellResult(rc, cap.text(), timed_out, cap.truncated, got.stopped, time.monotonic() - t0, self.backend)

    def _exit_code(self, exec_id: str, deadline: float) -> int | None:
        while True:
            info = self._client.api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)

    def _sweep(self) -> None:
        """Kill every process in the container but its init (``kill -9 -1`` spares PID 1 and itself).

        Retried: at the PID limit (a fork bomb) the sweep itself may not start until the bomb's own
        forks fail and some of its processes exit.
        """
        for _ in range(40):
            with contextlib.suppress(Exception):
                if self._container.exec_run(["/bin/kill", "-9", "-1"]).exit_code == 0:
                    return
            time.sleep(0.05)

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(Exception):
                self._container.remove(force=True)
            self._client.close()
        super().close()
