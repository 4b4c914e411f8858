"""The timing stage: the timing coefficients by bounded non-linear least squares on log-ratios of throughput, TTFT
p50 and TPOT p50, simulating every training sample.

The stage runs within the whole fit (`rsi_env.calibrate.full`), after the memory stage; its least squares
(`fit_terms`) also fit the host stage's terms.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from rsi_env.calibrate.samples import Sample, dense_and_moe
from rsi_env.calibrate.score import evaluate, predict
from rsi_env.calibrate.stage import Stage
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.sim.calibration import Calibration

__all__ = ["BOUNDS", "COMM", "FP8", "JIT_PAUSE_S", "MOE", "NOISY", "STAGE", "TIMING", "fit_terms", "fit_timing",
           "residuals"]

TIMING = ("mm_eff", "mm_half_tokens", "mm_half_exp", "roofline_sharpness", "bw_eff", "attn_eff", "kv_bw_eff", "step_s",
          "per_req_s", "piecewise_layer_s", "eager_layer_s", "uncaptured_layer_s", "cpu_step_s", "cpu_per_req_s",
          "cpu_per_new_req_s", "frontend_s")
# Fitted only where the measurements hold tensor-parallel runs; otherwise they would drift unconstrained.
COMM = ("comm_eff", "allreduce_s", "eager_allreduce_s")
# Fitted only where the measurements hold fp8-weight runs.
FP8 = ("quant_layer_s",)
# Fitted only where the measurements hold a MoE model.
MOE = ("moe_mm_eff", "uncaptured_moe_layer_s")
NOISY = frozenset({"many_small"})
# A MoE run whose step trace stops this long between two steps had vLLM JIT-compiling its fused-MoE kernel
# mid-workload (no step of the calibration workloads takes half as long); the MoE terms are not fitted on it.
JIT_PAUSE_S = 0.4
# Each timing term's physical bounds.
BOUNDS = {
    "mm_eff": (0.2, 1.0), "mm_half_tokens": (1.0, 2048.0), "roofline_sharpness": (1.2, 12.0), "bw_eff": (0.3, 1.0),
    "attn_eff": (0.05, 1.0), "kv_bw_eff": (0.1, 1.0), "kv_shared_read": (1e-3, 1.0),
    "step_s": (1e-5, 5e-3), "per_req_s": (1e-8, 1e-4), "piecewise_layer_s": (1e-7, 2e-3),
    "eager_layer_s": (1e-6, 5e-4), "uncaptured_layer_s": (1e-6, 2e-3), "cpu_step_s": (1e-5, 2e-2),
    "cpu_per_req_s": (1e-8, 2e-4), "frontend_s": (1e-5, 5e-2),
    "cpu_per_new_req_s": (1e-7, 5e-3), "cpu_switch_per_req_s": (1e-8, 2e-4),
    "uncaptured_per_req_s": (1e-8, 2e-4), "mm_half_exp": (0.01, 3.0),
    "comm_eff": (0.2, 1.0), "allreduce_s": (1e-7, 2e-4), "eager_allreduce_s": (1e-7, 2e-3),
    "quant_layer_s": (1e-8, 2e-4), "moe_mm_eff": (0.1, 1.0), "uncaptured_moe_layer_s": (1e-7, 2e-3),
}


def residuals(samples: list[Sample], cal: Calibration, hw: HardwareSpec) -> np.ndarray:
    """What every timing fit minimises: log-ratios of throughput, TTFT p50 and TPOT p50 of each sample, weighted."""
    out = []
    for s in samples:
        p = predict(s, cal, hw)
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


def fit_terms(samples: list[Sample], hw: HardwareSpec, cal: Calibration, names: tuple[str, ...],
              max_nfev: int, extra: Callable[[Calibration], np.ndarray] | None = None) -> Calibration:
    """Least squares of the timing coefficients ``names`` (in log space, within physical bounds), others fixed,
    on `residuals`, followed by ``extra``'s residuals where given (a target the samples' summaries do not carry,
    e.g. a first-token wait measured on an engine's own clock)."""
    from scipy.optimize import least_squares

    lo = np.log([BOUNDS[n][0] for n in names])
    hi = np.log([BOUNDS[n][1] for n in names])
    x0 = np.clip(np.log([max(getattr(cal, n), BOUNDS[n][0]) for n in names]), lo + 1e-6, hi - 1e-6)

    def resid(x: np.ndarray) -> np.ndarray:
        c = cal.with_coefficients({n: float(math.exp(v)) for n, v in zip(names, x, strict=True)})
        return residuals(samples, c, hw) if extra is None else np.concatenate([residuals(samples, c, hw), extra(c)])

    r = least_squares(resid, x0, bounds=(lo, hi), max_nfev=max_nfev, diff_step=0.05, x_scale=1.0)
    return cal.with_coefficients({n: float(math.exp(v)) for n, v in zip(names, r.x, strict=True)})


def fit_timing(samples: list[Sample], start: Calibration, hw: HardwareSpec, max_nfev: int = 60) -> Calibration:
    """The timing coefficients, in two stages where MoE models were measured.

    The terms every model shares are fitted on the dense models' measurements; the MoE terms (`MOE`) then on the
    MoE models' with the shared ones fixed. A MoE engine's runs carry pauses of their own (vLLM JIT-compiles its
    fused-MoE Triton kernel for batch shapes a short warm-up does not reach, inside the measured workloads:
    `rsi_env.real.warmup`): a joint fit would let them bend the terms the dense models share, and the MoE terms
    are fitted only on MoE runs without such a pause (`JIT_PAUSE_S`).
    """
    dense, moe_runs = dense_and_moe(samples)
    moe = [s for s in moe_runs if s.longest_gap_s < JIT_PAUSE_S]
    shared = dense or moe or samples  # a MoE-only set fits every term on its runs without a pause
    has_tp = any(int(s.flags.get("tensor_parallel_size", 1)) > 1 for s in shared)
    has_fp8 = any(s.flags.get("quantization") for s in shared)
    names = TIMING + (COMM if has_tp else ()) + (FP8 if has_fp8 else ()) + (() if dense else MOE)
    cal = fit_terms(shared, hw, start, names, max_nfev)
    if dense and moe:
        cal = fit_terms(moe, hw, cal, MOE, max_nfev)
    return cal


STAGE = Stage("timing", TIMING + COMM + FP8 + MOE, fit_timing, evaluate)
