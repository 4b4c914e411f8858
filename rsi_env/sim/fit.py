"""Fit a `Calibration` to real measurements and report its error on held-out ones.

Measurements are the JSON lines :mod:`rsi_env.real.vllm_driver` writes (one per config and
workload). The fit has two stages: the memory terms by least squares on the ``num_gpu_blocks``
vLLM reported (no simulation needed), then the timing coefficients by bounded non-linear least
squares on log-ratios of throughput, TTFT p50 and TPOT p50, simulating every training sample.
Whole configurations are held out (never one workload of a config), chosen by a seeded split, so
the held-out error is the error on configurations the fit has never seen. A host stage may follow
(`fit_host`): the CPU-side terms refitted on the runs of the one host the calibration is for.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec, load_hardware
from rsi_env.engine.metrics import spearman
from rsi_env.engine.model import load_model
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.errors import CalibrationError
from rsi_env.sim import simulate_detailed
from rsi_env.sim.calibration import COEFFICIENTS, CPU_TERMS, Calibration, load_calibration
from rsi_env.sim.memory import MemoryPlan, plan_memory

__all__ = ["Sample", "blocks_error", "calibration_id", "evaluate", "fit", "fit_host", "load_samples", "residuals",
           "run_calibration",
           "run_host_calibration", "run_memory_calibration", "samples_from_rows"]

TIMING = ("mm_eff", "mm_half_tokens", "mm_half_exp", "roofline_sharpness", "bw_eff", "attn_eff", "kv_bw_eff", "step_s",
          "per_req_s", "piecewise_layer_s", "eager_layer_s", "uncaptured_layer_s", "cpu_step_s", "cpu_per_req_s",
          "cpu_per_new_req_s", "frontend_s")
# Fitted only where the measurements hold tensor-parallel runs; otherwise they would drift unconstrained.
COMM = ("comm_eff", "allreduce_s", "eager_allreduce_s")
# Fitted only where the measurements hold fp8-weight runs.
FP8 = ("quant_layer_s",)
# Fitted only where the measurements hold a MoE model.
MOE = ("moe_mm_eff", "uncaptured_moe_layer_s")
# The memory terms, fitted on the KV blocks vLLM reports (act_moe_coef too where a MoE model was measured).
MEMORY = ("non_torch_bytes", "act_token_coef", "act_logit_coef")
# The CPU terms (`CPU_TERMS`) but eager launches. One H200 behind two hosts runs the same kernels at the same speed,
# but not these (`many_small`'s steps took 8-12 ms on the one-H200 host and 13-30 ms on the two-GPU host): the host
# stage (`fit_host`) refits them on the runs of the host a calibration is for.
HOST = tuple(n for n in CPU_TERMS if n != "eager_layer_s")
# The probe stage (research/probe_fit.py): how the CPU terms move with the host's CPU probe.
PROBE = ("cpu_probe_ref_ms", "cpu_probe_exp")
NOISY = frozenset({"many_small"})
# A MoE run whose step trace stops this long between two steps had vLLM JIT-compiling its fused-MoE kernel
# mid-workload (no step of the calibration workloads takes half as long); the MoE terms are not fitted on it.
JIT_PAUSE_S = 0.4
_BOUNDS = {
    "mm_eff": (0.2, 1.0), "mm_half_tokens": (1.0, 2048.0), "roofline_sharpness": (1.2, 12.0), "bw_eff": (0.3, 1.0),
    "attn_eff": (0.05, 1.0), "kv_bw_eff": (0.1, 1.0),
    "step_s": (1e-5, 5e-3), "per_req_s": (1e-8, 1e-4), "piecewise_layer_s": (1e-7, 2e-3),
    "eager_layer_s": (1e-6, 5e-4), "uncaptured_layer_s": (1e-6, 2e-3), "cpu_step_s": (1e-5, 2e-2),
    "cpu_per_req_s": (1e-8, 2e-4), "frontend_s": (1e-5, 5e-2),
    "cpu_per_new_req_s": (1e-7, 5e-3), "mm_half_exp": (0.01, 3.0),
    "comm_eff": (0.2, 1.0), "allreduce_s": (1e-7, 2e-4), "eager_allreduce_s": (1e-7, 2e-3),
    "quant_layer_s": (1e-8, 2e-4), "moe_mm_eff": (0.1, 1.0), "uncaptured_moe_layer_s": (1e-7, 2e-3),
}


@dataclass(frozen=True)
class Sample:
    """One real measurement: what ran, and what the real engine reported."""

    model: str
    flags: dict[str, Any]
    workload: Workload
    real: Telemetry
    num_gpu_blocks: int
    engine_version: str
    startup_s: float
    longest_gap_s: float = 0.0  # the longest time between two consecutive steps of the real run's step trace
    cpu_probe_ms: float | None = None  # the host's CPU probe before the engine started (`rsi_env.real.host`)

    @property
    def config_key(self) -> str:
        return f"{self.model} {json.dumps(self.flags, sort_keys=True)}"


def samples_from_rows(rows: list[dict[str, Any]], where: str = "the measurements") -> list[Sample]:
    """Samples from real-tier measurement lines (the driver's JSON form); failed measurements are skipped."""
    out = []
    for row in rows:
        tel = Telemetry.from_dict(row["telemetry"])
        if tel.error:
            continue
        t = (row.get("steps") or {}).get("t") or []
        out.append(Sample(row["model"], row["flags"], Workload.from_dict(row["workload_spec"]), tel,
                          int((row.get("resolved") or {}).get("num_gpu_blocks") or 0), row["vllm_version"],
                          float(row.get("startup_s") or 0.0), float(np.diff(t).max()) if len(t) > 1 else 0.0,
                          (row.get("host") or {}).get("cpu_probe_ms")))
    if not out:
        raise CalibrationError(f"no usable measurements in {where}")
    return out


def _read_rows(paths: list[str] | list[str | Path]) -> tuple[list[str], list[dict[str, Any]]]:
    """The files' texts (for a calibration's digest) and their measurement lines, each file read once."""
    texts = [Path(p).read_text() for p in paths]
    return texts, [json.loads(line) for t in texts for line in t.splitlines() if line.strip()]


def load_samples(paths: list[str | Path]) -> list[Sample]:
    return samples_from_rows(_read_rows(paths)[1], str([str(p) for p in paths]))


class _Keyed(Protocol):
    @property
    def config_key(self) -> str: ...


_K = TypeVar("_K", bound=_Keyed)


def split(samples: list[_K], seed: int, held_fraction: float = 0.3) -> tuple[list[_K], list[_K]]:
    """Hold out whole configurations: a seeded hash of each config decides, defaults always train."""
    keys = sorted({s.config_key for s in samples})
    scored = sorted(keys, key=lambda k: hashlib.sha256(f"{seed}:{k}".encode()).hexdigest())
    held = {k for k in scored if "{}" not in k}  # every model's default config stays in training
    n_held = max(1, round(held_fraction * len(keys)))
    held = set([k for k in scored if k in held][:n_held])
    return [s for s in samples if s.config_key not in held], [s for s in samples if s.config_key in held]


def _predict(s: Sample, cal: Calibration, hw: HardwareSpec) -> Telemetry:
    return simulate_detailed(EngineConfig.from_dict(s.flags), load_model(s.model), hw, s.workload,
                             engine_version=s.engine_version, calibration=cal)[0]


def _ape(pred: float, real: float) -> float:
    return abs(pred - real) / abs(real) if real else 0.0


def rank_agreement(pairs: list[tuple[Sample, Telemetry]], min_configs: int = 3) -> dict[str, float | None]:
    """Spearman of real vs simulated values across configurations, per (model, workload), averaged per metric.

    Throughput is ranked only where the load saturates (a burst, a closed loop: under a fixed arrival rate it is
    the rate); latencies on every workload. Ties share their mean rank (`rsi_env.engine.metrics.spearman`): a
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
        p = _predict(s, cal, hw)
        rows.append((s, p))
    ok = [(s, p) for s, p in rows if p.ok]
    err: dict[str, Any] = {"n": len(samples), "n_failed_in_sim": len(rows) - len(ok)}
    for f in ("out_tok_per_s", "ttft_p50", "tpot_p50", "ttft_p99", "tpot_p99"):
        err[f"{f}_mape"] = float(np.mean([_ape(getattr(p, f), getattr(s.real, f)) for s, p in ok])) if ok else None
    err["num_gpu_blocks_mape"] = float(np.mean([_ape(p.num_gpu_blocks, s.num_gpu_blocks) for s, p in ok
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


def _dense_and_moe(samples: list[Sample]) -> tuple[list[Sample], list[Sample]]:
    """The samples of dense models and those of MoE models: the two stages of every fit."""
    is_moe = {m: load_model(m).is_moe for m in {s.model for s in samples}}
    return [s for s in samples if not is_moe[s.model]], [s for s in samples if is_moe[s.model]]


def _fit_memory(samples: list[Sample], cal: Calibration, hw: HardwareSpec) -> Calibration:
    """Least squares of the memory terms on the KV bytes vLLM found (num_gpu_blocks x block bytes).

    In two stages, as the timing terms: the terms every model shares on the dense models' configurations, then
    the MoE term on the MoE models' with those fixed (a MoE-only set fits all of them on its own). One joint fit
    lets the MoE configurations, whose profile run is dominated by the fused-MoE caches, bend the shared terms.
    """
    dense, moe = _dense_and_moe(_kv_points(samples))
    if dense:
        cal = _fit_memory_terms(dense, cal, hw, MEMORY)
    if moe:
        cal = _fit_memory_terms(moe, cal, hw, ("act_moe_coef",) if dense else MEMORY + ("act_moe_coef",))
    return cal


def _kv_points(samples: list[Sample]) -> list[Sample]:
    """One sample per configuration that reports its KV cache: every workload of a configuration shares one."""
    seen: dict[str, Sample] = {}
    for s in samples:
        if s.num_gpu_blocks:
            seen.setdefault(s.config_key, s)
    return list(seen.values())


def _memory_plan(s: Sample, cal: Calibration, hw: HardwareSpec) -> MemoryPlan:
    """The memory plan of a sample's configuration (vLLM's profiling, as `plan_memory` models it)."""
    m = load_model(s.model)
    return plan_memory(m, hw, EngineConfig.from_dict(s.flags).resolve(m, hw, s.engine_version), cal)


def _fit_memory_terms(pts: list[Sample], cal: Calibration, hw: HardwareSpec, names: tuple[str, ...]) -> Calibration:
    """Least squares of the memory terms ``names`` on the configurations ``pts`` (one sample each), others fixed."""
    from scipy.optimize import least_squares

    scale = {"non_torch_bytes": 1e9}

    def resid(x: np.ndarray) -> np.ndarray:
        c = cal.with_coefficients({n: float(v) * scale.get(n, 1.0) for n, v in zip(names, x, strict=True)})
        out = []
        for s in pts:
            plan = _memory_plan(s, c, hw)
            out.append((plan.kv_cache_bytes - s.num_gpu_blocks * plan.block_bytes) / 1e9)
        return np.asarray(out)

    x0 = np.array([getattr(cal, n) / scale.get(n, 1.0) for n in names])
    r = least_squares(resid, x0, bounds=([0.0] * len(names), [20.0] * len(names)))
    return cal.with_coefficients({n: float(v) * scale.get(n, 1.0) for n, v in zip(names, r.x, strict=True)})


def residuals(samples: list[Sample], cal: Calibration, hw: HardwareSpec) -> np.ndarray:
    """What every timing fit minimises: log-ratios of throughput, TTFT p50 and TPOT p50 of each sample, weighted."""
    out = []
    for s in samples:
        p = _predict(s, cal, hw)
        if not p.ok:
            out += [3.0, 3.0, 3.0]
            continue
        # Latencies of a workload near its tipping point (many_small: the step time and the batch feed each
        # other, and repeated real runs land far apart) count half.
        w = 0.5 if s.workload.name in NOISY else 1.0
        out.append(math.log(max(p.out_tok_per_s, 1e-9) / s.real.out_tok_per_s) * 2.0)
        out.append(math.log(max(p.ttft_p50, 1e-6) / max(s.real.ttft_p50, 1e-6)) * w)
        out.append(math.log(max(p.tpot_p50, 1e-6) / max(s.real.tpot_p50, 1e-6)) * 1.5 * w)
    return np.asarray(out)


def _fit_timing(samples: list[Sample], hw: HardwareSpec, cal: Calibration, names: tuple[str, ...],
                max_nfev: int) -> Calibration:
    """Least squares of the timing coefficients ``names`` (in log space, within physical bounds), others fixed,
    on `residuals`."""
    from scipy.optimize import least_squares

    lo = np.log([_BOUNDS[n][0] for n in names])
    hi = np.log([_BOUNDS[n][1] for n in names])
    x0 = np.clip(np.log([max(getattr(cal, n), _BOUNDS[n][0]) for n in names]), lo + 1e-6, hi - 1e-6)

    def resid(x: np.ndarray) -> np.ndarray:
        return residuals(samples, cal.with_coefficients({n: float(math.exp(v)) for n, v in zip(names, x, strict=True)}),
                         hw)

    r = least_squares(resid, x0, bounds=(lo, hi), max_nfev=max_nfev, diff_step=0.05, x_scale=1.0)
    return cal.with_coefficients({n: float(math.exp(v)) for n, v in zip(names, r.x, strict=True)})


def fit(samples: list[Sample], hw: HardwareSpec, start: Calibration, max_nfev: int = 60) -> Calibration:
    """Memory terms first, then the timing coefficients, in two stages where MoE models were measured.

    The terms every model shares are fitted on the dense models' measurements; the MoE terms (`MOE`) then on the
    MoE models' with the shared ones fixed. A MoE engine's runs carry pauses of their own (vLLM JIT-compiles its
    fused-MoE Triton kernel for batch shapes a short warm-up does not reach, inside the measured workloads:
    `rsi_env.real.warmup`): a joint fit would let them bend the terms the dense models share, and the MoE terms
    are fitted only on MoE runs without such a pause (`JIT_PAUSE_S`).
    """
    cal = _fit_memory(samples, start, hw)
    dense, moe_runs = _dense_and_moe(samples)
    moe = [s for s in moe_runs if s.longest_gap_s < JIT_PAUSE_S]
    shared = dense or moe or samples  # a MoE-only set fits every term on its runs without a pause
    has_tp = any(int(s.flags.get("tensor_parallel_size", 1)) > 1 for s in shared)
    has_fp8 = any(s.flags.get("quantization") for s in shared)
    names = TIMING + (COMM if has_tp else ()) + (FP8 if has_fp8 else ()) + (() if dense else MOE)
    cal = _fit_timing(shared, hw, cal, names, max_nfev)
    if dense and moe:
        cal = _fit_timing(moe, hw, cal, MOE, max_nfev)
    return cal


def fit_host(samples: list[Sample], hw: HardwareSpec, start: Calibration, max_nfev: int = 60) -> Calibration:
    """The host stage: the `HOST` terms refitted on one host's runs, every term of the GPU and the model fixed.

    The GPU terms need many configurations (models, parallelism, fp8, MoE) that one host's few runs cannot
    measure; the CPU terms need only that host's runs of a few. A MoE model's runs stay out (their JIT pauses,
    see `fit`) where dense ones are given.
    """
    dense, moe = _dense_and_moe(samples)
    return _fit_timing(dense or moe, hw, start, HOST, max_nfev)


def _host_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The host the first of ``rows`` that names one was measured on (`rsi_env.real.host`), for provenance."""
    host: dict[str, Any] = next((r["host"] for r in rows if r.get("host")), {})
    return {k: host[k] for k in ("cpu", "cpus", "gpus") if k in host}


def calibration_id(cal: Calibration, measurements_digest: str) -> str:
    """``<hardware>-vllm<version>-<hash>``: the hash covers the measurements and the coefficients fitted to them.

    Two fits of the same measurements by different code (a new term, a new procedure) are different
    calibrations; every simulated measurement names the one it used (`Telemetry.calibration`).
    """
    coeffs = json.dumps({n: getattr(cal, n) for n in COEFFICIENTS}, sort_keys=True)
    h = hashlib.sha256(f"{measurements_digest}:{coeffs}".encode()).hexdigest()[:12]
    return f"{cal.hardware}-vllm{cal.engine_version}-{h}"


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

    With ``host_measurements`` (one host's runs) the host stage follows (`fit_host`), split the same way: its
    `HOST` terms fitted on part of that host's configurations, the error reported on the rest before and after,
    then refitted on all of them (with ``refit_all``). The calibration written is then that host's.
    """
    hw = load_hardware(hardware)
    if rows is not None:
        samples, blob = samples_from_rows(rows, "the rows given"), json.dumps(rows, sort_keys=True, default=str)
    else:
        mtexts, mrows = _read_rows(measurements)
        samples, blob = samples_from_rows(mrows, str([str(m) for m in measurements])), "".join(mtexts)
    # The host's runs are read before the main fit, so that a bad file fails in a second, not after it.
    htexts, hrows = _read_rows(host_measurements or [])
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
    host_stage: dict[str, Any] = {}
    if hsamples:
        fitted, report["host"], host_stage = _host_stage(hsamples, hrows, host_measurements or [], fitted, hw,
                                                         seed=seed, max_nfev=max_nfev, refit_all=refit_all)
    report["after_all_configs"] = {k: v for k, v in evaluate(samples, fitted, hw).items() if k != "per_sample"}
    blob += "".join(htexts)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
    ho: dict[str, Any] = report["after"]["held_out"]
    fitted = replace(fitted, id=calibration_id(fitted, digest), provenance={
        "fitted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(origin or {}),
        "measurements": [str(m) for m in measurements],
        "measurements_sha256_12": digest, "n_train": len(train), "n_held_out": len(held),
        "held_out_configs": report["held_out_configs"],
        "held_out_error": _errors(ho),
        "fitted_on": "all measurements (refit after the held-out evaluation)" if refit_all else "the training split",
        "all_configs_error": _errors(report["after_all_configs"]),
        "rank_agreement_all_configs": report["after_all_configs"]["spearman"], **host_stage,
    })
    report["calibration"] = fitted.to_dict()
    if out:
        fitted.save(out)
    lines = [f"calibration {fitted.id}: {len(train)} training and {len(held)} held-out measurements"]
    for when in ("before", "after"):
        for part in ("train", "held_out"):
            e = report[when][part]
            lines.append(f"  {when:6s} {part:8s} {_mapes(e)}  blocks MAPE {_pct(e['num_gpu_blocks_mape'])}")
    if "host" in report:
        lines += _host_stage_lines(report["host"])
    lines.append(f"  {'written' if refit_all else 'fitted'} calibration ({'refit on all' if refit_all else 'split fit'}) "
                 f"on all {len(samples)}: {_mapes(report['after_all_configs'])}")
    lines.append(f"  ranks across all {len({s.config_key for s in samples})} configurations (Spearman, per model and "
                 f"workload, mean): {report['after_all_configs']['spearman']}")
    report["summary"] = "\n".join(lines)
    return report


def _host_stage(hsamples: list[Sample], hrows: list[dict[str, Any]], host_measurements: list[str], base: Calibration,
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
        "measurements": [str(m) for m in host_measurements], "host": _host_of(hrows),
        "terms": list(HOST), "n_train": len(htrain), "n_held_out": len(hheld),
        "held_out_error_before": _errors(report["before"]),
        "held_out_error": _errors(report["after"]), "all_configs_error": _errors(hall)}}
    return fitted, report, stage


def _stage_base(who: str, hardware: str, base: Calibration | None,
                engine_version: str) -> tuple[HardwareSpec, Calibration]:
    """The hardware and the calibration a stage run alone starts from (``base``, or the one in use), or ValueError."""
    base = base or load_calibration(hardware, engine_version)
    if base.hardware != hardware:
        raise ValueError(f"{who}: base calibration {base.id!r} is for {base.hardware!r}, not {hardware!r}")
    return load_hardware(hardware), base


def run_host_calibration(hardware: str, host_measurements: list[str], *, base: Calibration | None = None,
                         engine_version: str = "0.26", out: str | None = None, seed: int = 0, max_nfev: int = 60,
                         refit_all: bool = True) -> dict[str, Any]:
    """The host stage alone: ``base`` (default: the calibration in use for the hardware) moved to a new host.

    One host's CPU sets the engine's pace wherever the GPU waits for it (small steps, many requests, the front
    end): the same H200 model ran `short_long`'s defaults at a TPOT p50 of 6.8 ms on one host and 8.2-9.4
    ms on another (both in `data/measurements/h200-vllm0.26/`). A few runs on the new host and
    a minute of fitting refit its `HOST` terms, every GPU and model term kept; no main fit (tens of minutes) is
    repeated. The calibration written keeps the base's provenance, names the base, and records the host stage
    (split, errors before and after, the host) in place of the base's.
    """
    hw, base = _stage_base("run_host_calibration", hardware, base, engine_version)
    htexts, hrows = _read_rows(host_measurements)
    hsamples = samples_from_rows(hrows, str(list(host_measurements)))
    t0 = time.perf_counter()
    fitted, host, stage = _host_stage(hsamples, hrows, host_measurements, base, hw, seed=seed, max_nfev=max_nfev,
                                      refit_all=refit_all)
    report: dict[str, Any] = {"hardware": hardware, "engine_version": base.engine_version, "seed": seed,
                              "base": base.id, "host": host, "fit_seconds": round(time.perf_counter() - t0, 1)}
    digest = hashlib.sha256((base.id + "".join(htexts)).encode()).hexdigest()[:12]
    fitted = replace(fitted, id=calibration_id(fitted, digest), provenance={
        **base.provenance, "fitted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "base": base.id,
        "host_measurements_sha256_12": digest, **stage})
    report["calibration"] = fitted.to_dict()
    if out:
        fitted.save(out)
    lines = [f"calibration {fitted.id}: {base.id} with the host stage refitted on {len(hsamples)} runs"
             f" ({host['n_train']} to fit, {host['n_held_out']} held out)"]
    lines += _host_stage_lines(host)
    lines.append(f"  {'written' if refit_all else 'fitted'} calibration on all {len(hsamples)} of the host's: "
                 f"{_mapes(host['after_all_configs'])}")
    report["summary"] = "\n".join(lines)
    return report


def blocks_error(samples: list[Sample], cal: Calibration, hw: HardwareSpec) -> dict[str, Any]:
    """``num_gpu_blocks`` MAPE and worst error of the memory plan, one figure per configuration (no simulation)."""
    errs = [_ape(_memory_plan(s, cal, hw).num_gpu_blocks, s.num_gpu_blocks) for s in _kv_points(samples)]
    return {"n_configs": len(errs), "num_gpu_blocks_mape": float(np.mean(errs)) if errs else None,
            "num_gpu_blocks_max_ape": float(np.max(errs)) if errs else None}


def staged_fit(items: list[_K], seed: int, base: Calibration, hw: HardwareSpec, refit_all: bool,
               fit_fn: Callable[[list[_K], Calibration, HardwareSpec], Calibration],
               error_fn: Callable[[list[_K], Calibration, HardwareSpec], dict[str, Any]],
               ) -> tuple[Calibration, dict[str, Any]]:
    """A stage alone, split by configuration (`split`): fitted on part, ``error_fn`` on the rest before and after,
    then (with ``refit_all``) refitted on all; and ``error_fn`` on all, before the stage and after.

    Returns the calibration and the stage's report (its base, split and errors)."""
    train, held = split(items, seed)
    fitted = fit_fn(train, base, hw)
    report: dict[str, Any] = {
        "hardware": base.hardware, "engine_version": base.engine_version, "seed": seed, "base": base.id,
        "n_train_configs": len({x.config_key for x in train}), "n_held_out_configs": len({x.config_key for x in held}),
        "held_out_configs": sorted({x.config_key for x in held}),
        "before": error_fn(held, base, hw), "after": error_fn(held, fitted, hw)}
    if refit_all:
        fitted = fit_fn(items, fitted, hw)
    report["all_configs_before"] = error_fn(items, base, hw)
    report["all_configs"] = error_fn(items, fitted, hw)
    return fitted, report


def run_memory_calibration(hardware: str, memory_measurements: list[str], *, base: Calibration | None = None,
                           engine_version: str = "0.26", out: str | None = None, seed: int = 0,
                           refit_all: bool = True) -> dict[str, Any]:
    """The memory stage alone: ``base``'s memory terms (`MEMORY`, and a MoE model's) refitted on KV-cache sizes.

    A run's ``num_gpu_blocks`` is what vLLM's memory profiling left for the KV cache; each configuration gives
    one. The timing terms are kept: where the KV cache does not bind (most runs) they do not depend on these
    terms, and a main fit (tens of minutes) is not repeated to add memory evidence, such as a KV cache measured
    at a new ``gpu_memory_utilization`` or token budget. Split by configuration as the other stages: fitted on
    part, the blocks' error on the rest before and after, then (with ``refit_all``) refitted on all. The
    calibration written keeps the base's provenance, names the base, and records the memory stage.
    """
    hw, base = _stage_base("run_memory_calibration", hardware, base, engine_version)
    texts, rows = _read_rows(memory_measurements)
    samples = [s for s in samples_from_rows(rows, str(list(memory_measurements))) if s.num_gpu_blocks]
    if not samples:
        raise ValueError(f"run_memory_calibration: no measurement in {list(memory_measurements)} reports "
                         "num_gpu_blocks")
    fitted, report = staged_fit(samples, seed, base, hw, refit_all, _fit_memory, blocks_error)
    digest = hashlib.sha256((base.id + json.dumps(hw.to_dict(), sort_keys=True) + "".join(texts)).encode()).hexdigest()[:12]
    fitted = replace(fitted, id=calibration_id(fitted, digest), provenance={
        **base.provenance, "fitted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "base": base.id,
        "memory_stage": {"measurements": [str(m) for m in memory_measurements], "sha256_12": digest,
                         "device_memory_bytes": hw.memory_bytes, "terms": [*MEMORY, "act_moe_coef"],
                         "n_train_configs": report["n_train_configs"],
                         "n_held_out_configs": report["n_held_out_configs"],
                         "held_out_error_before": report["before"], "held_out_error": report["after"],
                         "all_configs_error": report["all_configs"]}})
    report["calibration"] = fitted.to_dict()
    if out:
        fitted.save(out)
    pct = (lambda e: f"blocks MAPE {_pct(e['num_gpu_blocks_mape'])} (worst {_pct(e['num_gpu_blocks_max_ape'])})")  # noqa: E731
    report["summary"] = "\n".join([
        f"calibration {fitted.id}: {base.id} with the memory stage refitted on {report['all_configs']['n_configs']} "
        f"configurations' KV caches ({report['n_train_configs']} to fit, {report['n_held_out_configs']} held out)",
        f"  memory stage before held_out: {pct(report['before'])}",
        f"  memory stage after  held_out: {pct(report['after'])}",
        f"  {'written' if refit_all else 'fitted'} calibration on all: {pct(report['all_configs'])} "
        f"(the base: {pct(report['all_configs_before'])})"])
    return report


def _host_stage_lines(host: dict[str, Any]) -> list[str]:
    """A summary's lines for the host stage (``_host_stage``'s report): its held-out error before and after."""
    return [f"  host stage {when:6s} held_out ({host['n_held_out']} of the host's): {_mapes(host[when])}"
            for when in ("before", "after")]


def _errors(e: dict[str, Any]) -> dict[str, Any]:
    """The error figures a calibration's provenance keeps, from an `evaluate` result."""
    return {k: e[k] for k in ("out_tok_per_s_mape", "ttft_p50_mape", "tpot_p50_mape", "num_gpu_blocks_mape")}


def _mapes(e: dict[str, Any]) -> str:
    """Throughput, TTFT p50 and TPOT p50 MAPE of an `evaluate` result, as every summary line prints them."""
    return (f"throughput MAPE {_pct(e['out_tok_per_s_mape'])}  TTFT p50 MAPE {_pct(e['ttft_p50_mape'])}  "
            f"TPOT p50 MAPE {_pct(e['tpot_p50_mape'])}")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:5.1f}%"
