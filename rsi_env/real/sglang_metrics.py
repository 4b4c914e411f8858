"""SGLang's own counters, read in the driver's process from its Prometheus multiprocess files.

With ``enable_metrics`` SGLang's processes (the scheduler in its own, the tokenizer manager in the driver's) write
their Prometheus metrics to the folder ``PROMETHEUS_MULTIPROC_DIR`` names, which SGLang sets when its engine starts;
`read_metrics` collects that folder the way SGLang's own ``/metrics`` route does (``MultiProcessCollector``).

What it gives and when (SGLang 0.5.17, ``observability/metrics_collector.py``, ``scheduler_components/
metrics_reporter.py``): ``sglang:num_running_reqs``, ``sglang:num_queue_reqs`` and ``sglang:token_usage`` are
gauges the scheduler sets after every prefill batch and every ``decode_log_interval`` decode steps (40 by default),
so samples of them see the engine at those moments only; ``sglang:num_retracted_requests_total`` counts every
retraction as it happens.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["GAUGES", "gauge_summary", "read_metrics", "samples_by_name"]

# The gauges sampled through a workload: requests running and waiting (summed over replicas), KV pool use (max).
GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage")


def samples_by_name(families: Iterable[Any], prefix: str = "sglang:") -> dict[str, list[float]]:
    """Each sample's values by sample name (a counter's ``…_total``, a histogram's ``…_count`` and ``…_sum``),
    one value per label set; histogram buckets and ``…_created`` times left out."""
    out: dict[str, list[float]] = {}
    for family in families:
        for sample in family.samples:
            name = sample.name
            if not name.startswith(prefix) or name.endswith(("_bucket", "_created")):
                continue
            out.setdefault(name, []).append(float(sample.value))
    return out


def read_metrics(path: str | None = None) -> dict[str, list[float]]:
    """Every ``sglang:`` sample in the multiprocess folder ``path`` (default: ``$PROMETHEUS_MULTIPROC_DIR``);
    empty where there is none (metrics off)."""
    path = path or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path or not os.path.isdir(path):
        return {}
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)
    return samples_by_name(registry.collect())


def gauge_summary(metrics: Mapping[str, list[float]]) -> tuple[float, float, float]:
    """(KV pool use, running requests, queued requests) of one read: use as the largest replica's, counts summed."""
    usage = max(metrics.get("sglang:token_usage", []), default=0.0)
    return (usage, sum(metrics.get("sglang:num_running_reqs", [])), sum(metrics.get("sglang:num_queue_reqs", [])))
