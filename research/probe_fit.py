"""The probe stage: how a calibration's CPU terms move with the host's CPU probe.

The one-H200 machines this project is lent run the engine's CPU side at different speeds from one engine start to
the next: vLLM's defaults on Llama-3.1-8B, started four times in a row on one machine (the twenty-sixth lease),
gave ``short_long`` TPOT p50 7.3-8.5 ms and ``many_small`` TTFT p50 33-149 ms, while ``long_context``'s GPU-bound
steps stayed within 1 %. The probe the real tier takes before each engine starts (`rsi_env.real.host.cpu_probe_ms`:
a fixed piece of interpreter work) read 14 ms before the fast start and 23-26 ms before the three slow ones; on the
next lease it moved from 15 to 27 ms within one start, and over the ten probed starts of leases 25-27 the rule below,
each start predicted by the others', did no better than one constant factor; with nothing running, that machine's
vCPUs flip between fast and ~1.7x slower within seconds (research/calibration-notebook.md). The stage is
the test of whether a host's probe tracks its state, and the rule where it does.

The stage finds, for each engine start that carries a probe, the factor on the CPU terms (`CPU_TERMS`) that fits
its workloads best but the bistable ones (`run_factor`: a grid, then a bounded scalar search; one number per start,
so the simulator's steps in the objective cannot trap it as they trap a joint fit), then the rule of
`Calibration.at_cpu_probe` — the probe at which the factor is 1 and the power it grows with — as the least-squares
line of log factor on log probe.
Each start is also predicted by the rule the other starts give (leave one run out: a probe is one start's, so
starts, not configurations, are held out), beside the base calibration, which knows no probe, and beside one constant
factor (the other starts' geometric mean), which knows the level of the starts but not their probes: the probe is
worth its rule only where the rule beats the constant.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import replace
from typing import Any

import numpy as np

from rsi_env.calibrate.host import PROBE
from rsi_env.calibrate.report import calibration_id
from rsi_env.calibrate.samples import Sample, read_rows, samples_from_rows
from rsi_env.calibrate.score import evaluate
from rsi_env.calibrate.stage import stage_base
from rsi_env.calibrate.timing import NOISY, residuals
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.sim.calibration import Calibration

__all__ = ["probe_rule", "run_factor", "run_probe_calibration"]

FACTORS = np.exp(np.linspace(math.log(0.5), math.log(2.5), 25))  # the grid of `run_factor`, 7 % apart
REFINE = 10  # evaluations of the bounded search between the best grid point's neighbours
MAX_EXP = 3.0


def _runs(samples: list[Sample]) -> dict[tuple[str, float, float], list[Sample]]:
    """Samples by engine start (configuration, probe, start-up time): a probe belongs to one start."""
    runs: dict[tuple[str, float, float], list[Sample]] = {}
    for s in samples:
        if s.cpu_probe_ms:
            runs.setdefault((s.config_key, float(s.cpu_probe_ms), s.startup_s), []).append(s)
    return runs


def run_factor(samples: list[Sample], hw: HardwareSpec, base: Calibration) -> float:
    """The factor on ``base``'s CPU terms that fits one engine start's ``samples`` best (`residuals`' squares): the
    best point of a grid, then a bounded scalar search between its neighbours."""
    from scipy.optimize import minimize_scalar

    def loss(log_f: float) -> float:
        return float(np.sum(residuals(samples, base.with_cpu_factor(math.exp(log_f)), hw) ** 2))

    grid = np.log(FACTORS)
    losses = [loss(x) for x in grid]
    i = int(np.argmin(losses))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    r = minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"maxiter": REFINE})
    return math.exp(float(r.x) if r.fun < losses[i] else float(grid[i]))


def probe_rule(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(cpu_probe_ref_ms, cpu_probe_exp) from (probe, factor) pairs: log factor = exp * (log probe - log ref) by
    least squares. Where the factor does not grow with the probe the power is 0 (the probe tells nothing) and the
    reference is the probes' geometric mean."""
    lp = np.log([p for p, _ in points])
    lf = np.log([f for _, f in points])
    if len(points) < 2 or float(np.ptp(lp)) == 0.0:
        raise ValueError("probe_rule: needs engine starts at two or more different probes")
    slope = float(np.sum((lp - lp.mean()) * (lf - lf.mean())) / np.sum((lp - lp.mean()) ** 2))
    if slope <= 0:
        return float(math.exp(lp.mean())), 0.0
    slope = min(slope, MAX_EXP)
    return float(math.exp(lp.mean() - lf.mean() / slope)), slope


def _mape(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    ok = [r for r in rows if r["sim_error"] is None]
    return {f"{m}_mape": round(float(np.mean([abs(r[f"sim_{m}"] / r[f"real_{m}"] - 1) for r in ok])), 4) if ok
            else None for m in ("tok_s", "ttft_p50", "tpot_p50")}


def run_probe_calibration(hardware: str, probe_measurements: list[str], *, base: Calibration | None = None,
                          engine_version: str = "0.26", out: str | None = None) -> dict[str, Any]:
    """The probe stage alone: ``base`` (default: the calibration in use) with `PROBE` fitted on the engine starts of
    ``probe_measurements`` that carry a probe taken before their engine started, every other term kept.

    The calibration written keeps the base's provenance, names the base, and records the stage: each start's probe
    and factor, the rule, and the leave-one-run-out error before (the base) and after (the others' rule).
    """
    hw, base = stage_base("run_probe_calibration", hardware, base, engine_version)
    texts, rows = read_rows(probe_measurements)
    runs = _runs(samples_from_rows(rows, str(list(probe_measurements))))
    if len({p for _, p, _ in runs}) < 2:
        raise ValueError(f"run_probe_calibration: {len(runs)} run(s) in {list(probe_measurements)} carry a CPU "
                         "probe, at fewer than two different probes; the stage needs starts at two or more")
    t0 = time.perf_counter()
    # A start's factor is read off its workloads but a bistable one (`NOISY`: which mode it lands in is not the CPU's
    # speed alone), where it has others.
    factors = {key: run_factor([s for s in v if s.workload.name not in NOISY] or v, hw, base)
               for key, v in runs.items()}
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    level: list[dict[str, Any]] = []
    per_run: list[dict[str, Any]] = []
    for key, held in runs.items():
        others = [(k[1], f) for k, f in factors.items() if k != key]
        if len({p for p, _ in others}) < 2:
            continue  # the others cannot give a rule: this start is not held out
        ref, exp = probe_rule(others)
        fold = base.with_coefficients({"cpu_probe_ref_ms": ref, "cpu_probe_exp": exp})
        constant = base.with_cpu_factor(float(np.exp(np.mean(np.log([f for _, f in others])))))
        b, a = evaluate(held, base, hw)["per_sample"], evaluate(held, fold.at_cpu_probe(key[1]), hw)["per_sample"]
        c = evaluate(held, constant, hw)["per_sample"]
        before += b
        after += a
        level += c
        per_run.append({"config": key[0], "cpu_probe_ms": key[1], "factor": round(factors[key], 4),
                        "before": _mape(b), "after": _mape(a), "constant": _mape(c),
                        "rule_of_the_others": {"cpu_probe_ref_ms": round(ref, 3), "cpu_probe_exp": round(exp, 4)}})
    ref, exp = probe_rule([(k[1], f) for k, f in factors.items()])
    fitted = base.with_coefficients({"cpu_probe_ref_ms": ref, "cpu_probe_exp": exp})
    digest = hashlib.sha256((base.id + "".join(texts)).encode()).hexdigest()[:12]
    stage: dict[str, Any] = {
        "measurements": [str(m) for m in probe_measurements], "sha256_12": digest, "terms": list(PROBE),
        "values": {n: getattr(fitted, n) for n in PROBE}, "runs": len(runs),
        "factors": [{"config": k[0], "cpu_probe_ms": k[1], "factor": round(f, 4)} for k, f in factors.items()],
        "leave_one_run_out_before": _mape(before), "leave_one_run_out_after": _mape(after),
        "leave_one_run_out_constant": _mape(level)}
    fitted = replace(fitted, id=calibration_id(fitted, digest), provenance={
        **base.provenance, "fitted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "base": base.id,
        "probe_stage": stage})
    if out:
        fitted.save(out)
    report: dict[str, Any] = {"hardware": hardware, "base": base.id, "probe_stage": stage, "per_run": per_run,
                              "fit_seconds": round(time.perf_counter() - t0, 1), "calibration": fitted.to_dict()}

    def line(m: dict[str, float | None]) -> str:
        return "  ".join(f"{k} {100 * v:.1f} %" if v is not None else f"{k} -" for k, v in m.items())

    report["summary"] = "\n".join([
        f"calibration {fitted.id}: {base.id} with the CPU terms at a probe of {ref:.1f} ms, scaling as its ratio to "
        f"the power {exp:.2f}, from {len(runs)} engine starts",
        f"  each start, by the others' rule: before (no probe) {line(stage['leave_one_run_out_before'])}",
        f"                                   after (its probe) {line(stage['leave_one_run_out_after'])}",
        f"      one constant factor, no probe (the others' mean) {line(stage['leave_one_run_out_constant'])}"]
        + [f"    probe {r['cpu_probe_ms']:5.1f} ms, factor {r['factor']:.2f}, {r['config']}: {line(r['before'])} -> "
           f"{line(r['after'])}" for r in per_run])
    return report
