"""Fidelity as a contract: the simulator's error beside the real engine's own, and the decisions it gets right.

Two parts, printed by ``benchmarks/unseen_fidelity.py`` (this module only computes them):

- `contract`: per workload and metric, the simulator's error on the one-H200 host kind's measurements no fit has seen,
  beside the real engine's own repeat error on the same host kind: every run of a configuration measured three times
  or more, predicted by the median of its other runs and by the simulator (`leave_one_out` of the benchmark), and the
  pairwise spread of two runs of one configuration (`real_against_itself`, same host). The bar: throughput within 5 %
  everywhere; TTFT and TPOT p50 no worse than the real engine's own leave-one-out error on the same runs. Then the same
  per configuration family the issue names (`FAMILIES`: enforce_eager, the small model, shared-prefix chat with prefix
  caching off, Poisson arrivals into a capped batch), each beside its workloads' repeat error.
- `decision_fidelity`: per task family's two-tier evaluation (``configs/eval/<plan>.candidates.json`` and the real rows
  in ``data/eval/<plan>/real.jsonl``), the promoted candidates scored again by the simulator as it stands: whether its
  top pick is within 5 % of the best promoted candidate on real (the pick's SLO-adjusted objective, relative to vLLM's
  defaults on real, at least 0.95 of the best's). A plan whose real rows are not in yet says so.
- `committed_predictions`: a lease's real rows against the predictions committed before it ran.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.task import load_task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.reward.objective import score
from rsi_env.sim import simulate
from rsi_env.sim.calibration import Calibration

__all__ = ["EVAL_PLANS", "FAMILIES", "THROUGHPUT_BAR", "committed_predictions", "contract", "decision_fidelity",
           "family_of"]

ROOT = Path(__file__).resolve().parents[1]
THROUGHPUT_BAR = 0.05
DECISION_TOLERANCE = 0.05
# The two-tier evaluations on one H200 (kv_cache_v1_h200 and scheduler_v1_h200: once their real rows are in).
EVAL_PLANS = ("batching_h200", "quantization_h200", "prefix_cache_h200", "kv_cache_v1_h200", "scheduler_v1_h200")
_METRICS = (("throughput", "tok_s"), ("ttft_p50", "ttft_p50"), ("tpot_p50", "tpot_p50"))


def _model_flags(config: str) -> tuple[str, dict[str, Any]]:
    model, flags = config.split(" ", 1)
    return model, json.loads(flags)


def _poisson_chat(wl: str) -> bool:
    """A chat-shaped workload under open (Poisson) arrivals, by name: the frozen ones and the leases' own shapes."""
    return "closed" not in wl and any(s in wl for s in ("short_long", "many_small", "shared_prefix", "poisson"))


# The configuration families the misses name, by what ran (never by how it came out).
FAMILIES: dict[str, Callable[[str, dict[str, Any], str], bool]] = {
    "enforce_eager": lambda model, flags, wl: bool(flags.get("enforce_eager")),
    "small_model (llama-3.2-1b)": lambda model, flags, wl: model == "llama-3.2-1b",
    "shared_prefix_chat, prefix caching off": lambda model, flags, wl: (
        "shared_prefix" in wl and flags.get("enable_prefix_caching") is False),
    "poisson into a capped batch (max_num_seqs <= 128 or a KV cache under 0.2 of the GPU)": lambda model, flags, wl: (
        _poisson_chat(wl)
        and (int(flags.get("max_num_seqs", 1024)) <= 128 or float(flags.get("gpu_memory_utilization", 0.92)) < 0.2)),
}


def family_of(row: dict[str, Any]) -> list[str]:
    """The `FAMILIES` a per-sample row (`evaluate`'s) belongs to."""
    model, flags = _model_flags(row["config"])
    return [name for name, f in FAMILIES.items() if f(model, flags, row["workload"])]


def _ape(row: dict[str, Any], key: str) -> float:
    return abs(row[f"sim_{key}"] / row[f"real_{key}"] - 1.0)


def _mapes(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {name: round(float(np.mean([_ape(r, key) for r in rows])), 4) for name, key in _METRICS}


def contract(rows: list[dict[str, Any]], loo: dict[str, dict[str, Any]],
             spread: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The contract's table on one host kind: per workload, and per `FAMILIES` family, the simulator's MAPE over
    ``rows`` (`evaluate`'s per-sample rows of the unseen pool) beside the real engine's repeat error.

    ``loo`` is `leave_one_out` on the same host kind's runs (the real median of the other runs against the simulator,
    on the configurations run three times or more), ``spread`` `real_against_itself`'s (pairs of runs, same host).
    A workload holds where throughput is within `THROUGHPUT_BAR` and each latency's leave-one-out error of the
    simulator is at most the real engine's; a family, where its throughput is within the bar and each latency's MAPE
    is at most the mean leave-one-out real error of its rows' workloads.
    """
    ok = [r for r in rows if r["sim_error"] is None]
    by_wl: dict[str, list[dict[str, Any]]] = {}
    for r in ok:
        by_wl.setdefault(r["workload"], []).append(r)
    workloads: dict[str, Any] = {}
    for wl, mine in sorted(by_wl.items()):
        ref = loo.get(wl)
        entry: dict[str, Any] = {"n": len(mine), "sim_mape": _mapes(mine)}
        if ref:
            entry["repeats"] = {"runs": ref["runs"], **{
                name: {"sim": ref[f"{key}:sim"], "real_median_of_others": ref[f"{key}:real_median_of_others"]}
                for name, key in _METRICS}}
        pair = spread.get(f"same_host:{wl}")
        if pair:
            entry["real_pairs_same_host"] = {"pairs": pair["pairs"], "throughput": pair["out_tok_per_s_mape"],
                                             "ttft_p50": pair["ttft_p50_mape"], "tpot_p50": pair["tpot_p50_mape"]}
        entry["holds"] = {"throughput": entry["sim_mape"]["throughput"] <= THROUGHPUT_BAR, **(
            {name: ref[f"{key}:sim"] <= ref[f"{key}:real_median_of_others"] for name, key in _METRICS[1:]}
            if ref else {})}
        workloads[wl] = entry
    families: dict[str, Any] = {}
    for name in FAMILIES:
        mine = [r for r in ok if name in family_of(r)]
        if not mine:
            families[name] = {"n": 0, "note": "no measurement of this family on this host kind yet"}
            continue
        sim = _mapes(mine)
        real = {m: round(float(np.mean([loo[r["workload"]][f"{key}:real_median_of_others"] for r in mine
                                        if r["workload"] in loo])), 4) if any(r["workload"] in loo for r in mine)
                else None for m, key in _METRICS[1:]}
        families[name] = {"n": len(mine), "sim_mape": sim, "real_repeat_error_of_its_workloads": real,
                          "holds": {"throughput": sim["throughput"] <= THROUGHPUT_BAR,
                                    **{m: (sim[m] <= v if v is not None else None) for m, v in real.items()}}}
    return {"throughput_bar": THROUGHPUT_BAR, "workloads": workloads, "families": families}


def _tels(raw: list[dict[str, Any]] | None) -> list[Telemetry] | None:
    return [Telemetry.from_dict(t) for t in raw] if raw else None


def decision_fidelity(plan: str, cal: Calibration, hw: HardwareSpec) -> dict[str, Any]:
    """Whether the simulator as it stands (``cal``) picks, among ``plan``'s promoted candidates, one within
    `DECISION_TOLERANCE` of the best of them on real: each candidate's score (its SLO-adjusted objective against
    vLLM's defaults, each tier against its own defaults: `rsi_env.reward.objective.score`) simulated again on the
    plan's workloads and read from the real rows. A pick that failed on real does not hold. Probes stay out (they are
    measured beside the promotion, not chosen by it)."""
    cands_path = ROOT / "configs" / "eval" / f"{plan}.candidates.json"
    real_path = ROOT / "data" / "eval" / plan / "real.jsonl"
    if not cands_path.is_file():
        return {"plan": plan, "status": "no candidates (the search stage has not run)"}
    if not real_path.is_file():
        return {"plan": plan, "status": "not measured on real yet"}
    doc = json.loads(cands_path.read_text())
    results = {r["name"]: r for r in map(json.loads, filter(None, real_path.read_text().splitlines()))}
    task = load_task(doc["env"])
    workloads = [Workload.from_dict(w) for w in doc["workloads"]]

    def sim(flags: dict[str, Any]) -> list[Telemetry]:
        return [simulate(flags, doc["model"], hw, w, engine_version=doc["engine_version"], calibration=cal)
                for w in workloads]

    d_sim = sim(doc["defaults"]["flags"])
    d_real = _tels((results.get("defaults") or {}).get("telemetry"))
    if d_real is None or not all(t.ok for t in d_real):
        return {"plan": plan, "status": "vLLM's defaults not measured on real"}
    rows = []
    for c in doc["candidates"]:
        real = _tels((results.get(c["name"]) or {}).get("telemetry"))
        real_score = score(real, d_real, task) if real and all(t.ok for t in real) else math.nan
        rows.append({"name": c["name"], "sim_score": round(score(sim(c["flags"]), d_sim, task), 4),
                     "real_score": round(real_score, 4) if math.isfinite(real_score) else None})
    measured = [r for r in rows if r["real_score"] is not None]
    if not measured:
        return {"plan": plan, "status": "no promoted candidate ran on real", "candidates": rows}
    pick = max(rows, key=lambda r: r["sim_score"])
    best = max(measured, key=lambda r: r["real_score"])
    ratio = math.exp(pick["real_score"] - best["real_score"]) if pick["real_score"] is not None else 0.0
    return {"plan": plan, "env": doc["env"], "sim_pick": pick["name"], "best_on_real": best["name"],
            "pick_real_over_best": round(ratio, 4), "holds": ratio >= 1.0 - DECISION_TOLERANCE, "candidates": rows}


def committed_predictions(predictions: Path, measured: Path) -> dict[str, Any]:
    """A lease's real rows against the predictions committed before it ran (``research/plans/*.predictions.jsonl``:
    one line per run, workload and code — ``after``, the simulator with the change the lease tests, and ``before``,
    the one it replaced), matched by run name (each real row's ``run``, else by model, flags and workload, in order):
    per code, the MAPE of throughput, TTFT and TPOT p50 over all rows and per `FAMILIES` family."""
    preds = [json.loads(x) for x in predictions.read_text().splitlines() if x.strip()]
    rows = [json.loads(x) for x in measured.read_text().splitlines() if x.strip()]
    out: dict[str, Any] = {"predictions": str(predictions.relative_to(ROOT)), "measured": len(rows)}
    for code in sorted({p["code"] for p in preds}):
        mine = [p for p in preds if p["code"] == code]
        pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
        used: set[int] = set()
        for r in rows:
            tel = r.get("telemetry") or {}
            if tel.get("error"):
                continue
            key = (r["model"], json.dumps(r.get("flags") or {}, sort_keys=True), r["workload"])
            for i, p in enumerate(mine):
                if i not in used and (p["model"], json.dumps(p["flags"], sort_keys=True), p["workload"]) == key:
                    used.add(i)
                    pairs.append((p, tel))
                    break
        per: dict[str, list[dict[str, Any]]] = {"all": []}
        for p, tel in pairs:
            row = {"config": f"{p['model']} {json.dumps(p['flags'], sort_keys=True)}", "workload": p["workload"],
                   "sim_tok_s": p["out_tok_per_s"], "real_tok_s": tel["out_tok_per_s"], "sim_ttft_p50": p["ttft_p50"],
                   "real_ttft_p50": tel["ttft_p50"], "sim_tpot_p50": p["tpot_p50"], "real_tpot_p50": tel["tpot_p50"]}
            for name in ["all", *family_of(row)]:
                per.setdefault(name, []).append(row)
        out[code] = {"calibration": mine[0]["calibration"] if mine else None,
                     **{name: {"n": len(v), **_mapes(v)} for name, v in per.items() if v}}
    return out
