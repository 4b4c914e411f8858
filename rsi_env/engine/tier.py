"""`Tier`: what measures an engine configuration, declared once for every tier; `Cached`, a tier that remembers.

The sim tier (`rsi_env.sim.SimTier`), the real engine (`rsi_env.real.RealTier`), a running server
(`rsi_env.real.endpoint.EndpointTier`) and the code tasks' tiers (a workspace's engine, a scheduling policy)
all measure the same way: one configuration of one model on one chip, every workload, one `Telemetry` each,
in order. What a tier does beside measuring comes from a tier that wraps it, in the manner of httpx's
transports: `Cached` answers a measurement it has seen, `rsi_env.store.Recorded` writes what was measured to
the experience store, and a task-specific input (a policy's keys, a workspace's files) comes from a tier that
wraps another, never from an extra argument. `rsi_env.envs.measure.get_tier` composes them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, Protocol, TypeVar

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload

__all__ = ["LRU", "Cached", "MeasurementKey", "Tier"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Tier(Protocol):
    """``name`` (``"sim"``, ``"real"``, ``"endpoint"``), the vLLM release it measures, and `measure_all`."""

    name: str
    engine_version: str

    def measure_all(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]: ...


# A measurement's identity: equal keys measure equal (the tier is deterministic there).
MeasurementKey = Callable[[EngineConfig, ModelSpec, HardwareSpec, Workload], str]


class LRU(Generic[K, V]):
    """A bounded mapping that forgets the least recently used entry first; ``hits`` and ``misses`` count lookups."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: OrderedDict[K, V] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


class Cached:
    """``tier`` behind an LRU cache of single measurements, keyed by ``key``: only the misses are measured.

    The misses of one call are measured together, in one ``tier.measure_all`` (one trial, in order), so a
    wrapping-inside `Recorded` writes only what was measured now. ``scope`` names what the cache is valid for
    (e.g. the experience store in use): when its value changes the cache starts empty, so that what a new
    store lacks is measured, and recorded, again.
    """

    def __init__(self, tier: Tier, key: MeasurementKey, *, capacity: int = 20000,
                 scope: Callable[[], object] | None = None) -> None:
        self.tier, self.key = tier, key
        self.name, self.engine_version = tier.name, tier.engine_version
        self.cache: LRU[str, Telemetry] = LRU(capacity)
        self._scope = scope
        self._scope_value: object = None

    @property
    def hits(self) -> int:
        return self.cache.hits

    @property
    def misses(self) -> int:
        return self.cache.misses

    def measure_all(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]:
        if self._scope is not None:
            now = self._scope()
            if now != self._scope_value:
                self.cache.clear()
                self._scope_value = now
        keys = [self.key(cfg, model, hw, w) for w in workloads]
        out: list[Telemetry | None] = [self.cache.get(k) for k in keys]
        missed = [i for i, t in enumerate(out) if t is None]
        if missed:
            for i, tel in zip(missed, self.tier.measure_all(cfg, model, hw, [workloads[i] for i in missed]),
                              strict=True):
                self.cache.put(keys[i], tel)
                out[i] = tel
        return [t for t in out if t is not None]
