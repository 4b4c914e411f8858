"""Running a command as a host subprocess, bounded: the piece the local and bubblewrap backends share.

A command runs in its own session (so its whole process group can be killed), under resource limits
set in the child before ``exec`` (CPU seconds, address space, file size, process count), and — where
this process may create cgroups (root on cgroup v1's ``pids`` controller, or v2 with ``pids``
delegated) — inside a fresh ``pids`` cgroup, which caps fork bombs even for root (whom
``RLIMIT_NPROC`` does not bind) and lets the end of a command kill every process it started, also
those that left its process group with ``setsid``. Output is read until EOF, the timeout, or the cap.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from rsi_env.sandbox.base import Limits, ShellResult

__all__ = ["OutputCap", "PidsCgroup", "pump", "run_process"]

_CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))


class PidsCgroup:
    """A cgroup that caps the number of processes of one command and can kill all of them."""

    def __init__(self, path: Path, max_procs: int) -> None:
        self.path = path
        path.mkdir()
        (path / "pids.max").write_text(str(max_procs))

    @classmethod
    def create(cls, max_procs: int) -> PidsCgroup | None:
        """A new cgroup under the first writable ``pids`` hierarchy, or None where there is none."""
        for root in _CGROUP_ROOTS:
            if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
                continue
            if root == Path("/sys/fs/cgroup"):  # cgroup v2: pids must be delegated to children
                try:
                    if "pids" not in (root / "cgroup.subtree_control").read_text().split():
                        continue
                except OSError:
                    continue
            try:
                return cls(root / f"rsi-sandbox-{uuid.uuid4().hex[:12]}", max_procs)
            except OSError:
                continue
        return None

    def join(self) -> None:
        """Move the calling process into the cgroup (run in the child before ``exec``)."""
        (self.path / "cgroup.procs").write_text("0")

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self, within_s: float = 5.0) -> None:
        """SIGKILL every process in the cgroup until none is left (a fork bomb cannot outgrow pids.max)."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def close(self) -> None:
        self.kill_all()
        with contextlib.suppress(OSError):
            self.path.rmdir()


class OutputCap:
    """Collects output up to ``max_output`` bytes; ``framed`` decodes Docker's multiplexed stream."""

    def __init__(self, max_output: int, framed: bool = False) -> None:
        self.max_output = max_output
        self.framed = framed
        self.data = bytearray()
        self._raw = bytearray()
        self.truncated = False

    def feed(self, chunk: bytes) -> bool:
        """Take ``chunk``; True once the cap is reached (the command is then killed)."""
        if self.framed:  # Docker: frames of [stream, 0, 0, 0, size (4 bytes, big-endian)] + payload
            self._raw += chunk
            while len(self._raw) >= 8:
                size = int.from_bytes(self._raw[4:8], "big")
                if len(self._raw) < 8 + size:
                    break
                self._add(bytes(self._raw[8:8 + size]))
                del self._raw[:8 + size]
        else:
            self._add(chunk)
        return self.truncated

    def _add(self, payload: bytes) -> None:
        room = self.max_output - len(self.data)
        if len(payload) > room:
            self.truncated = True
        self.data += payload[: max(room, 0)]

    def text(self) -> str:
        return self.data.decode(errors="replace")


def pump(fd: int, cap: OutputCap, deadline: float) -> tuple[bool, bool]:
    """Read ``fd`` into ``cap`` until EOF, the deadline or the cap: (reached EOF, timed out)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False, True
        ready, _, _ = select.select([fd], [], [], min(left, 0.25))
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        except OSError:
            return True, False
        if not chunk:
            return True, False
        if cap.feed(chunk):
            return False, False


_CLONE_NEWNET = 0x40000000


def _unshare_network() -> None:
    """Move the calling process into a new network namespace (only ``lo``, down): no network at all."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")


def _preexec(limits: Limits, cgroup: PidsCgroup | None, uid: int | None, no_network: bool) -> Callable[[], None]:
    def apply() -> None:
        if cgroup is not None:
            cgroup.join()
        if no_network:
            _unshare_network()
        caps = [(resource.RLIMIT_CPU, limits.cpu_s), (resource.RLIMIT_AS, limits.memory_bytes),
                (resource.RLIMIT_FSIZE, limits.file_bytes), (resource.RLIMIT_CORE, 0)]
        if cgroup is None:  # RLIMIT_NPROC counts the user's processes machine-wide: only a fallback
            caps.append((resource.RLIMIT_NPROC, limits.max_procs))
        for what, value in caps:
            resource.setrlimit(what, (value, value))
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
    return apply


def run_process(argv: Sequence[str], *, cwd: Path, env: dict[str, str], limits: Limits, timeout_s: float,
                max_output: int, backend: str, uid: int | None = None, no_network: bool = False) -> ShellResult:
    """Run ``argv`` bounded by ``limits``, the timeout and the output cap; kill all it started at the end.

    ``uid``: drop to this user in the child (the local backend run by root uses ``nobody``);
    ``no_network``: start the child in a network namespace of its own (needs root).
    """
    cgroup = PidsCgroup.create(limits.max_procs)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_preexec(limits, cgroup, uid, no_network))
    except (OSError, subprocess.SubprocessError) as exc:
        if cgroup is not None:
            cgroup.close()
        return ShellResult(None, "", error=f"could not start: {exc}", backend=backend)
    assert proc.stdout is not None
    cap = OutputCap(max_output)
    eof, timed_out = pump(proc.stdout.fileno(), cap, t0 + timeout_s)
    rc: int | None = None
    if eof:
        try:
            rc = proc.wait(timeout=max(t0 + timeout_s - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            timed_out = True
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.close()
    proc.wait()
    proc.stdout.close()
    if timed_out or cap.truncated:
        rc = None
    error = None
    if rc is not None and rc < 0:
        error = f"killed by signal {-rc} ({signal.Signals(-rc).name})" if -rc in signal.valid_signals() else None
    return ShellResult(rc, cap.text(), timed_out, cap.truncated, error, time.monotonic() - t0, backend)
