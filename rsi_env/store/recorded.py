"""`Recorded`: a tier whose every measurement goes to the experience store, one trial per call.

It wraps the tier the way an httpx transport wraps another: it measures through the tier it holds, then
writes the rows (`rsi_env.store.record.record_measurements`) with what that tier says about the run
(`Recordable.record_fields`: the sim's deterministic keys, what vLLM resolved, the GPU time held). Behind
`rsi_env.engine.tier.Cached` it sees only what was measured now, so a cache hit is never recorded twice.
A store that cannot be written never fails the measurement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.tier import Tier
from rsi_env.engine.workload import Workload
from rsi_env.store.db import ExperienceStore
from rsi_env.store.record import record_measurements

__all__ = ["Recordable", "Recorded"]


class Recordable(Tier, Protocol):
    """A tier that says what a store row keeps of its last ``measure_all`` beside the telemetry (None: nothing
    was measured worth a row, e.g. the engine is not installed)."""

    def record_fields(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, workloads: Sequence[Workload],
                      tels: Sequence[Telemetry]) -> dict[str, Any] | None: ...


class Recorded:
    """``tier``'s measurements, each call's written to ``store`` (the process's default store if None)."""

    def __init__(self, tier: Recordable, store: ExperienceStore | None = None) -> None:
        self.tier, self.store = tier, store
        self.name, self.engine_version = tier.name, tier.engine_version

    def measure_all(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]:
        tels = self.tier.measure_all(cfg, model, hw, workloads)
        fields = self.tier.record_fields(cfg, model, hw, workloads, tels)
        if fields is not None:
            record_measurements(self.name, self.engine_version, cfg, model, hw, workloads, tels, store=self.store,
                                **fields)
        return tels
