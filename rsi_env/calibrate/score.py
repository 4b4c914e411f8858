"""How far the simulator under a calibration lands from real measurements: the error every stage reports.

`evaluate` simulates each sample and gives the MAPEs of throughput, TTFT/TPOT p50 and p99 and KV blocks, and how
well the simulator ranks the configurations (`rank_agreement`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from rsi_env.calibrate.metrics import spearman
from rsi_env.calibrate.samples import Sample
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.engines import engine_of
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import load_model
from rsi_env.engine.telemetry import Telemetry
from rsi_env.sim import simulate_detailed
from rsi_env.sim.calibration import Calibration

__all__ = ["ape", "evaluate", "predict", "rank_agreement"]


def predict(s: Sample, cal: Calibration, hw: HardwareSpec) -> Telemetry:
    """The simulator's telemetry for what the sample ran, under ``cal``: SGLang's sim for an SGLang release."""
    if engine_of(s.engine_version).name == "sglang":
        from rsi_env.sim.sglang import simulate_sglang_detailed

        return simulate_sglang_detailed(s.flags, load_model(s.model), hw, s.workload, calibration=cal)[0]
    return simulate_detailed(EngineConfig.from_dict(s.flags), load_model(s.model), hw, s.workload,
                             engine_version=s.engine_version, calibration=cal)[0]


def ape(pred: float, real: float) -> float:
    """Absolute percentage error as a fraction (0 where the real value is 0)."""
    return abs(pred - real) / abs(real) if real else 0.0


def rank_agreement(pairs: list[tuple[Sample, Telemetry]], min_configs: int = 3) -> dict[str, float | None]:
    """Spearman of real vs simulated values across configurations, per (model, workload), averaged per metric.

    Throughput is ranked only where the load saturates (a burst, a closed loop: under a fixed arrival rate it is
    the rate); latencies on every workload. Ties share their mean rank (`rsi_env.calibrate.metrics.spearman`): a
    flag the simulator finds no effect of on a workload (1,024 batched tokens on ``short_long``'s short prompts)
    ties with the defaults there instead of ranking by the order the rows came in.
    """
    out: dict[str, float | None] = {}
    for metric in ("out_tok_per_s", "ttft_p50", "tpot_p50"):
        groups: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
        for s, p in pairs:
            if metric == "out_tok_per_s" and s.workload.arrival.process not in ("burst", "closed"):
                continue
            groups[(s.model, s.workload.name)].append((getattr(s.real, metric), getattr(p, metric)))
        rhos = [spearman([a for a, _ in v], [b for _, b in v]) for v in groups.values() if len(v) >= min_configs]
        rhos = [r for r in rhos if not math.isnan(r)]
        out[metric] = float(np.mean(rhos)) if rhos else None
    return out


def evaluate(samples: list[Sample], cal: Calibration, hw: HardwareSpec) -> dict[str, Any]:
    """MAPEs of throughput, TTFT/TPOT p50 and KV blocks, and rank correlation of configurations."""
    rows = []
    for s in samples:
        p = predict(s, cal, hw)
        rows.append((s, p))
    ok = [(s, p) for s, p in rows if p.ok]
    err: dict[str, Any] = {"n": len(samples), "n_failed_in_sim": len(rows) - len(ok)}
    for f in ("out_tok_per_s", "ttft_p50", "tpot_p50", "ttft_p99", "tpot_p99"):
        err[f"{f}_mape"] = float(np.mean([ape(getattr(p, f), getattr(s.real, f)) for s, p in ok])) if ok else None
    err["num_gpu_blocks_mape"] = float(np.mean([ape(p.num_gpu_blocks, s.num_gpu_blocks) for s, p in ok
                                                if s.num_gpu_blocks])) if ok else None
    err["spearman"] = rank_agreement(ok)
    vals = [v for v in err["spearman"].values() if v is not None]
    err["spearman_mean"] = float(np.mean(vals)) if vals else None
    err["per_sample"] = [
        {"config": s.config_key, "workload": s.workload.name, "real_tok_s": s.real.out_tok_per_s,
         "sim_tok_s": p.out_tok_per_s, "real_ttft_p50": s.real.ttft_p50, "sim_ttft_p50": p.ttft_p50,
         "real_tpot_p50": s.real.tpot_p50, "sim_tpot_p50": p.tpot_p50, "sim_error": p.error}
        for s, p in rows]
    return err
