"""Running a command as a host subprocess, bounded: the piece the local and bubblewrap backends share.

A command runs in its own session (so its whole process group can be killed), under resource limits
set in the child before ``exec`` (CPU seconds, address space, file size, process count), and — where
this process may create cgroups (root on cgroup v1, or v2 with the controllers delegated) — inside
fresh ``pids`` and ``memory`` cgroups: the first caps fork bombs even for root (whom ``RLIMIT_NPROC``
does not bind) and lets the end of a command kill every process it started, also those that left its
process group with ``setsid``; the second caps the memory of all its processes together (a private
``/tmp``'s pages included). Output is read until EOF, the timeout, or the cap; a `DiskCap` polled
meanwhile stops a command whose workspace grows past its bytes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import stat
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rsi_env.sandbox.base import Limits, ShellResult

__all__ = ["DiskCap", "OutputCap", "Pumped", "SandboxCgroup", "hand_over", "pump", "run_process"]

_V1 = Path("/sys/fs/cgroup")


class SandboxCgroup:
    """The cgroups of one command: its process count and its total memory capped, all its processes killable.

    On cgroup v1 a group per controller (``pids``, ``memory``); on v2 one group with both. A controller
    this process may not use (not root, not delegated) is left out, and the caller falls back to
    rlimits for it (`memory` says whether the total memory cap holds).
    """

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    @property
    def memory(self) -> bool:
        """Whether the total memory of the command's processes is capped."""
        return any((p / "memory.max").exists() or (p / "memory.limit_in_bytes").exists() for p in self.paths)

    @classmethod
    def create(cls, max_procs: int, memory_bytes: int) -> SandboxCgroup | None:
        """New groups capping processes and memory, or None where no controller can be used here."""
        name = f"rsi-sandbox-{uuid.uuid4().hex[:12]}"
        paths: list[Path] = []
        unified = _V1 / "cgroup.subtree_control"
        if unified.exists():  # cgroup v2 mounted at /sys/fs/cgroup
            try:
                have = unified.read_text().split()
            except OSError:
                have = []
            settings = {"pids.max": str(max_procs)} if "pids" in have else {}
            if "memory" in have:
                settings |= {"memory.max": str(memory_bytes), "memory.swap.max": "0"}
            if settings and (p := _make(_V1 / name, settings)) is not None:
                paths.append(p)
        else:
            for controller, settings in (("pids", {"pids.max": str(max_procs)}),
                                         ("memory", {"memory.limit_in_bytes": str(memory_bytes)})):
                root = _V1 / controller
                if (root / "cgroup.procs").exists() and (p := _make(root / name, settings)) is not None:
                    paths.append(p)
        return cls(paths) if paths else None

    def join(self) -> None:
        """Move the calling process into the groups (run in the child before ``exec``)."""
        for p in self.paths:
            (p / "cgroup.procs").write_text("0")

    def pids(self) -> list[int]:
        found: set[int] = set()
        for p in self.paths:
            try:
                found |= {int(x) for x in (p / "cgroup.procs").read_text().split()}
            except OSError:
                continue
        return sorted(found)

    def kill_all(self, within_s: float = 5.0) -> None:
        """SIGKILL every process in the groups until none is left (a fork bomb cannot outgrow pids.max)."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def out_of_memory(self) -> bool:
        """Whether the memory cap killed or stalled a process of the command."""
        for p in self.paths:
            with contextlib.suppress(OSError, ValueError):
                if (p / "memory.events").exists():
                    events = dict(line.split() for line in (p / "memory.events").read_text().splitlines())
                    if int(events.get("oom_kill", 0)) or int(events.get("max", 0)):
                        return True
                elif (p / "memory.failcnt").exists() and int((p / "memory.failcnt").read_text()) > 0:
                    return True
        return False

    def close(self) -> None:
        self.kill_all()
        for p in self.paths:
            with contextlib.suppress(OSError):
                p.rmdir()


def _make(path: Path, settings: dict[str, str]) -> Path | None:
    """A new cgroup at ``path`` with ``settings`` written, or None (and nothing left behind) where that fails."""
    try:
        path.mkdir()
    except OSError:
        return None
    try:
        for key, value in settings.items():
            if (path / key).exists():
                (path / key).write_text(value)
    except OSError:
        with contextlib.suppress(OSError):
            path.rmdir()
        return None
    return path


class DiskCap:
    """The bytes a command's files hold in ``root`` may grow to ``limit``; ``over()`` says when they passed it.

    Polled while the command runs (a kill follows), so a command can overshoot by what it writes
    between two polls; rlimits cap each file on top. Counting stops at ``max_entries`` files, which
    counts as over the cap (a folder of millions of empty files is an attack on the poll itself).
    """

    def __init__(self, root: Path, limit: int, max_entries: int = 100_000) -> None:
        self.root, self.limit, self.max_entries = root, limit, max_entries
        self.start = self.usage()

    def usage(self) -> int:
        total, entries = 0, 0
        stack = [str(self.root)]
        while stack:
            try:
                with os.scandir(stack.pop()) as it:
                    for e in it:
                        entries += 1
                        if entries > self.max_entries:
                            return self.limit + 1
                        try:
                            st = e.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        total += st.st_blocks * 512
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
            except OSError:
                continue
        return total

    def over(self) -> str | None:
        """Why the command must stop (the workspace grew past the cap), or None."""
        used = self.usage()
        if used > self.limit and used > self.start:
            return (f"killed: the workspace holds {used >> 20} MiB, over the sandbox's cap of {self.limit >> 20} MiB "
                    "(delete files to go on)")
        return None


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


@dataclass
class Pumped:
    """How reading a command's output ended: EOF, the deadline, the output cap, or a watch's reason."""

    eof: bool = False
    timed_out: bool = False
    stopped: str | None = None


def pump(fd: int, cap: OutputCap, deadline: float, watch: Callable[[], str | None] | None = None,
         every_s: float = 0.1) -> Pumped:
    """Read ``fd`` into ``cap`` until EOF, the deadline or the cap; ``watch`` (polled) may stop it with a reason."""
    next_watch = time.monotonic() + every_s
    while True:
        now = time.monotonic()
        left = deadline - now
        if left <= 0:
            return Pumped(timed_out=True)
        if watch is not None and now >= next_watch:
            next_watch = now + every_s
            if (why := watch()) is not None:
                return Pumped(stopped=why)
        ready, _, _ = select.select([fd], [], [], min(left, every_s))
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        except OSError:
            return Pumped(eof=True)
        if not chunk:
            return Pumped(eof=True)
        if cap.feed(chunk):
            return Pumped()


_CLONE_NEWNET = 0x40000000


def _unshare_network() -> None:
    """Move the calling process into a new network namespace (only ``lo``, down): no network at all."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")


def _preexec(limits: Limits, cgroup: SandboxCgroup | None, uid: int | None, no_network: bool) -> Callable[[], None]:
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


def hand_over(root: Path, uid: int) -> None:
    """Give the workspace to ``uid`` without following links (a link out must not change its target's owner)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            with contextlib.suppress(OSError):
                st = os.lstat(p)
                if stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
                    os.lchown(p, uid, uid)
    os.lchown(root, uid, uid)


def run_process(argv: Sequence[str], *, cwd: Path, env: dict[str, str], limits: Limits, timeout_s: float,
                max_output: int, backend: str, uid: int | None = None, no_network: bool = False,
                disk: DiskCap | None = None) -> ShellResult:
    """Run ``argv`` bounded by ``limits``, the timeout and the output cap; kill all it started at the end.

    ``uid``: drop to this user in the child (the local backend run by root uses ``nobody``);
    ``no_network``: start the child in a network namespace of its own (needs root); ``disk``: stop the
    command once the workspace grows past its cap.
    """
    cgroup = SandboxCgroup.create(limits.max_procs, limits.memory_bytes)
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
    got = pump(proc.stdout.fileno(), cap, t0 + timeout_s, None if disk is None else disk.over)
    timed_out = got.timed_out
    rc: int | None = None
    if got.eof:
        while rc is None and not timed_out and got.stopped is None:
            try:
                rc = proc.wait(timeout=min(max(t0 + timeout_s - time.monotonic(), 0.0), 0.1))
            except subprocess.TimeoutExpired:
                timed_out = time.monotonic() >= t0 + timeout_s
                if disk is not None:
                    got.stopped = disk.over()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    oom = cgroup is not None and cgroup.out_of_memory()
    if cgroup is not None:
        cgroup.close()
    proc.wait()
    proc.stdout.close()
    if timed_out or cap.truncated or got.stopped:
        rc = None
    error = got.stopped
    if rc is not None and rc < 0:
        error = f"killed by signal {-rc} ({signal.Signals(-rc).name})" if -rc in signal.valid_signals() else None
    if oom and error is None and rc != 0:
        error = f"out of memory: the sandbox's processes together passed {limits.memory_bytes >> 20} MiB"
    return ShellResult(rc, cap.text(), timed_out, cap.truncated, error, time.monotonic() - t0, backend)
