"""Measuring a configuration on a tier, with a cache for measurements that repeat exactly.

A measurement is a pure function of (tier, vLLM version, calibration, model, hardware, resolved
config, workload content): the cache key is exactly that, so a repeated measurement is free and
any change — a different calibration included — measures again. What is simulated (never a cache
hit) is recorded in the experience store (`rsi_env.store`), keyed the same way, so it is stored once.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from functools import cache

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.tier import Tier
from rsi_env.engine.workload import Workload
from rsi_env.errors import InvalidConfigError, RsiEnvError
from rsi_env.real.tier import RealTier
from rsi_env.sim import simulate
from rsi_env.sim.calibration import Calibration, load_calibration
from rsi_env.store.db import default_store_url
from rsi_env.store.record import record_measurements

__all__ = ["CachedSimTier", "get_tier", "real_tier"]


class CachedSimTier:
    """The sim tier behind an LRU cache of its measurements."""

    name = "sim"

    def __init__(self, engine_version: str, calibration: Calibration | None = None, capacity: int = 20000) -> None:
        self.engine_version = engine_version
        self._cal = calibration
        self._cache: OrderedDict[str, Telemetry] = OrderedDict()
        self.capacity = capacity
        self.hits = self.misses = 0
        self._store_url: str | None = None

    def calibration(self, hw: HardwareSpec) -> Calibration:
        return self._cal or load_calibration(hw.name, self.engine_version)

    def measure(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, w: Workload) -> Telemetry:
        return self.measure_all(cfg, model, hw, [w])[0]

    def _measure(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, w: Workload) -> tuple[Telemetry, str | None]:
        """The telemetry, and the key if it was simulated now (``None``: a cache hit, nothing new to record)."""
        cal = self.calibration(hw)
        try:
            resolved = cfg.resolve(model, hw, self.engine_version).to_dict()
        except InvalidConfigError:
            resolved = cfg.to_dict()
        key = json.dumps([self.engine_version, cal.id, model.name, model.total_params, hw.name, resolved,
                          w.content_hash], sort_keys=True, default=str)
        hit = self._cache.get(key)
        if hit is not None:
            self.hits += 1
            self._cache.move_to_end(key)
            return hit, None
        self.misses += 1
        tel = simulate(cfg, model, hw, w, engine_version=self.engine_version, calibration=cal)
        self._cache[key] = tel
        if len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return tel, key

    def measure_all(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]:
        """Every workload; what was simulated now (not cache hits) goes to the experience store, one trial."""
        url = default_store_url()
        if url != self._store_url:  # another store: what it lacks is simulated (and recorded) again
            self._cache.clear()
            self._store_url = url
        done = [self._measure(cfg, model, hw, w) for w in workloads]
        new = [k for k, (_, key) in enumerate(done) if key is not None]
        if new:
            record_measurements("sim", self.engine_version, cfg, model, hw, [workloads[k] for k in new],
                                [done[k][0] for k in new],
                                sim_keys=[hashlib.sha256(str(done[k][1]).encode()).hexdigest()[:32] for k in new])
        return [t for t, _ in done]


@cache
def real_tier() -> RealTier:
    """The process's shared real tier: the installed vLLM."""
    return RealTier()


@cache
def get_tier(tier: str, engine_version: str) -> Tier:
    """The process's shared tier for ``tier``: the cached simulator of a vLLM release, or the installed vLLM."""
    if tier == "sim":
        return CachedSimTier(engine_version)
    if tier == "real":
        return real_tier()
    raise RsiEnvError(f"unknown tier {tier!r}: use 'sim' or 'real'")
