"""The memory stage: the memory terms by least squares on the KV cache vLLM found (no simulation needed).

A run's ``num_gpu_blocks`` is what vLLM's memory profiling left for the KV cache; each configuration gives one.
Run alone (``rsi-env calibrate memory``) the timing terms are kept: where the KV cache does not bind (most runs)
they do not depend on these terms, and a main fit (tens of minutes) is not repeated to add memory evidence, such as
a KV cache measured at a new ``gpu_memory_utilization`` or token budget. The calibration written then keeps the
base's provenance, names the base, and records the memory stage.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rsi_env.calibrate.report import memory_summary
from rsi_env.calibrate.samples import Sample, dense_and_moe, samples_from_rows
from rsi_env.calibrate.score import ape
from rsi_env.calibrate.stage import Alone, Stage, StageRun, staged_fit
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import load_model
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.memory import MemoryPlan, plan_memory

__all__ = ["MEMORY", "STAGE", "blocks_error", "fit_memory", "kv_points", "memory_plan"]

# The memory terms, fitted on the KV blocks vLLM reports (act_moe_coef too where a MoE model was measured).
MEMORY = ("non_torch_bytes", "act_token_coef", "act_logit_coef")


def kv_points(samples: list[Sample]) -> list[Sample]:
    """One sample per configuration that reports its KV cache: every workload of a configuration shares one."""
    seen: dict[str, Sample] = {}
    for s in samples:
        if s.num_gpu_blocks:
            seen.setdefault(s.config_key, s)
    return list(seen.values())


def memory_plan(s: Sample, cal: Calibration, hw: HardwareSpec) -> MemoryPlan:
    """The memory plan of a sample's configuration (vLLM's profiling, as `plan_memory` models it)."""
    m = load_model(s.model)
    return plan_memory(m, hw, EngineConfig.from_dict(s.flags).resolve(m, hw, s.engine_version), cal)


def _fit_terms(pts: list[Sample], cal: Calibration, hw: HardwareSpec, names: tuple[str, ...]) -> Calibration:
    """Least squares of the memory terms ``names`` on the configurations ``pts`` (one sample each), others fixed."""
    from scipy.optimize import least_squares

    scale = {"non_torch_bytes": 1e9}

    def resid(x: np.ndarray) -> np.ndarray:
        c = cal.with_coefficients({n: float(v) * scale.get(n, 1.0) for n, v in zip(names, x, strict=True)})
        out = []
        for s in pts:
            plan = memory_plan(s, c, hw)
            out.append((plan.kv_cache_bytes - s.num_gpu_blocks * plan.block_bytes) / 1e9)
        return np.asarray(out)

    x0 = np.array([getattr(cal, n) / scale.get(n, 1.0) for n in names])
    r = least_squares(resid, x0, bounds=([0.0] * len(names), [20.0] * len(names)))
    return cal.with_coefficients({n: float(v) * scale.get(n, 1.0) for n, v in zip(names, r.x, strict=True)})


def fit_memory(samples: list[Sample], cal: Calibration, hw: HardwareSpec) -> Calibration:
    """Least squares of the memory terms on the KV bytes vLLM found (num_gpu_blocks x block bytes).

    In two stages, as the timing terms: the terms every model shares on the dense models' configurations, then
    the MoE term on the MoE models' with those fixed (a MoE-only set fits all of them on its own). One joint fit
    lets the MoE configurations, whose profile run is dominated by the fused-MoE caches, bend the shared terms.
    """
    dense, moe = dense_and_moe(kv_points(samples))
    if dense:
        cal = _fit_terms(dense, cal, hw, MEMORY)
    if moe:
        cal = _fit_terms(moe, cal, hw, ("act_moe_coef",) if dense else MEMORY + ("act_moe_coef",))
    return cal


def blocks_error(samples: list[Sample], cal: Calibration, hw: HardwareSpec) -> dict[str, Any]:
    """``num_gpu_blocks`` MAPE and worst error of the memory plan, one figure per configuration (no simulation)."""
    errs = [ape(memory_plan(s, cal, hw).num_gpu_blocks, s.num_gpu_blocks) for s in kv_points(samples)]
    return {"n_configs": len(errs), "num_gpu_blocks_mape": float(np.mean(errs)) if errs else None,
            "num_gpu_blocks_max_ape": float(np.max(errs)) if errs else None}


def _items(rows: list[dict[str, Any]], where: str) -> list[Sample]:
    """The measurements that report the KV cache vLLM found."""
    samples = [s for s in samples_from_rows(rows, where) if s.num_gpu_blocks]
    if not samples:
        raise ValueError(f"run_memory_calibration: no measurement in {where} reports num_gpu_blocks")
    return samples


def _run(r: StageRun) -> tuple[Calibration, dict[str, Any], dict[str, Any]]:
    """Split by configuration (`staged_fit`); the provenance records the device's memory the terms were fitted at."""
    fitted, report = staged_fit(r)
    return fitted, report, {
        "memory_stage": {"measurements": [str(m) for m in r.measurements], "sha256_12": r.digest,
                         "device_memory_bytes": r.hw.memory_bytes, "terms": list(r.stage.terms),
                         "n_train_configs": report["n_train_configs"],
                         "n_held_out_configs": report["n_held_out_configs"],
                         "held_out_error_before": report["before"], "held_out_error": report["after"],
                         "all_configs_error": report["all_configs"]}}


STAGE = Stage("memory", (*MEMORY, "act_moe_coef"), lambda pts, start, hw, _max_nfev: fit_memory(pts, start, hw),
              blocks_error, Alone(_items, _run, memory_summary, digest_hardware=True))
