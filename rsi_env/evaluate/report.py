"""Stage 3 of a two-tier evaluation: sim against real for every promoted configuration, and what it cost.

Reads the candidates file (sim) and ``<out>/real.jsonl`` (real) and reports, per configuration,
the task's SLO-adjusted objective per workload on both tiers and their error, the score on each
tier (log ratio over the engine's defaults measured on that same tier), the real measurement's error if
any and the output guard (greedy tokens against the defaults'); then the fidelity of the promotion
(MAPE of the candidates' objectives, Spearman's rho of their scores), the real improvement over
the defaults, and the GPU-seconds spent on real against what the same search on real alone would
have cost. Writes ``<out>/report.json`` and ``<out>/report.md``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rsi_env.engine.engines import get_engine
from rsi_env.engine.task import load_task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.evaluate.fidelity import mape, real_only_gpu_s, spearman
from rsi_env.evaluate.plan import EvalPlan
from rsi_env.evaluate.promote import load_candidates, measured_hardware, read_results
from rsi_env.reward.guards import output_guard
from rsi_env.reward.objective import adjusted_value, metric_value, score

__all__ = ["build_report", "finite", "render_markdown", "write_report"]


def _pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio) if math.isfinite(log_ratio) else math.nan


def build_report(plan: EvalPlan, doc: dict[str, Any] | None = None,
                 results: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The report of ``plan`` as data (from its files unless ``doc``/``results`` are given)."""
    doc = doc if doc is not None else load_candidates(plan)
    results = results if results is not None else read_results(plan)
    task = load_task(doc["env"])
    names = [w["name"] for w in doc["workloads"]]
    real = {r["name"]: r for r in results}
    d_real = real.get("defaults")
    d_real_tels = [Telemetry.from_dict(t) for t in d_real["telemetry"]] if d_real else None
    d_sim_tels = [Telemetry.from_dict(t) for t in doc["defaults"]["sim"]]
    rows = []
    probes = {p["name"] for p in doc.get("probes", [])}
    for entry in [doc["defaults"], *doc["candidates"], *doc.get("probes", [])]:
        sim_tels = [Telemetry.from_dict(t) for t in entry["sim"]]
        r = real.get(entry["name"])
        real_tels = [Telemetry.from_dict(t) for t in r["telemetry"]] if r else None
        per_wl, raw = {}, {}
        for k, w in enumerate(names):
            s_obj = adjusted_value(sim_tels[k], task)
            r_obj = adjusted_value(real_tels[k], task) if real_tels else math.nan
            per_wl[w] = {"sim": s_obj, "real": r_obj,
                         "error_pct": 100.0 * (s_obj - r_obj) / r_obj if r_obj > 0 else math.nan}
            raw[w] = {"sim": metric_value(sim_tels[k], task.metric) if sim_tels[k].ok else math.nan,
                      "real": metric_value(real_tels[k], task.metric) if real_tels and real_tels[k].ok else math.nan}
        row: dict[str, Any] = {
            "name": entry["name"], "flags": entry["flags"], "sim_score": score(sim_tels, d_sim_tels, task),
            "real_score": score(real_tels, d_real_tels, task) if real_tels and d_real_tels else math.nan,
            "objective": per_wl, "raw": raw, "measured": r is not None, "real_error": r.get("error") if r else None,
            "gpu_s": r.get("gpu_s") if r else None, "startup_s": r.get("startup_s") if r else None,
            "outputs": None, "probe": entry["name"] in probes,
        }
        if r and d_real and entry["name"] != "defaults" and not r.get("error") and not d_real.get("error"):
            g = output_guard(d_real.get("output_token_ids") or {}, r.get("output_token_ids") or {},
                             plan.promote.min_agreement)
            row["outputs"] = {"ok": g.ok, "reason": g.reason}
        rows.append(row)
    cands = [x for x in rows if x["name"] != "defaults" and not x["probe"]]
    sim_obj = [x["objective"][w]["sim"] for x in cands for w in names]
    real_obj = [x["objective"][w]["real"] for x in cands for w in names]
    ok_real = [x for x in cands if math.isfinite(x["real_score"])]
    best = max(ok_real, key=lambda x: x["real_score"], default=None)
    sim_pick = cands[0] if cands else None
    spent = [float(x["gpu_s"]) for x in rows if x["gpu_s"] is not None]
    evals = int(doc["sim_evaluations"])
    cards = sorted({measured_hardware(doc, r) for r in results}) or [doc["hardware"]]
    real_only = real_only_gpu_s(evals, spent)
    return {
        "plan": plan.name, "env": doc["env"], "model": doc["model"], "hardware": doc["hardware"],
        "real_hardware": ", ".join(cards),  # one card unless real.jsonl was assembled by hand
        "metric": task.metric, "workloads": names, "selection": doc.get("selection"),
        "engine": doc.get("engine", "vllm"),
        # rows of promote runs before SGLang name the vLLM release only
        "real_engine_version": next((r.get("engine_version", r.get("vllm_version")) for r in results), None),
        "sim_engine_version": doc.get("engine_version"), "calibration": doc.get("calibration"),
        "rows": rows,
        "fidelity": {
            "promoted": len(cands), "measured_on_real": sum(x["measured"] for x in cands),
            # a score needs the defaults' real row: without it a candidate's is undefined, not failed
            "failed_on_real": [x["name"] for x in cands if x["measured"] and (
                x["real_error"] or (d_real_tels is not None and not math.isfinite(x["real_score"])))],
            "mape_pct": mape(sim_obj, real_obj),
            "mape_metric_pct": mape(*_raw(cands, names, task.metric)),
            "spearman": spearman([x["sim_score"] for x in cands], [x["real_score"] for x in cands]),
        },
        "improvement": {
            "best_on_real": best["name"] if best else None,
            "best_real_pct": _pct(best["real_score"]) if best else math.nan,
            "sim_pick": sim_pick["name"] if sim_pick else None,
            "sim_pick_real_pct": _pct(sim_pick["real_score"]) if sim_pick else math.nan,
            "sim_pick_sim_pct": _pct(sim_pick["sim_score"]) if sim_pick else math.nan,
        },
        "cost": {
            "real_gpu_s": sum(spent), "real_measurements": len(spent),
            "mean_real_gpu_s": sum(spent) / len(spent) if spent else math.nan,
            "sim_evaluations": evals, "real_only_gpu_s_est": real_only,
            "saving_x": real_only / sum(spent) if spent and sum(spent) > 0 else math.nan,
        },
    }


def _raw(rows: list[dict[str, Any]], names: list[str], metric: str) -> tuple[list[float], list[float]]:
    """Sim and real values of the task's metric before the SLO adjustment (its square can dwarf the metric)."""
    sim, real = [], []
    for x in rows:
        for w in names:
            sim.append(x["raw"][w]["sim"])
            real.append(x["raw"][w]["real"])
    return sim, real


def _f(x: Any, fmt: str = "{:.1f}") -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def render_markdown(rep: dict[str, Any]) -> str:
    """The report as a markdown table and three lines of summary."""
    ws = rep["workloads"]
    label = get_engine(rep.get("engine", "vllm")).label
    head = ["config", "flags", *[f"{w} sim / real ({rep['metric']}, SLO-adj.)" for w in ws],
            "score sim / real (%)", "outputs", "real error"]
    real_hw = rep.get("real_hardware") or rep["hardware"]
    card = (f" on {rep['hardware']}" if real_hw == rep["hardware"]
            else f", searched for {rep['hardware']}, measured on {real_hw}")
    lines = [f"## Two-tier evaluation: {rep['plan']} ({rep['env']}, {rep['model']}{card}, "
             f"real: {label} {rep['real_engine_version']}; sim: {label} {rep['sim_engine_version']}, calibration "
             f"{rep['calibration']})", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rep["rows"]:
        cells = [r["name"] + (" (probe)" if r["probe"] else ""), "`" + json.dumps(r["flags"], separators=(",", ":")) + "`"]
        for w in ws:
            o = r["objective"][w]
            cells.append(f"{_f(o['sim'], '{:.4g}')} / {_f(o['real'], '{:.4g}')} ({_f(o['error_pct'], '{:+.0f}')}%)")
        cells.append(f"{_f(_pct(r['sim_score']), '{:+.1f}')} / {_f(_pct(r['real_score']), '{:+.1f}')}")
        g = r["outputs"]
        cells.append("—" if g is None else ("ok" if g["ok"] else "FAIL") + f" ({g['reason'].split(' sampled')[0]})")
        err = r["real_error"] or ("" if r["measured"] else "not measured")
        cells.append(err if len(err) <= 120 else err[:117] + "...")
        lines.append("| " + " | ".join(cells) + " |")
    fi, im, co = rep["fidelity"], rep["improvement"], rep["cost"]
    rho, best = _f(fi["spearman"], "{:.3f}"), _f(im["best_real_pct"], "{:+.1f}")
    lines += ["", f"Fidelity of the {fi['promoted']} promoted ({fi['measured_on_real']} measured on real, failed: "
              f"{fi['failed_on_real'] or 'none'}): MAPE {_f(fi['mape_pct'])} % (SLO-adjusted objective; "
              f"{_f(fi['mape_metric_pct'])} % on {rep['metric']} itself), Spearman rho {rho}.",
              f"Real improvement over {label}'s defaults: best promoted {im['best_on_real'] or '(none measured)'} {best} %; "
              f"sim's pick {im['sim_pick']} {_f(im['sim_pick_real_pct'], '{:+.1f}')} % on real "
              f"({_f(im['sim_pick_sim_pct'], '{:+.1f}')} % on sim).",
              f"Real GPU-seconds: {_f(co['real_gpu_s'])} for {co['real_measurements']} measurements "
              f"(mean {_f(co['mean_real_gpu_s'])}, engine start included); the same search on real alone "
              f"({co['sim_evaluations']} evaluations + defaults): ~{_f(co['real_only_gpu_s_est'], '{:.0f}')} "
              f"GPU-seconds ({_f(co['saving_x'])}x more).",
              f"Selection: {rep['selection']}."]
    return "\n".join(lines) + "\n"


def write_report(plan: EvalPlan) -> dict[str, Any]:
    """Build the report and write ``<out>/report.json`` and ``<out>/report.md``."""
    rep = build_report(plan)
    out = Path(plan.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(finite(rep), indent=1) + "\n")
    (out / "report.md").write_text(render_markdown(rep))
    return rep


def finite(x: Any) -> Any:
    """``x`` with non-finite floats as ``None`` (JSON has no NaN)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x
