"""A trusted harness's hold on an untrusted worker: its process tree stopped at will, its CPU time, shared memory.

Shipped as a file beside a hidden harness that runs in a fresh sandbox (RSI/Kernel's ``harness.py``,
RSI/VLLMBugFix's ``supervisor.py``) and imported there (trusted, undumpable, the subreaper of
everything below it) before the worker starts; it holds nothing secret, imports only the standard
library and never the worker's code. `ProcessTree` stops every thread of every descendant (its own
session or not) and waits until each is stopped, so that nothing the worker started runs while the
harness reads, and counts the CPU seconds the tree has spent; `Arena` is the memory every kernel call
set lives in, owned by the harness and mapped by the worker.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import mmap
import os
import pickle
import signal
import time
from pathlib import Path
from typing import Any

__all__ = ["STOP_TIMEOUT_S", "Arena", "CpuClock", "ProcessTree", "StopFailure"]

STOP_TIMEOUT_S = 5.0


class StopFailure(Exception):
    """The worker's processes could not all be stopped in time."""


def _descendants(root: int) -> set[int]:
    """Every live process below ``root`` (this process is the subreaper, so orphans stay below it)."""
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for pid in kids.get(todo.pop(), ()):
            if pid not in found:
                found.add(pid)
                todo.append(pid)
    return found


def _all_stopped(pid: int) -> bool:
    """Every thread of ``pid`` is stopped, dead or gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tasks:
        with contextlib.suppress(OSError, IndexError):
            if Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "TtZXx":
                return False
    return True


class ProcessTree:
    """The worker and everything it starts: stopped (SIGSTOP, every thread) and continued as one."""

    def __init__(self, pid: int, what: str = "kernel") -> None:
        self.pid, self.stopped_pids, self.what = pid, {pid}, what

    def halt(self) -> None:
        """SIGSTOP the worker's process group and every process stopped before: at once, without looking for new
        ones. No thread of theirs runs user code after it (a pending SIGSTOP is taken before any thread returns
        to user mode); `stop` then finds what else was started and waits until everything has stopped."""
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGSTOP)
        for pid in self.stopped_pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGSTOP)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        pids: set[int] = set()
        while True:
            found = _descendants(os.getpid()) | {self.pid}
            for pid in found - pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGSTOP)
            while not all(_all_stopped(p) for p in found):
                if time.monotonic() > deadline:
                    raise StopFailure(f"the {self.what}'s processes could not be stopped after a call")
                time.sleep(0)
            if found == pids:            # nothing new was started while stopping: the whole tree is stopped
                break
            pids = found
        self.stopped_pids = pids

    def resume(self) -> None:
        for pid in self.stopped_pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)

    def kill(self) -> None:
        for pid in _descendants(os.getpid()) | {self.pid}:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


# ---- the CPU time the worker's tree spends ------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_times() -> dict[int, tuple[float, float]]:
    """Per live process below this one: (CPU seconds of all its threads, live and ended; CPU seconds of the
    children it reaped), from ``/proc/PID/stat``'s utime + stime and cutime + cstime."""
    out = {}
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError, ValueError, IndexError):
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = ((int(f[11]) + int(f[12])) / _TICK, (int(f[13]) + int(f[14])) / _TICK)
    return out


def _reaped_here() -> float:
    """CPU seconds of the children this process has reaped (the worker's orphans come back to this subreaper)."""
    t = os.times()
    return t.children_user + t.children_system


class CpuClock:
    """The CPU seconds every process and thread below this one spends between `start` and `read`.

    Two counts, the larger taken: the tree as the kernel accounts it (every live process's threads, the
    children each reaped, and those this process reaped), and the sum of each process's own time as last
    seen (`sample`, called while waiting), which still holds a process that ended unreaped into any count
    (a child whose parent ignores SIGCHLD is released without adding to its parent's times) up to its last
    sample. Clock ticks: ``1 / SC_CLK_TCK`` seconds (10 ms) a process.
    """

    def __init__(self) -> None:
        self.base_total = 0.0
        self.base_own: dict[int, float] = {}
        self.seen: dict[int, float] = {}

    def start(self) -> None:
        times = _cpu_times()
        self.base_total = sum(own + reaped for own, reaped in times.values()) + _reaped_here()
        self.base_own = {pid: own for pid, (own, _) in times.items()}
        self.seen = dict(self.base_own)

    def sample(self) -> dict[int, tuple[float, float]]:
        times = _cpu_times()
        for pid, (own, _) in times.items():
            self.seen[pid] = max(self.seen.get(pid, 0.0), own)
        return times

    def read(self) -> float:
        times = self.sample()
        total = sum(own + reaped for own, reaped in times.values()) + _reaped_here() - self.base_total
        own = sum(t - self.base_own.get(pid, 0.0) for pid, t in self.seen.items())
        return max(total, own)


# ---- the memory shared with the worker ----------------------------------------------------------------
class Arena:
    """The memory every call set lives in: this process's, mapped by the worker too.

    CPU: a memfd of ``size`` bytes, sealed against shrinking or growing (the worker cannot pull pages from
    under this process), passed to the worker at its start. CUDA: a device buffer, (re)allocated as large
    as a block needs and handed over by its CUDA IPC handle in the ``map`` request.
    """

    def __init__(self, device: str, size: int) -> None:
        self.device, self.size = device, size
        self.fd, self.map, self.buf, self.torch = -1, None, None, None
        if device == "cpu":   # pages are taken only as blocks touch them: the size costs address space only
            self.fd = os.memfd_create("rsi-kernel-sets", os.MFD_ALLOW_SEALING)
            os.ftruncate(self.fd, size)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self.map = mmap.mmap(self.fd, size)

    def attach(self, torch: Any) -> None:
        """View the memory as a flat uint8 tensor (once torch is imported, after the worker has started)."""
        self.torch = torch
        if self.map is not None:
            self.buf = torch.frombuffer(self.map, dtype=torch.uint8)

    def share(self, need: int) -> dict[str, Any]:
        """Room for ``need`` bytes; what the worker's ``map`` request needs to see it (CUDA: a new handle)."""
        if self.device == "cpu":
            if need > self.size:
                raise ValueError(f"internal: a block of {need} bytes exceeds the shared memory ({self.size})")
            return {}
        if self.buf is not None and self.buf.numel() >= need:
            return {}
        from torch.multiprocessing.reductions import reduce_tensor

        assert self.torch is not None
        self.buf = self.torch.empty(need, dtype=self.torch.uint8, device=self.device)
        _, args = reduce_tensor(self.buf)
        return {"handle": base64.b64encode(pickle.dumps(args)).decode()}
