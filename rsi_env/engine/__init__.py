"""The shared vocabulary of both tiers: engine flags, models, hardware, workloads, telemetry."""

from __future__ import annotations

from rsi_env.engine.config import FLAGS, EngineConfig, FlagSpec, ResolvedConfig
from rsi_env.engine.hardware import HardwareSpec, list_hardware, load_hardware
from rsi_env.engine.model import ModelSpec, list_models, load_model
from rsi_env.engine.profile import PARTS, Profile
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import SLO, Workload, list_workloads, load_workload

__all__ = [
    "FLAGS", "PARTS", "EngineConfig", "FlagSpec", "HardwareSpec", "ModelSpec", "Profile", "ResolvedConfig", "SLO",
    "Telemetry", "Workload", "list_hardware", "list_models", "list_workloads", "load_hardware", "load_model",
    "load_workload",
]
