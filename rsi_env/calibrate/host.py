"""The host stage: the CPU-side terms refitted on the runs of the one host a calibration is for.

One host's CPU sets the engine's pace wherever the GPU waits for it (small steps, many requests, the front end):
the same H200 model ran `short_long`'s defaults at a TPOT p50 of 6.8 ms on one host and 8.2-9.4 ms on another
(both in `data/measurements/h200-vllm0.26/`). A few runs on the new host and a minute of fitting refit its `HOST`
terms, every GPU and model term kept. The stage follows the whole fit (``rsi-env calibrate full
--host-measurements``) or runs alone from a base (``rsi-env calibrate host``): no main fit (tens of minutes) is
repeated, and the calibration written keeps the base's provenance, names the base, and records the host stage
(split, errors before and after, the host) in place of the base's.
"""

from __future__ import annotations

import time
from typing import Any

from rsi_env.calibrate.report import errors, host_summary
from rsi_env.calibrate.samples import Sample, dense_and_moe, samples_from_rows, split
from rsi_env.calibrate.score import evaluate
from rsi_env.calibrate.stage import Alone, Stage, StageRun
from rsi_env.calibrate.timing import fit_terms
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.sim.calibration import CPU_TERMS, Calibration

__all__ = ["HOST", "PROBE", "STAGE", "fit_host", "host_of", "host_stage"]

# The CPU terms (`CPU_TERMS`) but eager launches. One H200 behind two hosts runs the same kernels at the same speed,
# but not these (`many_small`'s steps took 8-12 ms on the one-H200 host and 13-30 ms on the two-GPU host): the host
# stage (`fit_host`) refits them on the runs of the host a calibration is for.
HOST = tuple(n for n in CPU_TERMS if n != "eager_layer_s")
# The probe stage (research/probe_fit.py): how the CPU terms move with the host's CPU probe.
PROBE = ("cpu_probe_ref_ms", "cpu_probe_exp")


def fit_host(samples: list[Sample], hw: HardwareSpec, start: Calibration, max_nfev: int = 60) -> Calibration:
    """The host stage: the `HOST` terms refitted on one host's runs, every term of the GPU and the model fixed.

    The GPU terms need many configurations (models, parallelism, fp8, MoE) that one host's few runs cannot
    measure; the CPU terms need only that host's runs of a few. A MoE model's runs stay out (their JIT pauses,
    see `rsi_env.calibrate.timing.fit_timing`) where dense ones are given.
    """
    dense, moe = dense_and_moe(samples)
    return fit_terms(dense or moe, hw, start, HOST, max_nfev)


def host_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The host the first of ``rows`` that names one was measured on (`rsi_env.real.host`), for provenance."""
    host: dict[str, Any] = next((r["host"] for r in rows if r.get("host")), {})
    return {k: host[k] for k in ("cpu", "cpus", "gpus") if k in host}


def host_stage(hsamples: list[Sample], hrows: list[dict[str, Any]], host_measurements: list[str], base: Calibration,
               hw: HardwareSpec, *, seed: int, max_nfev: int, refit_all: bool,
               ) -> tuple[Calibration, dict[str, Any], dict[str, Any]]:
    """The host stage on one host's runs from ``base``: fitted on part of the host's configurations, the error on
    the rest before and after, then (with ``refit_all``) refitted on all of them.

    Returns the calibration, the report's ``host`` part and the provenance's ``host_stage`` entry.
    """
    htrain, hheld = split(hsamples, seed)
    if not htrain:  # one configuration, not the defaults: nothing to hold out from
        htrain, hheld = hsamples, []
    fitted = fit_host(htrain, hw, base, max_nfev)
    report: dict[str, Any] = {"n_train": len(htrain), "n_held_out": len(hheld),
                              "held_out_configs": sorted({s.config_key for s in hheld}),
                              "before": evaluate(hheld, base, hw), "after": evaluate(hheld, fitted, hw)}
    if refit_all:
        fitted = fit_host(hsamples, hw, fitted, max(1, max_nfev // 2))
    hall = evaluate(hsamples, fitted, hw)
    report["after_all_configs"] = {k: v for k, v in hall.items() if k != "per_sample"}
    stage = {"host_stage": {
        "measurements": [str(m) for m in host_measurements], "host": host_of(hrows),
        "terms": list(HOST), "n_train": len(htrain), "n_held_out": len(hheld),
        "held_out_error_before": errors(report["before"]),
        "held_out_error": errors(report["after"]), "all_configs_error": errors(hall)}}
    return fitted, report, stage


def _run(r: StageRun) -> tuple[Calibration, dict[str, Any], dict[str, Any]]:
    """`host_stage` from the base; the provenance names the host's runs by their digest."""
    t0 = time.perf_counter()
    fitted, host, stage = host_stage(r.items, r.rows, r.measurements, r.base, r.hw, seed=r.seed, max_nfev=r.max_nfev,
                                     refit_all=r.refit_all)
    report: dict[str, Any] = {"hardware": r.base.hardware, "engine_version": r.base.engine_version, "seed": r.seed,
                              "base": r.base.id, "host": host, "fit_seconds": round(time.perf_counter() - t0, 1)}
    return fitted, report, {"host_measurements_sha256_12": r.digest, **stage}


STAGE = Stage("host", HOST, lambda samples, start, hw, max_nfev: fit_host(samples, hw, start, max_nfev), evaluate,
              Alone(samples_from_rows, _run, host_summary))
