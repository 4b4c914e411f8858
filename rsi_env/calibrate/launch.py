"""The launch stage: a piecewise step's CPU launch cost (``piecewise_layer_s``) read off the real engine's step traces.

A step with prompt tokens runs piecewise CUDA graphs, each layer's attention called from Python between them, on the
engine core's thread (`StepCost.dispatch`); under async scheduling that launch shows in the gap before the previous
step's output. The step traces time it directly, with no queueing in between: every group of alike real steps that a
piecewise step follows (`rsi_env.calibrate.step_groups`) is priced by the cost model, and the stage sets the one
term so that the real steps take as long as priced, in the median over those groups weighted by their steps. The
end-to-end timing fit cannot tell this term from the others (a TTFT too long is as well fixed by a slower front
end); one number that only launches set can.

The cost grows with the term wherever the launches outlast the kernels, so the median ratio of real to priced
falls as the term rises, and bisection finds it. As the other stages, it splits the rows by configuration
(`rsi_env.calibrate.stage.staged_fit`): fitted on part, the ratio on the rest before and after, then refitted on all.
Run alone (``rsi-env calibrate launch``), every other term of the base is kept; the calibration written keeps the
base's provenance, names the base, and records the launch stage (its split, the priced steps before and after).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rsi_env.calibrate.report import errors, launch_summary
from rsi_env.calibrate.samples import load_samples
from rsi_env.calibrate.score import evaluate
from rsi_env.calibrate.stage import Alone, Stage, StageRun, staged_fit
from rsi_env.calibrate.step_groups import StepGroup, price, step_groups, weighted_median
from rsi_env.calibrate.timing import BOUNDS
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import load_model
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.cost import GRAPH_MODES, StepCost

__all__ = ["LAUNCH", "STAGE", "RunGroups", "fit_launch", "launch_error", "launch_groups"]

LAUNCH = "piecewise_layer_s"


@dataclass(frozen=True)
class RunGroups:
    """One real run's groups of steps a piecewise step follows, with what prices them."""

    config_key: str
    model: str
    flags: dict[str, Any]
    groups: tuple[StepGroup, ...]


def launch_groups(rows: list[dict[str, Any]]) -> list[RunGroups]:
    """Each row's groups of alike steps whose gap holds a piecewise step's launch: those a piecewise step follows
    (async scheduling, vLLM's default), or the piecewise steps themselves (without it). Rows of dense models on one
    GPU without enforce_eager only: a MoE model's pieces and several GPUs' workers launch otherwise, and
    enforce_eager runs no graph."""
    pw = GRAPH_MODES["PIECEWISE"]
    out = []
    for row in rows:
        flags = row.get("flags") or {}
        if (row.get("telemetry") or {}).get("error") or flags.get("enforce_eager"):
            continue
        if int(flags.get("tensor_parallel_size", 1)) * int(flags.get("pipeline_parallel_size", 1)) > 1:
            continue
        if load_model(row["model"]).is_moe:
            continue
        launched_next = (row.get("resolved") or {}).get("async_scheduling", True)
        groups = tuple(g for g in step_groups(row) if (g.next_mode if launched_next else g.mode) == pw)
        if groups:
            out.append(RunGroups(f"{row['model']} {json.dumps(flags, sort_keys=True)}", row["model"], flags, groups))
    return out


def _ratios(runs: list[RunGroups], cal: Calibration, hw: HardwareSpec) -> tuple[np.ndarray, np.ndarray]:
    """Each group's real time over its priced time, and its steps (the weights)."""
    ratio, weight = [], []
    costs: dict[str, StepCost] = {}
    for run in runs:
        if run.config_key not in costs:
            m = load_model(run.model)
            costs[run.config_key] = StepCost(m, hw, EngineConfig.from_dict(run.flags).resolve(m, hw, cal.engine_version),
                                             cal)
        for g in run.groups:
            ratio.append(g.real_s / price(costs[run.config_key], g))
            weight.append(g.n)
    return np.asarray(ratio), np.asarray(weight, dtype=float)


def launch_error(runs: list[RunGroups], cal: Calibration, hw: HardwareSpec) -> dict[str, Any]:
    """How the cost model prices the steps a piecewise step follows: groups, steps, the median of real over priced
    (weighted by steps) and the weighted mean absolute log-ratio (0: every group priced right)."""
    if not runs:
        return {"n_groups": 0, "n_steps": 0, "median_real_over_priced": None, "mean_abs_log_ratio": None}
    r, w = _ratios(runs, cal, hw)
    return {"n_groups": int(r.size), "n_steps": int(w.sum()), "median_real_over_priced": round(weighted_median(r, w), 4),
            "mean_abs_log_ratio": round(float(np.average(np.abs(np.log(r)), weights=w)), 4)}


def fit_launch(runs: list[RunGroups], cal: Calibration, hw: HardwareSpec, iterations: int = 40) -> Calibration:
    """``cal`` with ``piecewise_layer_s`` set so that the median of real over priced is 1 (bisection in log space,
    within the term's bounds: at a bound when even that leaves the steps too slow or too fast)."""
    if not runs:
        raise ValueError("fit_launch: no groups of steps followed by a piecewise step (dense models, one GPU, step "
                         "traces with each step's composition)")
    lo, hi = (math.log(b) for b in BOUNDS[LAUNCH])

    def median(x: float) -> float:
        return weighted_median(*_ratios(runs, cal.with_coefficients({LAUNCH: math.exp(x)}), hw))

    if median(hi) >= 1.0:
        return cal.with_coefficients({LAUNCH: math.exp(hi)})
    if median(lo) <= 1.0:
        return cal.with_coefficients({LAUNCH: math.exp(lo)})
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if median(mid) > 1.0 else (lo, mid)
    return cal.with_coefficients({LAUNCH: math.exp(0.5 * (lo + hi))})


def _items(rows: list[dict[str, Any]], where: str) -> list[RunGroups]:
    """The runs' groups of steps a piecewise step's launch shows in (`launch_groups`)."""
    runs = launch_groups(rows)
    if not runs:
        raise ValueError(f"run_launch_calibration: no run in {where} has steps followed by a "
                         "piecewise step (dense models on one GPU, step traces with each step's composition)")
    return runs


def _run(r: StageRun) -> tuple[Calibration, dict[str, Any], dict[str, Any]]:
    """Split by configuration (`staged_fit`), and the end-to-end error on the base's host-stage runs."""
    fitted, report = staged_fit(r)
    base, hw = r.base, r.hw
    # The term moves every step with prompt tokens: the end-to-end error on the runs the base's host stage was fitted
    # on, before and after, shows what that costs on that host (and lets a test replay it).
    host_runs: list[str | Path] = [str(m) for m in (base.provenance.get("host_stage") or {}).get("measurements") or []]
    if host_runs and all(Path(m).is_file() for m in host_runs):
        hs = load_samples(host_runs)
        report["host_runs"] = {"measurements": [str(m) for m in host_runs], "before": errors(evaluate(hs, base, hw)),
                               "after": errors(evaluate(hs, fitted, hw))}
    return fitted, report, {
        "launch_stage": {"measurements": [str(m) for m in r.measurements], "sha256_12": r.digest, "terms": [LAUNCH],
                         "value": getattr(fitted, LAUNCH), "base_value": getattr(base, LAUNCH),
                         "n_train_configs": report["n_train_configs"],
                         "n_held_out_configs": report["n_held_out_configs"],
                         "held_out_before": report["before"], "held_out_after": report["after"],
                         "all_configs": report["all_configs"], **({"host_runs": report["host_runs"]}
                                                                    if "host_runs" in report else {})}}


STAGE = Stage("launch", (LAUNCH,), lambda runs, start, hw, _max_nfev: fit_launch(runs, start, hw), launch_error,
              Alone(_items, _run, launch_summary))
