"""Promotion on submit: the submitted configuration re-measured on the real tier, and judged there.

An env built with ``promote_on_submit=True`` searches on the cheap tier and, at submit, measures
the engine's defaults and the submitted configuration on the real tier (`RealTier` of the engine the env
tunes, vLLM or SGLang: one engine start each; the defaults' measurement is kept for later episodes on the
same workloads). The binary reward's guards are then checked on the real measurements, with the real score (against the real
defaults) and, unless the task allows a precision change, the output guard: greedy tokens of the
first requests of each workload must match the defaults'. The continuous reward stays on the
search tier: the agent is paid for what it measured, not for the promotion, and the promotion's
GPU-seconds are the evaluator's, not charged to the agent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.real.tier import RealTier
from rsi_env.reward.guards import GuardResult, OutputTokens, output_guard
from rsi_env.store.recorded import Recorded

__all__ = ["Promoter", "RealMeasurement"]


@dataclass(frozen=True)
class RealMeasurement:
    """One configuration measured on real: telemetry per workload, recorded greedy tokens, GPU-seconds."""

    tels: list[Telemetry]
    tokens: OutputTokens
    gpu_s: float


@dataclass
class Promoter:
    """Measures configurations on the real tier for one env; remembers the defaults' measurement."""

    record_tokens: int = 8
    min_agreement: float = 0.9
    timeout_s: float = 900.0
    engine: str = "vllm"  # the engine the env tunes: its real tier runs the same one
    tier: RealTier | None = None
    _base: dict[str, RealMeasurement] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tier is None:
            self.tier = RealTier(timeout_s=self.timeout_s, record_tokens=self.record_tokens, engine=self.engine)

    def measure(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                workloads: Sequence[Workload]) -> RealMeasurement:
        assert self.tier is not None
        t0 = time.monotonic()
        tels = Recorded(self.tier).measure_all(cfg, model, hw, list(workloads))
        gpus = cfg.num_gpus
        tokens = {r["workload"]: r["counters"].get("output_token_ids") or {} for r in self.tier.last_rows}
        return RealMeasurement(tels, tokens, (time.monotonic() - t0) * gpus)

    @staticmethod
    def _key(cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, workloads: Sequence[Workload]) -> str:
        return json.dumps([model.name, hw.name, cfg.to_dict(), [w.content_hash for w in workloads]], default=str)

    def has_baseline(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                     workloads: Sequence[Workload]) -> bool:
        """Whether a successful real measurement of these defaults on these workloads is kept."""
        m = self._base.get(self._key(cfg, model, hw, workloads))
        return m is not None and all(t.ok for t in m.tels)

    def remember_baseline(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                          workloads: Sequence[Workload], measurement: RealMeasurement) -> None:
        """Use a real measurement of the defaults made elsewhere (e.g. by a promote stage) instead of measuring."""
        self._base[self._key(cfg, model, hw, workloads)] = measurement

    def baseline(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                 workloads: Sequence[Workload]) -> RealMeasurement:
        """The engine's defaults on real for these workloads, measured once per env (again if it failed)."""
        if not self.has_baseline(cfg, model, hw, workloads):
            self._base[self._key(cfg, model, hw, workloads)] = self.measure(cfg, model, hw, workloads)
        return self._base[self._key(cfg, model, hw, workloads)]

    def outputs(self, base: RealMeasurement, cand: RealMeasurement) -> GuardResult:
        return output_guard(base.tokens, cand.tokens, self.min_agreement)

    @staticmethod
    def info(sim_score: float | None, real_score: float, sim_passed: bool, real: RealMeasurement,
             base: RealMeasurement, outputs: GuardResult | None, gpu_s: float) -> dict[str, Any]:
        """What ``info["promotion"]`` says: both tiers' scores, the sim verdict, real telemetry, GPU-seconds spent."""
        return {"sim_score": sim_score, "real_score": real_score, "sim_passed": sim_passed,
                "real_telemetry": [t.to_dict() for t in real.tels],
                "real_baseline_telemetry": [t.to_dict() for t in base.tels], "gpu_s": gpu_s,
                "outputs": None if outputs is None else {"ok": outputs.ok, "reason": outputs.reason}}
