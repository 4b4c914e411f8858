"""The whole fit: a `Calibration` fitted to real measurements, and its error on held-out ones.

The fit has two stages (`FULL`): the memory terms by least squares on the ``num_gpu_blocks`` vLLM reported (no
simulation needed, `rsi_env.calibrate.memory`), then the timing coefficients by bounded non-linear least squares
on log-ratios of throughput, TTFT p50 and TPOT p50, simulating every training sample
(`rsi_env.calibrate.timing`). Whole configurations are held out (`rsi_env.calibrate.samples.split`), so the
held-out error is the error on configurations the fit has never seen. A host stage may follow
(`rsi_env.calibrate.host`): the CPU-side terms refitted on the runs of the one host the calibration is for.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from rsi_env.calibrate.host import host_stage
from rsi_env.calibrate.report import errors, fitted_at, full_summary, named
from rsi_env.calibrate.samples import Sample, read_rows, samples_from_rows, split
from rsi_env.calibrate.score import evaluate
from rsi_env.calibrate.stages import STAGES
from rsi_env.engine.hardware import HardwareSpec, load_hardware
from rsi_env.sim.calibration import Calibration, load_calibration

__all__ = ["FULL", "fit", "run_calibration"]

FULL = ("memory", "timing")  # the stages of the whole fit, in order


def fit(samples: list[Sample], hw: HardwareSpec, start: Calibration, max_nfev: int = 60) -> Calibration:
    """Every stage of `FULL` in turn from ``start``: the memory terms first, then the timing coefficients (in two
    stages where MoE models were measured: `rsi_env.calibrate.timing.fit_timing`)."""
    cal = start
    for name in FULL:
        cal = STAGES[name].fit(samples, cal, hw, max_nfev)
    return cal


def run_calibration(hardware: str, measurements: list[str], *, engine_version: str = "0.26",
                    out: str | None = None, seed: int = 0, max_nfev: int = 60,
                    rows: list[dict[str, Any]] | None = None, origin: dict[str, Any] | None = None,
                    refit_all: bool = True, host_measurements: list[str] | None = None) -> dict[str, Any]:
    """Fit on the training split, report before/after errors on both splits, optionally write the YAML.

    The held-out errors measure the procedure on configurations it never saw. With ``refit_all`` (the
    default) the calibration written is then fitted again on every measurement, starting from the split's
    fit: the held-out configurations are often the only ones of their regime (e.g. a small ``max_num_seqs``
    whose full batches plus a new prompt exceed the largest CUDA graph), and a simulator that users run
    should know them. Its provenance keeps the procedure's held-out error and its own error on all.

    The measurements are the files ``measurements``, or ``rows`` in their form (from the experience store,
    with ``origin`` — which store, which rows — kept in the provenance).

    With ``host_measurements`` (one host's runs) the host stage follows (`host_stage`), split the same way: its
    `HOST` terms fitted on part of that host's configurations, the error reported on the rest before and after,
    then refitted on all of them (with ``refit_all``). The calibration written is then that host's.
    """
    hw = load_hardware(hardware)
    if rows is not None:
        samples, blob = samples_from_rows(rows, "the rows given"), json.dumps(rows, sort_keys=True, default=str)
    else:
        mtexts, mrows = read_rows(measurements)
        samples, blob = samples_from_rows(mrows, str([str(m) for m in measurements])), "".join(mtexts)
    # The host's runs are read before the main fit, so that a bad file fails in a second, not after it.
    htexts, hrows = read_rows(host_measurements or [])
    hsamples = samples_from_rows(hrows, str(list(host_measurements))) if host_measurements else []
    train, held = split(samples, seed)
    before = load_calibration(hardware, engine_version)
    prior = Calibration(hardware=hardware, engine_version=engine_version)
    t0 = time.perf_counter()
    fitted = fit(train, hw, prior, max_nfev=max_nfev)
    report: dict[str, Any] = {
        "hardware": hardware, "engine_version": engine_version, "seed": seed,
        "n_train": len(train), "n_held_out": len(held),
        "held_out_configs": sorted({s.config_key for s in held}),
        "fit_seconds": round(time.perf_counter() - t0, 1),
        "before": {"train": evaluate(train, before, hw), "held_out": evaluate(held, before, hw)},
        "after": {"train": evaluate(train, fitted, hw), "held_out": evaluate(held, fitted, hw)},
    }
    if refit_all:
        t1 = time.perf_counter()
        fitted = fit(samples, hw, fitted, max_nfev=max(1, max_nfev // 2))
        report["refit_all_seconds"] = round(time.perf_counter() - t1, 1)
    stage: dict[str, Any] = {}
    if hsamples:
        fitted, report["host"], stage = host_stage(hsamples, hrows, host_measurements or [], fitted, hw,
                                                   seed=seed, max_nfev=max_nfev, refit_all=refit_all)
    report["after_all_configs"] = {k: v for k, v in evaluate(samples, fitted, hw).items() if k != "per_sample"}
    blob += "".join(htexts)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
    ho: dict[str, Any] = report["after"]["held_out"]
    fitted = named(fitted, digest, {
        "fitted": fitted_at(), **(origin or {}),
        "measurements": [str(m) for m in measurements],
        "measurements_sha256_12": digest, "n_train": len(train), "n_held_out": len(held),
        "held_out_configs": report["held_out_configs"],
        "held_out_error": errors(ho),
        "fitted_on": "all measurements (refit after the held-out evaluation)" if refit_all else "the training split",
        "all_configs_error": errors(report["after_all_configs"]),
        "rank_agreement_all_configs": report["after_all_configs"]["spearman"], **stage,
    })
    report["calibration"] = fitted.to_dict()
    if out:
        fitted.save(out)
    report["summary"] = full_summary(report, fitted.id, samples, refit_all)
    return report
