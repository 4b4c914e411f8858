"""Warm starts: starting configurations for a new (model, hardware, workload) from the nearest experience.

Experience is grouped into *contexts* — one (model, hardware, vLLM version, workload) measured with
the task's starting configuration and others. In each context every configuration gets the task's
own objective against that context's baseline (`workload_score`, a log ratio), taken relative to
the context's best: its *regret*, comparable across contexts whose gains differ by orders of
magnitude (an SLO a slow chip misses by far makes every fix look huge). A context is a point in a
feature space built from the model's parameter count and KV bytes per token, the chip's memory and
bandwidth, and the workload's prompt and output lengths, arrival rate and concurrency (see
:func:`context_features`), on ``log1p`` scales. For each target workload the ``k`` nearest contexts
vote, weighted by inverse squared distance; a context that never measured a configuration counts
its median regret. The proposals are the best estimate, then each near context's own best (nearest
first: a hedge when the target sits between regimes), then the rest by estimate — each translated
to the target task's ladders (numbers snapped to the nearest rung on a log scale; flags the task
does not tune dropped) and filtered by what the target would refuse.

Values are carried over as they are (no rescaling of ``max_num_seqs`` by memory, say): the ladders
are coarse and the neighbours' own best values already reflect their chips. Nothing here runs
unless asked for (``warm_start=True``, ``Evaluator.warm``): every env and search is unchanged by default.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.task import Task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.store.db import ExperienceStore
from rsi_env.store.record import config_key, hardware_features, workload_stats

__all__ = ["FEATURES", "Proposal", "context_features", "distance", "propose", "snap_to_ladders"]

FEATURES = ("weight_stream_ms", "kv_capacity_ktokens", "prompt_mean", "output_mean", "rate", "concurrency")


@dataclass(frozen=True)
class Proposal:
    """A starting configuration for the target, and the experience behind it."""

    config: dict[str, Any]           # the flags it sets, on the target task's ladders
    estimate: float                  # estimated score (log ratio over the defaults) from the neighbours
    support: int                     # neighbouring contexts that measured it
    distance: float                  # mean distance of those contexts to the target
    sources: tuple[str, ...] = field(default_factory=tuple)  # "model@hardware" of those contexts


def context_features(model_features: Mapping[str, float], hw_features: Mapping[str, float],
                     stats: Mapping[str, Any]) -> dict[str, float]:
    """The point of a (model, hardware, workload) in the warm-start feature space (raw values).

    The model's parameter count and KV bytes per token meet the chip's bandwidth and memory in the two
    quantities that set a serving engine's regime: the time to stream the weights once (a decode step's
    floor) and how many tokens of KV cache fit beside the weights. Chip or model alone says less: an 8B
    model on a slow chip batches like a 70B one on a fast chip.
    """
    params_b = float(model_features["params_b"])
    weights_gb = 2.0 * params_b  # bf16
    return {"weight_stream_ms": weights_gb / float(hw_features["mem_bw_tbs"]),
            "kv_capacity_ktokens": max(float(hw_features["memory_gb"]) - weights_gb, 1.0) * 1e6
            / float(model_features["kv_bytes_per_token"]),
            "prompt_mean": float(stats["prompt_mean"]), "output_mean": float(stats["output_mean"]),
            "rate": float(stats["rate"]), "concurrency": float(stats["concurrency"])}


def distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Euclidean distance on ``log1p`` of each feature: scale-free, and zero rates stay finite."""
    return math.sqrt(sum((math.log1p(max(a[f], 0.0)) - math.log1p(max(b[f], 0.0))) ** 2 for f in FEATURES))


def snap_to_ladders(config: Mapping[str, Any], task: Task, flags: Sequence[str] | None = None) -> dict[str, Any]:
    """``config`` on ``task``'s ladders: numbers to the nearest rung (log scale), other values kept only if a rung."""
    out: dict[str, Any] = {}
    for f in flags if flags is not None else task.flags:
        if f not in config or config[f] is None:
            continue
        v = config[f]
        rungs = [tuple(r) if isinstance(r, list) else r for r in task.ladder(f)]
        v = tuple(v) if isinstance(v, list) else v
        if v in rungs:
            out[f] = v
            continue
        nums = [r for r in rungs if isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0]
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and nums:
            out[f] = min(nums, key=lambda r: abs(math.log(r) - math.log(v)))
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}


def _contexts(rows: list[dict[str, Any]], task: Task) -> list[tuple[dict[str, float], str, dict[str, float]]]:
    """(features, "model@hardware", {config_key: score}) per context that has the task's baseline measured."""
    base_key = config_key(EngineConfig.from_dict(task.start).to_dict(only_set=True))
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["model"], r["hardware"], r["engine_version"], r["workload_hash"])].append(r)
    from rsi_env.reward.objective import workload_score

    out = []
    for (model, hw, _, _), rs in groups.items():
        base = next((r for r in rs if r["config_key"] == base_key and r["ok"]), None)
        if base is None:
            continue
        bt = Telemetry.from_dict(base["telemetry"])
        scores: dict[str, float] = {}
        for r in rs:
            s = workload_score(Telemetry.from_dict(r["telemetry"]), bt, task)
            scores[r["config_key"]] = max(scores.get(r["config_key"], -math.inf), s)
        feats = context_features(base["model_features"], base["hardware_features"], base["workload_stats"])
        out.append((feats, f"{model}@{hw}", scores))
    return out


def propose(store: ExperienceStore, task: Task, model: ModelSpec, hardware: HardwareSpec,
            workloads: Sequence[Workload], *, engine_version: str = "0.26", tier: str = "sim", n: int = 5,
            k: int = 6, exclude: Sequence[tuple[str, str]] = (), flags: Sequence[str] | None = None,
            refuse: Callable[[dict[str, Any]], str | None] | None = None) -> list[Proposal]:
    """Up to ``n`` proposals for ``task`` on (``model``, ``hardware``, ``workloads``), best estimate first.

    ``exclude`` drops (model, hardware) pairs from the experience (a held-out target); ``flags`` limits the
    proposals to those flags (default: the task's); ``refuse(config)`` returns why the target would refuse a
    configuration (e.g. the env's own check), and refused ones are skipped.
    """
    ver = ".".join(str(engine_version).split(".")[:2])
    rows = [r for r in store.measurements("tier = ? AND (engine_version = ? OR engine_version LIKE ?)",
                                          (tier, ver, f"{ver}.%"))
            if (r["model"], r["hardware"]) not in set(exclude)]
    contexts = _contexts(rows, task)
    if not contexts:
        return []
    configs = {r["config_key"]: r["config"] for r in rows}
    hf = hardware_features(hardware)
    start = config_key(snap_to_ladders(task.start, task, flags))  # the defaults are measured anyway: no proposal
    # Per target workload: each configuration's regret (log ratio to the context's best) in the k nearest contexts,
    # inverse-square-distance weighted; a context that did not measure it counts its typical (median) regret.
    est: dict[str, float] = defaultdict(float)
    support: dict[str, set[str]] = defaultdict(set)
    dist: dict[str, float] = {}
    near_best: list[tuple[float, str]] = []  # (distance, config key): each near context's own best
    for w in workloads:
        target = context_features(model.features, hf, workload_stats(w))
        near = sorted(((distance(target, f), name, sc) for f, name, sc in contexts), key=lambda x: x[0])[:k]
        total = sum(1.0 / (d + 0.1) ** 2 for d, _, _ in near)
        keys = set().union(*(sc for _, _, sc in near))
        for d, name, sc in near:
            wt = 1.0 / (d + 0.1) ** 2 / total
            finite = sorted(max(v, -5.0) for v in sc.values())
            top = finite[-1]
            typical = finite[len(finite) // 2] - top
            for ck in keys:
                if ck in sc:
                    est[ck] += wt * (max(sc[ck], -5.0) - top) / len(workloads)
                    support[ck].add(name)
                    dist[ck] = min(dist.get(ck, math.inf), d)
                else:
                    est[ck] += wt * typical / len(workloads)
            near_best.append((d, max(sc, key=lambda c: sc[c])))
    merged: dict[str, Proposal] = {}
    for ck, e in est.items():
        cfg = snap_to_ladders(configs[ck], task, flags)
        tag = config_key(cfg)
        if tag == start:
            continue
        prop = Proposal(cfg, e, len(support[ck]), dist.get(ck, math.inf), tuple(sorted(support[ck])))
        if tag not in merged or e > merged[tag].estimate:
            merged[tag] = prop
    by_key = {ck: config_key(snap_to_ladders(configs[ck], task, flags)) for ck in est}
    ranked = sorted(merged.values(), key=lambda p: (-p.estimate, -p.support, config_key(p.config)))
    # Hedge across regimes: after the best estimate, the best of each near context (nearest first), then the rest.
    firsts = [merged[by_key[ck]] for _, ck in sorted(near_best, key=lambda x: x[0]) if by_key[ck] in merged]
    ordered: list[Proposal] = []
    for p in ranked[:1] + firsts + ranked[1:]:
        if p not in ordered:
            ordered.append(p)
    ranked = ordered
    out = []
    for p in ranked:
        if refuse is not None and refuse(p.config) is not None:
            continue
        out.append(p)
        if len(out) >= n:
            break
    return out
