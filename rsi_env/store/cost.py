"""Cost accounting: the GPU-seconds a search spent on each tier, and what they cost (or would have) in USD.

A measurement's GPU-seconds are its duration times the GPUs its configuration occupies. On the
real tier that is GPU time actually held (the tier's store rows also charge the engine's start-up);
on the sim tier it is the *simulated* duration — what measuring the same thing on the real engine
would have cost — while the simulator itself spent only CPU wall time. Prices are the chip's
``price_per_hour`` (`HardwareSpec`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi_env.engine.engines import AnyConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.telemetry import Telemetry

__all__ = ["CostMeter", "gpu_seconds"]


def gpu_seconds(tels: Sequence[Telemetry], cfg: AnyConfig) -> float:
    """Duration x GPUs of the successful measurements of one configuration (a refusal occupies no GPU)."""
    gpus = int(cfg.num_gpus)
    return sum(t.duration_s * gpus for t in tels if t.ok)


@dataclass
class CostMeter:
    """GPU-seconds and USD per tier, summed over measurements."""

    tiers: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, tier: str, tels: Sequence[Telemetry], cfg: AnyConfig, hw: HardwareSpec,
            wall_s: float = 0.0) -> float:
        """Count one measurement (every workload of one configuration); returns its GPU-seconds."""
        gs = gpu_seconds(tels, cfg)
        t = self.tiers.setdefault(tier, {"measurements": 0.0, "gpu_seconds": 0.0, "usd": 0.0, "wall_s": 0.0})
        t["measurements"] += 1
        t["gpu_seconds"] += gs
        t["usd"] += gs * hw.price_per_hour / 3600.0
        t["wall_s"] += wall_s
        return gs

    @property
    def gpu_seconds(self) -> float:
        return sum(t["gpu_seconds"] for t in self.tiers.values())

    @property
    def usd(self) -> float:
        return sum(t["usd"] for t in self.tiers.values())

    def to_dict(self) -> dict[str, Any]:
        return {k: dict(v) for k, v in self.tiers.items()}

    def summary(self) -> str:
        parts = []
        for tier, t in sorted(self.tiers.items()):
            what = "GPU-s it would have cost on the real engine" if tier == "sim" else "GPU-s"
            parts.append(f"{tier}: {int(t['measurements'])} measurements, {t['gpu_seconds']:.0f} {what} "
                         f"(${t['usd']:.2f})" + (f", {t['wall_s']:.1f} s of wall time" if t["wall_s"] else ""))
        return "; ".join(parts) or "nothing measured"
