"""Questions asked of the experience store: the best known configurations for a (model, hardware, workload)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.task import Task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.store.db import ExperienceStore
from rsi_env.store.record import config_key

__all__ = ["MINIMISE", "best_configs"]

MINIMISE = frozenset({"ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99", "e2e_p50", "e2e_p99",
                      "cost_per_mtok_usd", "duration_s", "num_preemptions"})


def best_configs(store: ExperienceStore, model: str, hardware: str, *, workload: str | None = None,
                 metric: str = "out_tok_per_s", task: Task | None = None, tier: str | None = None,
                 n: int = 5) -> list[dict[str, Any]]:
    """The ``n`` best configurations measured on (model, hardware[, workload]), best first.

    With ``task``, each is ranked by the task's objective against vLLM's defaults measured in the same
    context (a log ratio, averaged over the workloads it was measured on; contexts without the
    defaults measured are left out); otherwise by the mean of ``metric`` (lower is better for latencies
    and costs). Failed measurements never rank.
    """
    where, params = ["model = ?", "hardware = ?", "ok = 1"], [model, hardware]
    if workload:
        where.append("(workload = ? OR workload_hash = ?)")
        params += [workload, workload]
    if tier:
        where.append("tier = ?")
        params.append(tier)
    rows = store.measurements(" AND ".join(where), params)
    per: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
    configs: dict[str, dict[str, Any]] = {}
    if task is not None:
        from rsi_env.reward.objective import workload_score

        base_key = config_key(EngineConfig.from_dict(task.start).to_dict(only_set=True))
        groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            groups[(r["tier"], r["engine_version"], r["workload_hash"])].append(r)
        for rs in groups.values():
            base = next((r for r in rs if r["config_key"] == base_key), None)
            if base is None:
                continue
            bt = Telemetry.from_dict(base["telemetry"])
            for r in rs:
                s = workload_score(Telemetry.from_dict(r["telemetry"]), bt, task)
                if math.isfinite(s):
                    per[r["config_key"]].append((s, r["workload"], r["tier"]))
                    configs[r["config_key"]] = r["config"]
        value_name, lower_better = f"score[{task.id}]", False
    else:
        for r in rows:
            v = float(r["telemetry"].get(metric, math.nan))
            if math.isfinite(v):
                per[r["config_key"]].append((v, r["workload"], r["tier"]))
                configs[r["config_key"]] = r["config"]
        value_name, lower_better = metric, metric in MINIMISE
    out: list[dict[str, Any]] = []
    for ck, vals in per.items():
        mean = sum(v for v, _, _ in vals) / len(vals)
        out.append({"config": configs[ck], value_name: mean, "value": mean, "measurements": len(vals),
                    "workloads": sorted({w for _, w, _ in vals}), "tiers": sorted({t for _, _, t in vals})})
    # More workloads measured first among equals; then the value.
    out.sort(key=lambda d: (-len(d["workloads"]), d["value"] if lower_better else -d["value"]))
    return out[:n]
