"""`Telemetry`: what one measurement returns, on either tier (field names from docs/architecture.md).

Both tiers produce per-request timestamps and a few engine counters; :func:`summarize` turns them
into a `Telemetry`, so the two tiers compute percentiles, goodput and cost the same way. Each
`Telemetry` also carries its `Profile`: where the engine's time went (`rsi_env.engine.profile`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from rsi_env.engine.profile import Profile
from rsi_env.engine.workload import SLO

__all__ = ["GRAPH_MODES", "Telemetry", "RequestTimings", "summarize"]

# How a step runs, by vLLM's CUDAGraphMode names, as codes in the step traces of both tiers.
GRAPH_MODES = {"NONE": 0, "PIECEWISE": 1, "FULL": 2}


@dataclass
class Telemetry:
    """One measurement. Times in seconds; ``error`` is None or a short reason (``oom``, ``invalid_config: …``)."""

    duration_s: float = 0.0
    req_per_s: float = 0.0
    out_tok_per_s: float = 0.0
    total_tok_per_s: float = 0.0
    ttft_p50: float = 0.0
    ttft_p90: float = 0.0
    ttft_p99: float = 0.0
    tpot_p50: float = 0.0
    tpot_p90: float = 0.0
    tpot_p99: float = 0.0
    e2e_p50: float = 0.0
    e2e_p99: float = 0.0
    goodput_req_per_s: float = 0.0
    num_preemptions: int = 0
    prefix_cache_hit_rate: float = 0.0
    kv_cache_usage_peak: float = 0.0
    num_gpu_blocks: int = 0
    mean_batch_size: float = 0.0
    cost_per_mtok_usd: float = 0.0
    error: str | None = None
    # Where the engine's time went (`Profile`; empty for a failed measurement or where nothing profiled it).
    profile: Profile = field(default_factory=Profile)
    # Provenance: which tier and calibration produced it (not part of the comparison).
    tier: str = "sim"
    calibration: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """Plain data, field by field (every field a scalar but the profile): what each env step records."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["profile"] = self.profile.to_dict()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Telemetry:
        """The telemetry ``to_dict`` wrote (unknown keys ignored; one stored before profiles has an empty one)."""
        names = {f.name for f in fields(cls)}
        vals = {k: v for k, v in raw.items() if k in names}
        vals["profile"] = Profile.from_dict(vals.get("profile"))
        return cls(**vals)

    @classmethod
    def failed(cls, error: str, tier: str = "sim", calibration: str | None = None,
               num_gpu_blocks: int = 0) -> Telemetry:
        """A measurement that failed: every rate is zero, so it can never look like a success."""
        return cls(error=error, tier=tier, calibration=calibration, num_gpu_blocks=num_gpu_blocks)


@dataclass
class RequestTimings:
    """Per-request timestamps of one measurement (seconds on one clock)."""

    arrival: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else 0.0


def summarize(
    t: RequestTimings,
    *,
    slo: SLO,
    price_per_hour: float,
    num_gpus: int,
    num_preemptions: int = 0,
    prefix_cache_hit_rate: float = 0.0,
    kv_cache_usage_peak: float = 0.0,
    num_gpu_blocks: int = 0,
    mean_batch_size: float = 0.0,
    tier: str = "sim",
    calibration: str | None = None,
    profile: Profile | None = None,
) -> Telemetry:
    """Reduce per-request timings to a `Telemetry` (TTFT, TPOT as docs/architecture.md defines them)."""
    start = float(np.min(t.arrival))
    duration = max(float(np.max(t.finish)) - start, 1e-9)
    ttft = t.first_token - t.arrival
    e2e = t.finish - t.arrival
    multi = t.output_len > 1
    tpot_all = np.zeros_like(ttft)
    tpot_all[multi] = (t.finish[multi] - t.first_token[multi]) / (t.output_len[multi] - 1)
    tpot = tpot_all[multi]
    good = np.ones(ttft.shape, dtype=bool)
    if slo.ttft_s is not None:
        good &= ttft <= slo.ttft_s
    if slo.tpot_s is not None:
        good &= tpot_all <= slo.tpot_s
    if slo.e2e_s is not None:
        good &= e2e <= slo.e2e_s
    out_tokens = float(np.sum(t.output_len))
    cost = price_per_hour * num_gpus * duration / 3600.0 / max(out_tokens / 1e6, 1e-12)
    return Telemetry(
        duration_s=duration,
        req_per_s=len(ttft) / duration,
        out_tok_per_s=out_tokens / duration,
        total_tok_per_s=(out_tokens + float(np.sum(t.prompt_len))) / duration,
        ttft_p50=_pct(ttft, 50), ttft_p90=_pct(ttft, 90), ttft_p99=_pct(ttft, 99),
        tpot_p50=_pct(tpot, 50), tpot_p90=_pct(tpot, 90), tpot_p99=_pct(tpot, 99),
        e2e_p50=_pct(e2e, 50), e2e_p99=_pct(e2e, 99),
        goodput_req_per_s=float(np.sum(good)) / duration,
        num_preemptions=int(num_preemptions),
        prefix_cache_hit_rate=float(prefix_cache_hit_rate),
        kv_cache_usage_peak=float(kv_cache_usage_peak),
        num_gpu_blocks=int(num_gpu_blocks),
        mean_batch_size=float(mean_batch_size),
        cost_per_mtok_usd=cost if math.isfinite(cost) else 0.0,
        profile=profile if profile is not None else Profile(),
        tier=tier,
        calibration=calibration,
    )
