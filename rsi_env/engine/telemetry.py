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


def _pcts_sorted(s: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """``np.percentile(s, q)`` (method "linear") of a sorted float64 array, for each ``q``, by numpy's own arithmetic
    (``numpy.lib._function_base_impl._quantile``: virtual index ``(n - 1) * (q / 100)``, its floor and the next,
    both the last value past the end, then ``_lerp``) on Python floats: the same IEEE operations in the same order."""
    n = s.size
    top = float(s[-1])
    if math.isnan(top):  # a NaN sorts last; numpy's answer is NaN then
        return [math.nan] * len(qs)
    out = []
    for q in qs:
        v = (n - 1) * (q / 100.0)
        if v >= n - 1:
            a = b = top
            g = v + 1.0  # numpy's gamma against the index -1
        else:
            i = math.floor(v)
            a, b = float(s[i]), float(s[i + 1])
            g = v - i
        d = b - a
        out.append(b - d * (1.0 - g) if g >= 0.5 else a + d * g)
    return out


def percentiles(x: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """``[_pct(x, q) for q in qs]``, bit for bit, sorting ``x`` once (0.0 each for an empty ``x``)."""
    if not x.size:
        return [0.0] * len(qs)
    if x.dtype != np.float64 or x.ndim != 1 or not _FAST_PERCENTILE:
        return [_pct(x, q) for q in qs]
    return _pcts_sorted(np.sort(x), qs)


def _fast_percentile_agrees() -> bool:
    """Whether `_pcts_sorted` gives this numpy's ``np.percentile`` bit for bit (checked once, at import)."""
    rng = np.random.default_rng(12345)
    qs = (0.0, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0)
    cases = [rng.exponential(size=n) * 10.0 ** rng.integers(-4, 3) for n in (1, 2, 3, 7, 10, 101, 998)]
    cases += [np.array([0.0, 0.0, 1.0]), np.array([1e-300, 1e300, -5.0, 3.0]), np.array([np.inf, 1.0, 2.0])]
    with np.errstate(invalid="ignore"):  # inf - inf: NaN on both sides, as it should be
        for x in cases:
            fast = _pcts_sorted(np.sort(x), qs)
            slow = [float(np.percentile(x, q)) for q in qs]
            if np.array(fast).tobytes() != np.array(slow).tobytes():
                return False
    return True


_FAST_PERCENTILE = _fast_percentile_agrees()


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
    start = float(t.arrival.min())
    duration = max(float(t.finish.max()) - start, 1e-9)
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
    out_tokens = float(t.output_len.sum())
    cost = price_per_hour * num_gpus * duration / 3600.0 / max(out_tokens / 1e6, 1e-12)
    ttft_p, tpot_p, e2e_p = percentiles(ttft, (50, 90, 99)), percentiles(tpot, (50, 90, 99)), percentiles(e2e, (50, 99))
    return Telemetry(
        duration_s=duration,
        req_per_s=len(ttft) / duration,
        out_tok_per_s=out_tokens / duration,
        total_tok_per_s=(out_tokens + float(t.prompt_len.sum())) / duration,
        ttft_p50=ttft_p[0], ttft_p90=ttft_p[1], ttft_p99=ttft_p[2],
        tpot_p50=tpot_p[0], tpot_p90=tpot_p[1], tpot_p99=tpot_p[2],
        e2e_p50=e2e_p[0], e2e_p99=e2e_p[1],
        goodput_req_per_s=float(np.count_nonzero(good)) / duration,
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
