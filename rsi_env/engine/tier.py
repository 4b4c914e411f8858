"""`Tier`: what measures an engine configuration, declared once for every tier.

The sim tier (`rsi_env.envs.measure.CachedSimTier`), the real engine (`rsi_env.real.RealTier`), a running
server (`rsi_env.real.endpoint.EndpointTier`) and the code tasks' tiers (a workspace's engine, a scheduling
policy) all measure the same way: one configuration of one model on one chip, every workload, one
`Telemetry` each, in order. A task-specific input (a policy's keys, a workspace's files) comes from a tier
that wraps another, never from an extra argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload

__all__ = ["Tier"]


class Tier(Protocol):
    """``name`` (``"sim"``, ``"real"``, ``"endpoint"``), the vLLM release it measures, and `measure_all`."""

    name: str
    engine_version: str

    def measure_all(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]: ...
