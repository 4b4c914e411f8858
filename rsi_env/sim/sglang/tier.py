"""`SglangSimTier`: SGLang's simulator behind the `Tier` seam, as `rsi_env.sim.SimTier` is vLLM's.

Deterministic, so a measurement is a pure function of its `key` (the SGLang release it models, the calibration
that prices its passes, model, chip, the full configuration, the workload's content): behind `Cached` a repeat is
free, and `Recorded` writes it to the experience store once. Its ``engine_version`` is ``sglang-0.5.17``: the store
keys rows by engine_version, and warm starts and calibration match a vLLM release by prefix ("0.26", "0.26.%"), so
SGLang's rows can never be read as a vLLM release's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rsi_env.engine.engines import SGLANG_RELEASE
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.sglang_config import SglangConfig
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.errors import InvalidConfigError
from rsi_env.sim import store_sim_key
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.sglang.simulate import sglang_calibration, simulate_sglang

__all__ = ["SGLANG_SIM_VERSION", "SglangSimTier"]

SGLANG_SIM_VERSION = SGLANG_RELEASE  # the release whose scheduler the sim models


class SglangSimTier:
    """SGLang's simulator as a tier; ``calibration`` (None: the chip's calibration in use) prices its passes."""

    name = "sim"

    def __init__(self, calibration: Calibration | str | Path | None = None) -> None:
        self.engine_version = SGLANG_SIM_VERSION
        self._calibration = calibration

    def calibration(self, hw: HardwareSpec) -> Calibration:
        """The calibration this tier prices ``hw``'s passes with."""
        c = self._calibration
        return c if isinstance(c, Calibration) else sglang_calibration(hw.name, c)

    def measure_all(self, cfg: SglangConfig | Mapping[str, Any] | None, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]:
        cal = self.calibration(hw)
        return [simulate_sglang(cfg if cfg is None or isinstance(cfg, SglangConfig) else dict(cfg), model, hw, w,
                                calibration=cal) for w in workloads]

    def key(self, cfg: SglangConfig | Mapping[str, Any] | None, model: ModelSpec, hw: HardwareSpec,
            w: Workload) -> str:
        """What the measurement depends on: release, calibration, model, chip, every flag, workload content."""
        if isinstance(cfg, SglangConfig):
            flags = cfg.to_dict()
        else:
            try:
                flags = SglangConfig.from_dict(dict(cfg or {})).to_dict()
            except InvalidConfigError:  # a refusal is measured (its error) once per spelling
                flags = dict(cfg or {})
        return json.dumps([self.engine_version, self.calibration(hw).id, model.name, model.total_params, hw.name,
                           flags, w.content_hash], sort_keys=True, default=str)

    def record_fields(self, cfg: SglangConfig | Mapping[str, Any] | None, model: ModelSpec, hw: HardwareSpec,
                      workloads: Sequence[Workload], tels: Sequence[Telemetry]) -> dict[str, Any]:
        """Each row's ``sim_key``: the store keeps a deterministic measurement once."""
        return {"sim_keys": [store_sim_key(self.key(cfg, model, hw, w)) for w in workloads]}
