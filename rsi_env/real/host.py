"""What machine a real measurement ran on: its CPU, the cores the driver could use, its GPUs.

The same configuration of the same vLLM on the same GPU model measures differently on different hosts: the
engine core's CPU work (scheduling, launching steps outside CUDA graphs) is on the host's CPU, and a workload at
its tipping point amplifies a few percent of step time into a different steady state (two H200 host
kinds: Llama-3.1-8B's `many_small` at TPOT p50 23-45 ms on one host kind, 10-13 ms on the other, with the same
driver and flags). Every real row therefore says where it was measured (``host``), so that rows of one host can be
told from another's when a calibration is fitted or an error is read. Names are hashed: a row identifies a host,
it does not publish its name.

One host kind also changes over time: on the one-H200 machines the CPU work of a step (a piecewise step's launches,
an eager step, a small model's decode step) took up to twice as long on some days as on others, while GPU-bound
steps did not move (docs/fidelity.md). ``cpu_probe_ms`` times a fixed piece of pure-Python work on the driver's
CPU when the row is measured, so that later fits can tell those states apart. A probe is one moment, though, and the
slow steps come and go within a workload; `CpuShares` reads the kernel's own accounting instead (``/proc/stat``): what
share of the host's CPU time went to work, to waiting, and to *steal* (time a virtual machine's CPUs were ready to
run but the hypervisor ran another tenant), sampled through a workload beside the engine's steps.
"""

from __future__ import annotations

import hashlib
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CpuShares", "cpu_probe_ms", "cpu_times", "gpu_names", "host_info", "wrong_hardware"]

PROBE_LOOPS = 200_000  # ~10-20 ms of interpreter work on a current server core
PROBE_REPEATS = 5


def _cpu_model(cpuinfo: str) -> str:
    """The first ``model name`` of ``/proc/cpuinfo`` (``platform.processor()`` where there is none)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return platform.processor() or platform.machine()


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _short_hash(text: str) -> str | None:
    return hashlib.sha256(text.encode()).hexdigest()[:12] if text.strip() else None


def gpu_names() -> list[str]:
    """The host's NVIDIA GPUs by ``nvidia-smi`` (none where it is missing or fails): asking CUDA itself would
    initialise it in the driver's process, before vLLM starts its own."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def _probe_work(loops: int) -> int:
    """Interpreter-bound work, alike to a scheduler's in kind: a loop of small integer arithmetic."""
    acc = 0
    for i in range(loops):
        acc = (acc + i * 7) % 1_000_003
    return acc


def cpu_probe_ms(loops: int = PROBE_LOOPS, repeats: int = PROBE_REPEATS) -> float:
    """Milliseconds the fixed pure-Python work takes on this process's CPU: the median of ``repeats`` timings (a
    median, not a minimum: a CPU shared with other tenants is part of what the probe is for)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _probe_work(loops)
        times.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(times), 3)


# The fields of ``/proc/stat``'s ``cpu`` line, in the kernel's order (proc(5)); guest time is already in user time.
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_times(stat: str | None = None) -> tuple[int, ...] | None:
    """The host's cumulative CPU time by `CPU_FIELDS` (clock ticks, all CPUs together) from ``/proc/stat`` (or the
    text given); None where there is none (not Linux), so that a row then says nothing rather than zero."""
    text = _read("/proc/stat") if stat is None else stat
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1:1 + len(CPU_FIELDS)]]
            return tuple(values + [0] * (len(CPU_FIELDS) - len(values)))
    return None


class CpuShares:
    """Shares of the host's CPU time between successive `sample` calls: work (everything but idle, iowait and steal),
    steal, and the same over the whole span sampled. Times are the caller's (seconds from its origin)."""

    def __init__(self, read: Callable[[], tuple[int, ...] | None] = cpu_times) -> None:
        self._read = read
        self._first = self._last = read()
        self.t: list[float] = []
        self.busy: list[float] = []
        self.steal: list[float] = []

    @staticmethod
    def _shares(before: tuple[int, ...], after: tuple[int, ...]) -> tuple[float, float] | None:
        d = dict(zip(CPU_FIELDS, (a - b for a, b in zip(after, before, strict=True)), strict=True))
        total = sum(d.values())
        if total <= 0:
            return None
        return (total - d["idle"] - d["iowait"] - d["steal"]) / total, d["steal"] / total

    def sample(self, t: float) -> None:
        """Record the shares since the last sample, stamped ``t`` (nothing when no tick has passed since)."""
        now = self._read()
        if now is None or self._last is None:
            return
        shares = self._shares(self._last, now)
        if shares is None:
            return
        self._last = now
        self.t.append(round(t, 4))
        self.busy.append(round(shares[0], 4))
        self.steal.append(round(shares[1], 4))

    def summary(self) -> dict[str, Any] | None:
        """The whole span's busy and steal shares and the samples (None where the host has no ``/proc/stat``)."""
        if self._first is None or self._last is None:
            return None
        whole = self._shares(self._first, self._last)
        return {"busy_frac": round(whole[0], 4) if whole else None, "steal_frac": round(whole[1], 4) if whole else None,
                "t": self.t, "busy": self.busy, "steal": self.steal}


def wrong_hardware(hardware: str, gpus: Sequence[str]) -> str | None:
    """Why rows measured on ``gpus`` (`gpu_names`) must not be filed under the catalog's ``hardware``, or
    None. The chip is the catalog name's first part (``h100-sxm`` -> H100), looked for among each GPU name's words;
    every GPU must be that chip. A lent machine can be another card than the plan asked for, and a row labelled with
    the wrong chip would calibrate and judge the simulator against it. No GPU (``vllm-cpu``) or ``cpu``: nothing to
    compare."""
    chip = hardware.split("-")[0].upper()
    if not gpus or chip == "CPU":
        return None
    if all(chip in name.upper().replace("-", " ").split() for name in gpus):
        return None
    return (f"wrong_hardware: rows for {hardware!r} asked, but this host's GPUs are {list(gpus)}; "
            "measure under the catalog entry of the card that is here")


def host_info(cpu_probe: float | None = None) -> dict[str, Any]:
    """The measuring host: CPU model, logical CPUs and those this process may run on, the GPUs and those visible
    to it, Python and the OS, hashes of the host name and machine id, and the CPU probe (`cpu_probe_ms`; taken
    here unless given: the driver takes it before the engine starts, which would otherwise run beside it)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 0
    return {
        "cpu": _cpu_model(_read("/proc/cpuinfo")),
        "cpus": os.cpu_count() or 0,
        "cpus_usable": usable,
        "gpus": gpu_names(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "node": _short_hash(platform.node()),
        "machine_id": _short_hash(_read("/etc/machine-id")),
        "cpu_probe_ms": cpu_probe_ms() if cpu_probe is None else cpu_probe,
    }
