"""The launch stage: the CPU launch costs of steps outside a full CUDA graph, read off the real engine's step traces.

On one GPU vLLM launches the model from the engine core's thread (`StepCost.dispatch`), beside the kernels. Two
launches are read here, each from the runs that show it alone (`TERMS`):

- ``piecewise_layer_s``: a step with prompt tokens runs piecewise CUDA graphs, each layer's attention called from Python
  between them; under async scheduling that launch shows in the gap before the previous step's output, so the groups
  of alike real steps that a piecewise step follows are read (`rsi_env.calibrate.step_groups`);
- ``eager_layer_s``: with ``enforce_eager`` every layer's kernels are launched one by one from Python, every step; all
  the groups of an eager run are read (traces without per-step compositions give their steady decode steps).

The step traces time them directly, with no queueing in between: each group is priced by the cost model, and the stage
sets each term so that its groups' real steps take as long as priced, in the median over those groups weighted by
their steps. The end-to-end timing fit cannot tell these terms from the others (a TTFT too long is as well fixed by a
slower front end); numbers that only launches set can. A run of the stage fits the terms its runs show (eager runs
only: ``eager_layer_s`` alone), every other term kept.

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

__all__ = ["EAGER", "LAUNCH", "STAGE", "TERMS", "RunGroups", "fit_launch", "launch_error", "launch_groups"]

LAUNCH = "piecewise_layer_s"
EAGER = "eager_layer_s"
TERMS = (LAUNCH, EAGER)  # the launch costs the stage reads, each from its own runs' groups
# Each term's entry in a calibration's provenance.
_ENTRY = {LAUNCH: "launch_stage", EAGER: "eager_launch_stage"}


@dataclass(frozen=True)
class RunGroups:
    """One real run's groups of steps a piecewise step follows, with what prices them."""

    config_key: str
    model: str
    flags: dict[str, Any]
    groups: tuple[StepGroup, ...]
    term: str = LAUNCH  # the launch cost these groups time (`TERMS`)


def launch_groups(rows: list[dict[str, Any]], terms: tuple[str, ...] = (LAUNCH,)) -> list[RunGroups]:
    """Each row's groups of alike steps whose gap holds a launch of one of ``terms``. ``piecewise_layer_s``: the groups
    a piecewise step follows (async scheduling, vLLM's default), or the piecewise steps themselves (without it), of
    runs without enforce_eager. ``eager_layer_s``: every group of an enforce_eager run (each step launches its own
    kernels). Rows of dense models on one GPU only: a MoE model's pieces and several GPUs' workers launch otherwise."""
    pw = GRAPH_MODES["PIECEWISE"]
    out = []
    for row in rows:
        flags = row.get("flags") or {}
        term = EAGER if flags.get("enforce_eager") else LAUNCH
        if term not in terms or (row.get("telemetry") or {}).get("error"):
            continue
        if int(flags.get("tensor_parallel_size", 1)) * int(flags.get("pipeline_parallel_size", 1)) > 1:
            continue
        if load_model(row["model"]).is_moe:
            continue
        launched_next = (row.get("resolved") or {}).get("async_scheduling", True)
        groups = tuple(g for g in step_groups(row)
                       if term == EAGER or (g.next_mode if launched_next else g.mode) == pw)
        if groups:
            out.append(RunGroups(f"{row['model']} {json.dumps(flags, sort_keys=True)}", row["model"], flags, groups,
                                 term))
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
    """``cal`` with each term the runs time (`RunGroups.term`) set so that the median of real over priced over its
    groups is 1 (bisection in log space, within the term's bounds: at a bound when even that leaves the steps too slow
    or too fast). The terms are independent: a group's price holds the launches of one of them only."""
    if not runs:
        raise ValueError("fit_launch: no groups of steps followed by a piecewise step or of an enforce_eager run "
                         "(dense models, one GPU, step traces)")
    for term in TERMS:
        mine = [r for r in runs if r.term == term]
        if mine:
            cal = _bisect(mine, cal, hw, term, iterations)
    return cal


def _bisect(runs: list[RunGroups], cal: Calibration, hw: HardwareSpec, term: str, iterations: int) -> Calibration:
    lo, hi = (math.log(b) for b in BOUNDS[term])

    def median(x: float) -> float:
        return weighted_median(*_ratios(runs, cal.with_coefficients({term: math.exp(x)}), hw))

    if median(hi) >= 1.0:
        return cal.with_coefficients({term: math.exp(hi)})
    if median(lo) <= 1.0:
        return cal.with_coefficients({term: math.exp(lo)})
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if median(mid) > 1.0 else (lo, mid)
    return cal.with_coefficients({term: math.exp(0.5 * (lo + hi))})


def _items(rows: list[dict[str, Any]], where: str) -> list[RunGroups]:
    """The runs' groups of steps a launch shows in (`launch_groups`, every term)."""
    runs = launch_groups(rows, TERMS)
    if not runs:
        raise ValueError(f"run_launch_calibration: no run in {where} has steps followed by a "
                         "piecewise step or is an enforce_eager run (dense models on one GPU, step traces)")
    return runs


def _run(r: StageRun) -> tuple[Calibration, dict[str, Any], dict[str, Any]]:
    """Split by configuration (`staged_fit`), and the end-to-end error on the base's host-stage runs; one provenance
    entry per term fitted (``launch_stage``, ``eager_launch_stage``), each with its own runs' split and errors."""
    fitted, report = staged_fit(r)
    base, hw = r.base, r.hw
    # The term moves every step with prompt tokens: the end-to-end error on the runs the base's host stage was fitted
    # on, before and after, shows what that costs on that host (and lets a test replay it).
    host_runs: list[str | Path] = [str(m) for m in (base.provenance.get("host_stage") or {}).get("measurements") or []]
    if host_runs and all(Path(m).is_file() for m in host_runs) and LAUNCH in {x.term for x in r.items}:
        hs = load_samples(host_runs)
        report["host_runs"] = {"measurements": [str(m) for m in host_runs], "before": errors(evaluate(hs, base, hw)),
                               "after": errors(evaluate(hs, fitted, hw))}
    held = set(report["held_out_configs"])
    entries: dict[str, Any] = {}
    report["terms"] = {}
    for term in TERMS:
        mine = [x for x in r.items if x.term == term]
        if not mine:
            continue
        ho = [x for x in mine if x.config_key in held]
        part = {"n_train_configs": len({x.config_key for x in mine if x.config_key not in held}),
                "n_held_out_configs": len({x.config_key for x in ho}),
                "held_out_before": launch_error(ho, base, hw), "held_out_after": launch_error(ho, fitted, hw),
                "all_configs_before": launch_error(mine, base, hw), "all_configs": launch_error(mine, fitted, hw)}
        report["terms"][term] = {"value": getattr(fitted, term), "base_value": getattr(base, term), **part}
        entries[_ENTRY[term]] = {
            "measurements": [str(m) for m in r.measurements], "sha256_12": r.digest, "terms": [term],
            "value": getattr(fitted, term), "base_value": getattr(base, term),
            **{k: v for k, v in part.items() if k != "all_configs_before"},
            **({"host_runs": report["host_runs"]} if term == LAUNCH and "host_runs" in report else {})}
    return fitted, report, entries


STAGE = Stage("launch", TERMS, lambda runs, start, hw, _max_nfev: fit_launch(runs, start, hw), launch_error,
              Alone(_items, _run, launch_summary, select=lambda runs, terms: [x for x in runs if x.term in terms]))
