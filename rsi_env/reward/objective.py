"""A task's objective: per-workload improvement over vLLM's defaults, as a log ratio.

``score = mean over workloads of log(value / baseline)`` (inverted for metrics to minimise), so 0
is "as good as vLLM's defaults" and ``log(1.1)`` is 10 % better. Metrics that ignore the SLO
(throughput, latency percentiles) are first SLO-adjusted on both sides: where the SLO attainment
(requests meeting every SLO bound / all requests) falls short of the task's requirement, the value
counts only ``clip(attainment / required, 0.05, 1)**2`` of itself (or that many times worse, for a
metric to minimise). Goodput and the cost of good tokens already count only SLO-meeting requests and
are taken as they are. A measurement that failed scores ``-inf``, never as a zero-latency success.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rsi_env.engine.task import Task
from rsi_env.engine.telemetry import Telemetry

__all__ = ["adjusted_value", "metric_value", "slo_attainment", "workload_score", "score"]


def slo_attainment(t: Telemetry) -> float:
    """Fraction of requests that met every SLO bound of the measurement."""
    return t.goodput_req_per_s / t.req_per_s if t.req_per_s > 0 else 0.0


def metric_value(t: Telemetry, metric: str) -> float:
    """A telemetry field, or ``good_cost_per_mtok_usd``: cost per million tokens of SLO-meeting requests."""
    if metric == "good_cost_per_mtok_usd":
        att = slo_attainment(t)
        return t.cost_per_mtok_usd / att if att > 0 else math.inf
    return float(getattr(t, metric))


_SLO_AWARE = frozenset({"goodput_req_per_s", "good_cost_per_mtok_usd"})


def _slo_factor(t: Telemetry, task: Task) -> float:
    if task.metric in _SLO_AWARE or task.slo_attainment <= 0:  # no attainment required: nothing to adjust
        return 1.0
    return min(max(slo_attainment(t) / task.slo_attainment, 0.05), 1.0) ** 2


def adjusted_value(t: Telemetry, task: Task) -> float:
    """The task's metric of one measurement, SLO-adjusted: what the score compares (``nan`` if it failed)."""
    if not t.ok:
        return math.nan
    v = metric_value(t, task.metric)
    f = _slo_factor(t, task)
    return v * f if task.maximize else v / f


def workload_score(t: Telemetry, base: Telemetry, task: Task) -> float:
    if not t.ok or not base.ok:
        return -math.inf
    v, b = metric_value(t, task.metric), metric_value(base, task.metric)
    if not (math.isfinite(v) and math.isfinite(b)) or v <= 0 or b <= 0:
        return -math.inf
    va, ba = adjusted_value(t, task), adjusted_value(base, task)
    ratio = va / ba if task.maximize else ba / va
    return math.log(ratio) if ratio > 0 else -math.inf


def score(tels: Sequence[Telemetry], bases: Sequence[Telemetry], task: Task) -> float:
    parts = [workload_score(t, b, task) for t, b in zip(tels, bases, strict=True)]
    return sum(parts) / len(parts) if parts else -math.inf
