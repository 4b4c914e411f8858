"""RSI/Scheduler-v0's tier: a workspace policy's keys from a fresh sandbox, then the sim or the real engine runs them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.tier import LRU
from rsi_env.engine.workload import Workload
from rsi_env.real.tier import RealTier
from rsi_env.sim.policy_hook import PolicyError, PolicyKeys, request_table, simulate_policy
from rsi_env.tasks.scheduler.sandboxed import policy_keys

__all__ = ["PolicyTier"]


def _keys_sha(keys: PolicyKeys) -> str:
    return hashlib.sha256(keys.waiting.tobytes() + keys.victim.tobytes()).hexdigest()


class PolicyTier:
    """A tier for a workspace policy: keys from ``policy.py`` in a fresh sandbox, then the engine runs them.

    ``source()`` gives the policy text to measure (or raises `PolicyError`); a policy that cannot be
    run measures as an error on every workload, with the reason, and no engine starts. On the sim tier
    the simulator runs here and measurements are cached by the keys, the resolved configuration and
    the workload. With ``real`` the keys go to the real engine (`RealTier.scheduled`: vLLM's scheduler
    ordered by them, `rsi_env.real.policy_scheduler`), never cached.
    ``last_source`` and ``last_keys`` are the policy and the keys of the last measurement (the keys
    empty where it failed); ``use_cache=False`` computes the keys afresh (`policy_keys`), as submit does.
    """

    def __init__(self, engine_version: str, source: Callable[[], str], backend: str, capacity: int = 2048,
                 real: RealTier | None = None) -> None:
        self.engine_version = engine_version
        self.source = source
        self.backend = backend
        self.real = real
        self.name = "sim" if real is None else "real"
        self.last_source: str | None = None
        self.last_keys: dict[str, PolicyKeys] = {}
        self.use_cache = True
        self.cache: LRU[str, Telemetry] = LRU(capacity)

    def measure_all(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]:
        self.last_keys = {}
        try:
            src = self.source()
            self.last_source = src
            keys = policy_keys(src, {w.name: request_table(w.trace()) for w in workloads}, self.backend,
                               use_cache=self.use_cache)
            self.last_keys = keys
        except PolicyError as exc:
            return [Telemetry.failed(f"policy: {exc}", tier=self.name) for _ in workloads]
        if self.real is not None:
            return self.real.scheduled(keys).measure_all(cfg, model, hw, workloads)
        out = []
        for w in workloads:
            ck = json.dumps([_keys_sha(keys[w.name]), self.engine_version, model.name, hw.name, cfg.to_dict(),
                             w.content_hash], sort_keys=True, default=str)
            tel = self.cache.get(ck)
            if tel is None:
                try:
                    tel = simulate_policy(cfg, model, hw, w, keys[w.name], engine_version=self.engine_version)[0]
                except PolicyError as exc:
                    return [Telemetry.failed(f"policy: {exc}") for _ in workloads]
                self.cache.put(ck, tel)
            out.append(tel)
        return out
