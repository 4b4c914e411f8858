"""Measuring a RSI/Kernel kernel: the hidden harness in a fresh sandbox, its signed report checked here.

`measure_kernel` copies the agent's ``kernel.py``, the public op definitions (``ops.py``) and the hidden
harness, worker and references into a new folder, runs the harness there in a new sandbox (never in
the env's process, never in the agent's own sandbox), and reads back one report, which it believes
only if it carries the harness's HMAC under a secret made for this run (see ``hidden/harness.py`` for
what is checked and how the time is taken). Reports are cached by everything that decides them — the
kernel's text, the op, the seeds, the dtype (pinned or drawn), the device, the model's sizes, the backend
and the harness's own files — so measuring unchanged code again returns the first measurement: an episode cannot re-roll
timing noise by benchmarking the same code twice, and a seeded episode replays the same numbers in
one process (timings themselves are not reproducible across processes or machines).
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.tier import LRU
from rsi_env.engine.workload import Workload
from rsi_env.errors import RsiEnvError
from rsi_env.sandbox import isolation
from rsi_env.sandbox.backends import default_backend
from rsi_env.sandbox.base import Limits
from rsi_env.sandbox.fresh import run_fresh
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.sandbox.profile import Profile
from rsi_env.sandbox.signed import signed_body

__all__ = ["DTYPES", "HARNESS_TIMEOUT_S", "INTEGER_OPS", "KernelResult", "KernelTier", "check_dtype", "measure_kernel"]

KERNEL_DIR = CODE_DIR / "kernel"
HARNESS_FILES = {"ops.py": KERNEL_DIR / "ops.py", "harness.py": KERNEL_DIR / "hidden" / "harness.py",
                 "worker.py": KERNEL_DIR / "hidden" / "worker.py", "reference.py": KERNEL_DIR / "hidden" / "reference.py",
                 "isolation.py": Path(isolation.__file__)}   # the process tree's hold, shared with VLLMBugFix
HARNESS_TIMEOUT_S = 120.0
DTYPES = ("bfloat16", "float16", "float32")   # ops.DTYPES (ops.py imports torch; the env may not): what can be pinned
INTEGER_OPS = ("moe_align_block_size",)        # ops.INTEGER_OPS: no floating tensors, no dtype to pin
ROUNDS = 7   # interleaved blocks a side, the fastest of which counts (RSI/Kernel-v0's; v1 takes 5)
# A timed call must not imply moving its bytes faster than this times the device's measured peak (hidden/harness.py's
# roofline). 1.5: the peak is the best of torch's own copies and sums, which a hand-tuned kernel can beat by some
# tens of per cent (wider vector loads, non-temporal stores that skip a copy's read-for-ownership), and the kernel's
# fastest block is set against a best-of-five peak taken at another moment of a shared machine; a deferred or
# skipped call implies orders of magnitude more (a no-op: thousands of times the peak), so the slack costs nothing.
ROOFLINE_SLACK = 1.5
BLOCK_S = {"cpu": 0.005, "cuda": 0.01}   # seconds of calls per timed block
MAX_BLOCK_BYTES = {"cpu": 256 << 20, "cuda": 8 << 30}
_LIMITS = {"cpu": Limits(cpu_s=240, memory_bytes=6 << 30, file_bytes=512 << 20, max_procs=64),
           # CUDA maps far more address space than it uses: no address-space cap on the GPU tier
           "cuda": Limits(cpu_s=600, memory_bytes=1 << 46, file_bytes=4 << 30, max_procs=256)}
_CACHE: LRU[str, KernelResult] = LRU(256)


@dataclass(frozen=True)
class KernelResult:
    """One measurement: correct on every check seed, the speedup over PyTorch eager, or why not."""

    correct: bool
    speedup: float | None                  # geometric mean over the timed shapes of eager time / kernel time
    error: str | None = None
    setup_error: bool = False              # the harness could not run at all (no CUDA, no torch): not the kernel's fault
    excessive_speedup: bool = False        # timed faster than the device's memory can serve a correct call: refused
    checked: tuple[str, ...] = ()
    timings: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    device_seconds: float = 0.0
    peak_bytes_per_s: float | None = None  # the device's memory bandwidth as the harness measured it (the roofline)

    @property
    def ok(self) -> bool:
        """Correct everywhere, timed, and within the device's roofline."""
        timed = self.speedup is not None and math.isfinite(self.speedup) and self.speedup > 0
        return self.correct and not self.excessive_speedup and timed

    @property
    def score(self) -> float:
        """log(speedup over PyTorch eager); -inf unless correct and timed."""
        return math.log(self.speedup) if self.ok and self.speedup else -math.inf

    def summary(self) -> str:
        if self.setup_error:
            return f"NOT MEASURED: {self.error}"
        if self.excessive_speedup:
            return f"REFUSED: {self.error}"
        if not self.correct:
            return f"INCORRECT: {self.error}"
        lines = [f"correct on {len(self.checked)} input sets; speedup over PyTorch eager "
                 f"{self.speedup:.2f}x (geometric mean)" if self.speedup else "correct; not timed"]
        if self.peak_bytes_per_s:
            lines[0] += f"; the device's measured peak bandwidth {self.peak_bytes_per_s / 1e9:.1f} GB/s"
        lines += [f"  {t['shape']}: kernel {t['candidate_s'] * 1e3:.3f} ms, eager {t['reference_s'] * 1e3:.3f} ms "
                  f"-> {t['speedup']:.2f}x{_bandwidth(t)}" for t in self.timings]
        return "\n".join(lines)


def _bandwidth(timing: dict[str, Any]) -> str:
    """The bandwidth a timed call implies (its roofline bytes over its time), where the harness reported it."""
    bw = timing.get("bytes_per_s")
    return f" ({bw / 1e9:.1f} GB/s of the bytes it must move)" if isinstance(bw, (int, float)) else ""


def _failed(reason: str, setup: bool = False) -> KernelResult:
    return KernelResult(False, None, reason, setup_error=setup)


def kernel_profile(device: str) -> Profile:
    """What the harness's sandbox (and the agent's shell) shows: torch and numpy, and the GPU's device files on CUDA."""
    return Profile(packages=("torch", "numpy"), gpu=device == "cuda")


def _harness_digest() -> str:
    h = hashlib.sha256()
    for name, path in sorted(HARNESS_FILES.items()):
        h.update(name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def check_dtype(op: str, dtype: str | None) -> None:
    """Refuse a dtype that cannot be pinned for ``op``, saying why."""
    if dtype is None:
        return
    if dtype not in DTYPES:
        raise RsiEnvError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    if op in INTEGER_OPS:
        raise RsiEnvError(f"{op} has no floating-point tensors (its inputs and outputs are int32): leave dtype unset")


def measure_kernel(source: str, op: str, seeds: list[int], model: dict[str, int], *, device: str = "cpu",
                   timed_shapes: int = 2, backend: str = "auto", use_cache: bool = True,
                   dtype: str | None = None, rounds: int = ROUNDS) -> KernelResult:
    """Check ``source`` (a kernel.py) on ``seeds`` and time it on the first ``timed_shapes`` of them.

    ``dtype`` pins every set's dtype (one of `DTYPES`); None lets each seed draw its own.
    """
    check_dtype(op, dtype)
    name = default_backend() if backend == "auto" else backend
    scale = "cuda" if device == "cuda" else "cpu"
    request = {"op": op, "dtype": dtype, "device": device, "model": model, "scale": scale, "check_seeds": list(seeds),
               "timed_shapes": timed_shapes, "rounds": rounds, "block_s": BLOCK_S[scale],
               "max_block_bytes": MAX_BLOCK_BYTES[scale], "roofline_slack": ROOFLINE_SLACK}
    key = hashlib.sha256(json.dumps([source, request, name, _harness_digest()], sort_keys=True).encode()).hexdigest()
    hit = _CACHE.get(key) if use_cache else None
    if hit is not None:
        return hit
    secret = secrets.token_hex(32)
    files: dict[str, str | bytes] = {rel: path.read_bytes() for rel, path in HARNESS_FILES.items()}
    files["kernel.py"] = source
    files["request.json"] = json.dumps({**request, "secret": secret})
    try:
        run = run_fresh(files, "exec {python} -I harness.py request.json result.json", backend=name,
                        timeout_s=HARNESS_TIMEOUT_S, max_output=8192, read=["result.json"], limits=_LIMITS[scale],
                        profile=kernel_profile(device))
    except Exception as exc:  # noqa: BLE001  (the sandbox itself failed, e.g. the Docker engine went away)
        return _failed(f"the {name} sandbox failed before the kernel was measured: {type(exc).__name__}: "
                       f"{str(exc)[:300]}", setup=True)
    res, raw = run.result, run.outputs.get("result.json")
    if res.timed_out:
        return _failed(f"the measurement did not finish {run.timeout_text()}: does the kernel hang?")
    result = _parse(raw, secret, res.summary())
    if result.setup_error and device == "cuda" and name != "local":
        result = _failed(f"{result.error}; the {name} sandbox binds the NVIDIA device files /dev/nvidia* that exist "
                         "on this machine: none were usable here", setup=True)
    if not result.setup_error:  # (a run that timed out returned above: its time says as much about the step)
        _CACHE.put(key, result)
    return result


def _parse(raw: bytes | None, secret: str, output: str) -> KernelResult:
    if raw is None:
        tail = output.strip()[-800:]
        if "No module named 'torch'" in output:
            return _failed(f"the sandbox's Python cannot import torch ({tail})", setup=True)
        return _failed(f"the harness produced no report; the kernel's process may have killed it ({tail})")
    try:
        outer = json.loads(raw)
    except ValueError:
        outer = None
    body = signed_body(outer, secret)
    if body is None:
        return _failed("the report does not carry the harness's signature: something other than the harness "
                       "wrote result.json (the kernel's process must leave the harness's files alone)")
    speedup = body.get("speedup")
    return KernelResult(correct=bool(body["correct"]), speedup=float(speedup) if speedup is not None else None,
                        error=body.get("error"), setup_error=bool(body.get("setup_error", False)),
                        excessive_speedup=bool(body.get("excessive_speedup", False)),
                        checked=tuple(body.get("checked", ())), timings=tuple(body.get("timings", ())),
                        device_seconds=float(body.get("device_seconds", 0.0)),
                        peak_bytes_per_s=body.get("peak_bytes_per_s"))


class KernelTier:
    """The tier of RSI/Kernel: `measure_kernel` on one op and dtype, the model's sizes, a device and a sandbox backend.

    It measures kernels, not engine configurations: the task has no engine flags, and `measure_all`
    refuses, saying so. ``name`` is the env's tier: ``sim`` times on the CPU, ``real`` on CUDA.
    """

    engine_version = "0.26"

    def __init__(self, op: str, sizes: dict[str, int], device: str, backend: str, timed_shapes: int,
                 dtype: str | None = None, rounds: int = ROUNDS) -> None:
        self.op, self.sizes, self.device, self.backend, self.timed_shapes = op, sizes, device, backend, timed_shapes
        self.dtype, self.rounds = dtype, rounds
        self.name = "real" if device == "cuda" else "sim"

    def measure(self, source: str, seeds: list[int]) -> KernelResult:
        """Check ``source`` on ``seeds`` and time it on the first ``timed_shapes`` of them, in a fresh sandbox."""
        return measure_kernel(source, self.op, seeds, self.sizes, device=self.device, timed_shapes=self.timed_shapes,
                              backend=self.backend, dtype=self.dtype, rounds=self.rounds)

    def measure_all(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]:
        raise RsiEnvError("RSI/Kernel measures kernels (KernelTier.measure), not engine configurations")
