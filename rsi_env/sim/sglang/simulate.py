"""`simulate_sglang`: a workload on simulated SGLang 0.5.17, returned as the same `Telemetry` as the vLLM sim's.

``(SglangConfig, ModelSpec, HardwareSpec, Workload) -> Telemetry`` with ``tier="sim"``: the flags resolved and the KV
pool sized as SGLang does at start (`plan_sglang`), the scheduler loop run (`SglangEngineSim`), each forward pass
priced by the sim's cost model. The coefficients are SGLang's own calibration of the chip
(``<hardware>-sglang-0.5.yaml``, fitted on real SGLang rows) where one exists, else the chip's vLLM calibration
(``Telemetry.calibration`` names which). A configuration SGLang refuses, or one that cannot serve the
workload, comes back as ``Telemetry.error``; nothing raises for it.

SGLang's counters map onto the telemetry as the real tier's driver reads them: ``num_preemptions`` is retractions,
``prefix_cache_hit_rate`` cached over prompt tokens (at each request's first admission), ``kv_cache_usage_peak`` the
peak of SGLang's token usage (slots neither free nor evictable), ``num_gpu_blocks`` ``max_total_num_tokens``,
``mean_batch_size`` the running batch's size averaged over busy time. ``dp_size > 1`` is not modelled yet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rsi_env.engine.engines import SGLANG_RELEASE
from rsi_env.engine.hardware import HardwareSpec, load_hardware
from rsi_env.engine.model import ModelSpec, load_model
from rsi_env.engine.sglang_config import SglangConfig
from rsi_env.engine.telemetry import RequestTimings, Telemetry, summarize
from rsi_env.engine.workload import SLO, Workload, load_workload
from rsi_env.errors import InvalidConfigError
from rsi_env.sim.calibration import Calibration, load_calibration
from rsi_env.sim.cost import StepCost
from rsi_env.sim.sglang.engine import SglangEngineSim, SglangResult, make_requests
from rsi_env.sim.sglang.scheduler import SglangScheduler
from rsi_env.sim.sglang.sizing import SglangPlan, plan_sglang

__all__ = ["simulate_sglang", "simulate_sglang_detailed"]

# The vLLM release whose calibration of a chip prices SGLang's passes where SGLang's own (``<hardware>-sglang-0.5.yaml``,
# of SGLANG_RELEASE) is not fitted for that chip.
COST_RELEASE = "0.26"


def sglang_calibration(hardware: str, path: str | Path | None = None) -> Calibration:
    """The calibration file at ``path``, else SGLang's fitted calibration of the chip, else its vLLM one."""
    cal = load_calibration(hardware, SGLANG_RELEASE, path)
    return cal if path is not None or cal.id != "default" else load_calibration(hardware, COST_RELEASE)


def simulate_sglang_detailed(
    config: SglangConfig | dict[str, Any] | None,
    model: ModelSpec | str | Path,
    hardware: HardwareSpec | str,
    workload: Workload | str | Path,
    *,
    calibration: Calibration | str | Path | None = None,
    slo: SLO | None = None,
    seed: int = 0,
    check_invariants: bool = False,
) -> tuple[Telemetry, SglangPlan | None, SglangResult | None]:
    """Like :func:`simulate_sglang`, also returning the resolved plan and the raw result.

    ``seed`` drives the ``random`` policy only; ``check_invariants`` checks slot conservation after every pass.
    """
    spec = load_model(model)
    hw = load_hardware(hardware)
    wl = load_workload(workload)
    cal = calibration if isinstance(calibration, Calibration) else sglang_calibration(hw.name, calibration)
    try:
        cfg = config if isinstance(config, SglangConfig) else SglangConfig.from_dict(config)
    except InvalidConfigError as exc:
        return Telemetry.failed(f"invalid_config: {exc}", calibration=cal.id), None, None
    if cfg.dp_size > 1:
        return Telemetry.failed("invalid_config: the SGLang sim models one engine (dp_size=1); dp_size > 1 is not "
                                "modelled yet", calibration=cal.id), None, None
    plan = plan_sglang(cfg, spec, hw, cal)
    if plan.error:
        return Telemetry.failed(plan.error, calibration=cal.id, num_gpu_blocks=plan.max_total_num_tokens), plan, None
    trace = wl.trace()
    longest = int(trace.prompt_len.max())
    if longest >= plan.context_len:
        return Telemetry.failed(
            f"invalid_config: The input ({longest} tokens) is longer than the model's context length "
            f"({plan.context_len} tokens).", calibration=cal.id, num_gpu_blocks=plan.max_total_num_tokens), plan, None
    need = int((trace.prompt_len + trace.output_len).max()) + plan.page_size
    if need > plan.max_total_num_tokens:
        return Telemetry.failed(
            f"invalid_config: a request of {need} tokens does not fit the KV pool of {plan.max_total_num_tokens} "
            "tokens; raise mem_fraction_static or shorten the workload", calibration=cal.id,
            num_gpu_blocks=plan.max_total_num_tokens), plan, None
    cost = StepCost(spec, hw, plan.resolved, cal, plan.prefill_graphs)
    sched = SglangScheduler(cfg, plan, seed)
    engine = SglangEngineSim(sched, cost, make_requests(trace, spec.vocab_size), trace.closed_concurrency,
                             check_invariants)
    try:
        res = engine.run()
    except RuntimeError as exc:
        return Telemetry.failed(f"invalid_config: {exc}", calibration=cal.id,
                                num_gpu_blocks=plan.max_total_num_tokens), plan, None
    col = (lambda f: np.asarray([getattr(r, f) for r in res.reqs], np.float64))  # noqa: E731
    front = cal.frontend_s  # the client sees each token a front-end hop after the engine produced it
    timings = RequestTimings(col("arrival"), col("first_token") + front, col("finish") + front,
                             trace.prompt_len, trace.output_len)
    tel = summarize(
        timings, slo=slo if slo is not None else wl.slo, price_per_hour=hw.price_per_hour, num_gpus=cfg.num_gpus,
        num_preemptions=res.num_retractions,
        prefix_cache_hit_rate=res.cached_tokens / res.prompt_tokens if res.prompt_tokens else 0.0,
        kv_cache_usage_peak=res.usage_peak, num_gpu_blocks=plan.max_total_num_tokens,
        mean_batch_size=res.running_time_integral / res.busy_time if res.busy_time else 0.0,
        tier="sim", calibration=cal.id, profile=res.profile)
    return tel, plan, res


def simulate_sglang(
    config: SglangConfig | dict[str, Any] | None,
    model: ModelSpec | str | Path,
    hardware: HardwareSpec | str,
    workload: Workload | str | Path,
    *,
    calibration: Calibration | str | Path | None = None,
    slo: SLO | None = None,
    seed: int = 0,
) -> Telemetry:
    """Simulate ``workload`` on SGLang with ``config``; errors come back in ``Telemetry.error``."""
    return simulate_sglang_detailed(config, model, hardware, workload, calibration=calibration, slo=slo,
                                    seed=seed)[0]
