"""The sim tier: a fast, calibrated simulator of the vLLM V1 engine.

:func:`simulate` has the `Tier` signature of DESIGN.md — ``measure(engine_config, model, hardware,
workload) -> Telemetry`` — and never raises for a configuration vLLM would refuse or that does not
fit in memory: that comes back as ``Telemetry.error``, as it would from the real engine. Its
``Telemetry.profile`` is the engine replicas' time by part, priced by the cost model's own terms.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rsi_env.engine.config import EngineConfig, ResolvedConfig
from rsi_env.engine.engines import engine_of
from rsi_env.engine.hardware import HardwareSpec, load_hardware
from rsi_env.engine.model import ModelSpec, load_model
from rsi_env.engine.profile import Profile
from rsi_env.engine.telemetry import RequestTimings, Telemetry, summarize
from rsi_env.engine.workload import SLO, Trace, Workload, load_workload
from rsi_env.errors import InvalidConfigError
from rsi_env.sim.calibration import Calibration, load_calibration
from rsi_env.sim.cost import StepCost
from rsi_env.sim.engine import EngineSim, SimResult
from rsi_env.sim.memory import MemoryPlan, plan_memory

__all__ = ["SimTier", "sim_calibration", "simulate", "simulate_detailed", "store_sim_key"]


def sim_calibration(hardware: str, engine_version: str) -> Calibration:
    """The calibration the sim tier of ``engine_version`` prices ``hardware`` with: vLLM's fit of the chip, or for
    an SGLang release (``sglang-0.5.17``) SGLang's own (`rsi_env.sim.sglang.simulate.sglang_calibration`)."""
    if engine_of(engine_version).name == "sglang":  # SGLang's simulator loads only where it is asked for
        from rsi_env.sim.sglang.simulate import sglang_calibration

        return sglang_calibration(hardware)
    return load_calibration(hardware, engine_version)


def _split_dp(trace: Trace, dp: int, k: int) -> Trace:
    """Requests ``k, k+dp, …``: a round-robin load balancer in front of ``dp`` engine replicas."""
    sel = np.arange(k, len(trace), dp)
    return Trace(trace.arrival_s[sel], trace.prompt_len[sel], trace.output_len[sel], trace.prefix_group[sel],
                 trace.prefix_len[sel], -(-trace.closed_concurrency // dp) if trace.closed_concurrency else 0,
                 trace.seed)


class _FrozenTrace(NamedTuple):
    """A workload's trace with read-only arrays, and the longest prompt and prompt + output in it."""

    trace: Trace
    max_prompt: int
    max_total: int


def _drawn(wl: Workload, writeable: bool) -> _FrozenTrace:
    """``wl.trace()`` with its longest prompt and prompt + output; not ``writeable``: its arrays read-only views of
    read-only copies (a view of a read-only array can never be made writeable again)."""
    t = wl.trace()
    if not writeable:
        def frozen(a: np.ndarray) -> np.ndarray:
            base = np.array(a)
            base.setflags(write=False)
            return base[:]

        t = Trace(frozen(t.arrival_s), frozen(t.prompt_len), frozen(t.output_len), frozen(t.prefix_group),
                  frozen(t.prefix_len), t.closed_concurrency, t.seed)
    if not len(t):
        return _FrozenTrace(t, -1, -1)
    return _FrozenTrace(t, int(t.prompt_len.max()), int((t.prompt_len + t.output_len).max()))


@lru_cache(maxsize=32)
def _frozen_trace(wl: Workload) -> _FrozenTrace:
    """``wl.trace()``, generated once per workload (its seed included: a `Workload` is frozen, and equal workloads
    draw equal traces), read-only, so that no simulation or caller can change what the next one reads. At most 32
    are kept (a 10,000-request trace holds ~400 kB)."""
    return _drawn(wl, writeable=False)


def _resolve_or_refuse(cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, engine_version: str,
                       usage_context: str) -> ResolvedConfig | str:
    """vLLM's resolution of ``cfg`` (a frozen `ResolvedConfig`), or its refusal's text."""
    try:
        return cfg.resolve(model, hw, engine_version, usage_context)
    except InvalidConfigError as exc:
        return str(exc)


# A pure function of frozen inputs, each of them part of the key (equal configurations hold equal, normalised flag
# values; only the package's own `EngineConfig` comes here, never a subclass with a resolution of its own).
_resolved = lru_cache(maxsize=1024)(_resolve_or_refuse)


def simulate_detailed(
    engine_config: EngineConfig | dict[str, Any] | None,
    model: ModelSpec | str | Path,
    hardware: HardwareSpec | str,
    workload: Workload | str | Path,
    *,
    engine_version: str = "0.26",
    usage_context: str = "server",
    calibration: Calibration | str | Path | None = None,
    slo: SLO | None = None,
    check_invariants: bool = False,
    engine_cls: Callable[..., EngineSim] = EngineSim,
    record_steps: bool = True,
) -> tuple[Telemetry, ResolvedConfig | None, MemoryPlan | None, list[SimResult]]:
    """Like :func:`simulate`, also returning the resolved config, the memory plan and raw results.

    ``engine_cls`` builds the engine (an `EngineSim` subclass, e.g. one whose priority keys come from a
    scheduling policy); ``record_steps``: keep each result's step trace (`SimResult.steps`; False: None).
    """
    spec = load_model(model)
    hw = load_hardware(hardware)
    wl = load_workload(workload)
    cal = calibration if isinstance(calibration, Calibration) else load_calibration(hw.name, engine_version, calibration)
    cfg_in = engine_config if isinstance(engine_config, EngineConfig) else EngineConfig.from_dict(engine_config)
    # Remembered for the package's own types and engine; a caller's own (a subclass, another engine) as before.
    ours = type(cfg_in) is EngineConfig and type(wl) is Workload and engine_cls is EngineSim
    cfg_or_error = (_resolved if ours else _resolve_or_refuse)(cfg_in, spec, hw, engine_version, usage_context)
    if isinstance(cfg_or_error, str):
        return Telemetry.failed(f"invalid_config: {cfg_or_error}", calibration=cal.id), None, None, []
    cfg = cfg_or_error
    plan = plan_memory(spec, hw, cfg, cal)
    if plan.error:
        return Telemetry.failed(plan.error, calibration=cal.id, num_gpu_blocks=plan.num_gpu_blocks), cfg, plan, []
    frozen = _frozen_trace(wl) if ours else _drawn(wl, writeable=True)
    trace = frozen.trace
    if frozen.max_prompt >= cfg.max_model_len:  # some prompt_len >= max_model_len
        return Telemetry.failed(
            f"invalid_config: a prompt of {frozen.max_prompt} tokens does not fit max_model_len={cfg.max_model_len} "
            "(vLLM rejects such requests); raise max_model_len or shorten the workload's prompts",
            calibration=cal.id, num_gpu_blocks=plan.num_gpu_blocks), cfg, plan, []
    if frozen.max_total > cfg.max_model_len:  # some output is capped; else the cap leaves every length as it is
        capped = np.minimum(trace.output_len, cfg.max_model_len - trace.prompt_len)
        trace = Trace(trace.arrival_s, trace.prompt_len, capped, trace.prefix_group, trace.prefix_len,
                      trace.closed_concurrency, trace.seed)
    cost = StepCost(spec, hw, cfg, cal)
    dp = cfg.data_parallel_size
    results = []
    for k in range(dp):
        part = _split_dp(trace, dp, k) if dp > 1 else trace
        try:
            engine = (engine_cls(cfg, cost, part, plan.num_gpu_blocks, check_invariants) if record_steps else
                      engine_cls(cfg, cost, part, plan.num_gpu_blocks, check_invariants, record_steps=False))
            results.append(engine.run())
        except RuntimeError as exc:
            return Telemetry.failed(f"invalid_config: {exc}", calibration=cal.id,
                                    num_gpu_blocks=plan.num_gpu_blocks), cfg, plan, results
    cat = ((lambda f: getattr(results[0], f)) if len(results) == 1 else  # noqa: E731  (read, never written)
           (lambda f: np.concatenate([getattr(r, f) for r in results])))
    # The client sees each token a front-end hop after the engine produced it (TPOT is unaffected).
    timings = RequestTimings(cat("arrival"), cat("first_token") + cal.frontend_s, cat("finish") + cal.frontend_s,
                             cat("prompt_len"), cat("output_len"))
    queries = sum(r.prefix_queries for r in results)
    busy = sum(r.busy_time for r in results)
    tel = summarize(
        timings, slo=slo if slo is not None else wl.slo, price_per_hour=hw.price_per_hour, num_gpus=cfg.num_gpus,
        num_preemptions=sum(r.num_preemptions for r in results),
        prefix_cache_hit_rate=sum(r.prefix_hits for r in results) / queries if queries else 0.0,
        kv_cache_usage_peak=max(r.kv_usage_peak for r in results),
        num_gpu_blocks=plan.num_gpu_blocks,
        mean_batch_size=sum(r.running_time_integral for r in results) / busy if busy else 0.0,
        tier="sim", calibration=cal.id, profile=Profile.total_of(r.profile for r in results),
    )
    return tel, cfg, plan, results


def simulate(
    engine_config: EngineConfig | dict[str, Any] | None,
    model: ModelSpec | str | Path,
    hardware: HardwareSpec | str,
    workload: Workload | str | Path,
    *,
    engine_version: str = "0.26",
    usage_context: str = "server",
    calibration: Calibration | str | Path | None = None,
    slo: SLO | None = None,
) -> Telemetry:
    """Simulate ``workload`` on vLLM with ``engine_config``; errors come back in ``Telemetry.error``."""
    return simulate_detailed(engine_config, model, hardware, workload, engine_version=engine_version,
                             usage_context=usage_context, calibration=calibration, slo=slo, record_steps=False)[0]


def store_sim_key(key: str) -> str:
    """The experience store's ``sim_key`` of a simulator tier's measurement key (every engine's simulator)."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


@lru_cache(maxsize=1024)
def _resolved_flags(cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, engine_version: str,
                    usage_context: str) -> dict[str, Any]:
    """The configuration a measurement key names: vLLM's resolution of ``cfg``, or ``cfg`` itself where vLLM refuses
    it. A pure function of frozen inputs, asked for several times a step (each workload's key, the store's rows):
    remembered. Never mutated by its callers."""
    resolved = _resolved(cfg, model, hw, engine_version, usage_context)
    return cfg.to_dict() if isinstance(resolved, str) else resolved.to_dict()


@lru_cache(maxsize=4096)
def _measurement_key(engine_version: str, usage_context: str, calibration_id: str, cfg: EngineConfig,
                     model: ModelSpec, hw: HardwareSpec, w: Workload) -> str:
    """`SimTier.key`: a pure function of its frozen arguments (the calibration by its id, looked up on every call),
    asked for each workload twice a step (the cache's key, the store's row): remembered."""
    resolved = _resolved_flags(cfg, model, hw, engine_version, usage_context)
    return json.dumps([engine_version, calibration_id, model.name, model.total_params, hw.name, resolved,
                       w.content_hash], sort_keys=True, default=str)


class SimTier:
    """The simulator behind the `Tier` seam: deterministic, so a measurement is a pure function of its `key`.

    ``calibration`` (None: the calibration in use for each chip and release) fixes the simulator's
    coefficients; the key holds the calibration's id, so a measurement under another one is never mistaken
    for this one's.
    """

    name = "sim"

    def __init__(self, engine_version: str = "0.26", usage_context: str = "server",
                 calibration: Calibration | str | Path | None = None) -> None:
        self.engine_version = engine_version
        self.usage_context = usage_context
        self._calibration = calibration

    def calibration(self, hw: HardwareSpec) -> Calibration:
        """The calibration this tier simulates ``hw`` with."""
        c = self._calibration
        return c if isinstance(c, Calibration) else load_calibration(hw.name, self.engine_version, c)

    def measure(self, engine_config: EngineConfig | dict[str, Any] | None, model: ModelSpec | str | Path,
                hardware: HardwareSpec | str, workload: Workload | str | Path) -> Telemetry:
        return simulate(engine_config, model, hardware, workload, engine_version=self.engine_version,
                        usage_context=self.usage_context, calibration=self._calibration)

    def measure_all(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]:
        cal = self.calibration(hw)
        return [simulate(cfg, model, hw, w, engine_version=self.engine_version, usage_context=self.usage_context,
                         calibration=cal) for w in workloads]

    def key(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, w: Workload) -> str:
        """What the measurement depends on: release, calibration, model, chip, resolved config, workload content."""
        return _measurement_key(self.engine_version, self.usage_context, self.calibration(hw).id, cfg, model, hw, w)

    def record_fields(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, workloads: Sequence[Workload],
                      tels: Sequence[Telemetry]) -> dict[str, Any]:
        """Each row's ``sim_key``: the store keeps a deterministic measurement once."""
        return {"sim_keys": [store_sim_key(self.key(cfg, model, hw, w)) for w in workloads]}
