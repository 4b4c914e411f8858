"""The sim's profile: its parts cover the engine's whole time, come from the cost model's own terms, and say what
dominates where the cost model says it does (hypothesis over workloads, models and configurations)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsi_env.engine import PARTS, EngineConfig, Profile, Workload, load_hardware, load_model
from rsi_env.sim import simulate, simulate_detailed
from rsi_env.sim.calibration import load_calibration
from rsi_env.sim.cost import StepCost
from rsi_env.sim.engine import EngineSim, SimResult
from rsi_env.sim.memory import plan_memory

HW = load_hardware("h200")
CAL = load_calibration("h200", "0.26")
# Dense, dense with a sliding window, MoE, small.
MODELS = {m: load_model(m) for m in ("llama-3.1-8b", "mistral-7b", "qwen3-30b-a3b", "llama-3.2-1b")}
IDLE = PARTS.index("idle")


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    arrival = draw(st.sampled_from([
        {"process": "burst"},
        {"process": "poisson", "rate": draw(st.floats(0.5, 400))},
        {"process": "gamma", "rate": draw(st.floats(0.5, 200)), "cv": draw(st.floats(0.5, 4))},
        {"process": "closed", "concurrency": draw(st.integers(1, 64))},
    ]))
    raw = {
        "name": "prop", "seed": draw(st.integers(0, 10_000)), "requests": draw(st.integers(1, 80)),
        "prompt_tokens": {"dist": "uniform", "min": 1, "max": draw(st.integers(1, 3000))},
        "output_tokens": {"dist": "uniform", "min": 1, "max": draw(st.integers(1, 300))},
        "arrival": arrival,
    }
    if draw(st.booleans()):
        raw["shared_prefix"] = {"groups": draw(st.integers(1, 4)), "tokens": draw(st.integers(1, 1200))}
    return Workload.from_dict(raw)


configs = st.fixed_dictionaries({
    "max_num_seqs": st.sampled_from([1, 8, 64, 256, 1024]),
    "max_num_batched_tokens": st.sampled_from([512, 2048, 8192]),
    "enable_prefix_caching": st.booleans(),
    "enable_chunked_prefill": st.booleans(),
    "scheduling_policy": st.sampled_from(["fcfs", "priority"]),
    "enforce_eager": st.booleans(),
    "async_scheduling": st.booleans(),
    "tensor_parallel_size": st.sampled_from([1, 1, 2]),
    "max_model_len": st.just(4096),
    "gpu_memory_utilization": st.sampled_from([0.2, 0.9]),
})


def run(model: str, flags: dict, w: Workload) -> tuple[StepCost, SimResult] | None:
    spec = MODELS[model]
    try:
        cfg = EngineConfig.from_dict(flags).resolve(spec, HW)
    except ValueError:
        return None
    plan = plan_memory(spec, HW, cfg, CAL)
    if plan.error:
        return None
    cost = StepCost(spec, HW, cfg, CAL)
    return cost, EngineSim(cfg, cost, w.trace(), plan.num_gpu_blocks).run()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=workloads(), flags=configs, model=st.sampled_from(sorted(MODELS)))
def test_the_parts_sum_to_the_engine_s_time_busy_and_idle(w: Workload, flags: dict, model: str) -> None:
    out = run(model, flags, w)
    if out is None:
        return
    cost, r = out
    p = r.profile.seconds()
    assert all(math.isfinite(x) and x >= 0.0 for x in p)
    # The engine's time, from the first arrival to the last output, is every part's, with nothing left over.
    span = float(np.max(r.finish) - np.min(r.arrival))
    assert math.isclose(r.profile.total_s, span, rel_tol=1e-9, abs_tol=1e-12)
    # The busy parts are the steps' priced time; the rest is waiting for arrivals.
    assert math.isclose(r.profile.busy_s, r.busy_time, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(r.profile.idle, span - r.busy_time, rel_tol=1e-9, abs_tol=1e-9)
    if w.arrival.process == "burst":
        assert r.profile.idle == 0.0  # every request is there from the start
    # Every step pays its fixed launch cost; every prompt token's attention is computed once at least.
    assert r.profile.launch >= r.num_steps * CAL.step_s * (1 - 1e-9)
    assert r.profile.attention > 0.0 and r.profile.weights > 0.0
    assert (r.profile.comm > 0.0) == (cost.cfg.tensor_parallel_size > 1)


@st.composite
def spans(draw: st.DrawFn) -> tuple[str, dict, int, float, int]:
    model = draw(st.sampled_from(sorted(MODELS)))
    flags = {"enforce_eager": draw(st.booleans()), "async_scheduling": draw(st.booleans()),
             "tensor_parallel_size": draw(st.sampled_from([1, 2])), "max_num_seqs": 1024}
    batch = draw(st.sampled_from([1, 7, 64, 300, 700, 1000]))  # some past the largest CUDA graph
    ctx0 = float(draw(st.integers(batch, batch * 6000)))
    return model, flags, batch, ctx0, draw(st.integers(1, 60))


@settings(max_examples=150, deadline=None)
@given(spans())
def test_a_decode_span_prices_the_parts_its_steps_would(case: tuple[str, dict, int, float, int]) -> None:
    """The fast path (`StepCost.add_span_parts`) and the step-by-step path (`StepCost.step_time`) agree part by part."""
    model, flags, batch, ctx0, k = case
    spec = MODELS[model]
    cfg = EngineConfig.from_dict(flags).resolve(spec, HW)
    cost = StepCost(spec, HW, cfg, CAL)
    times, terms = cost.decode_span(batch, batch, ctx0, k + 5)
    fast = [0.0] * len(PARTS)
    cost.add_span_parts(fast, terms, k)
    cost.engine_cpu_rest(fast, float(times[:k].sum()))
    slow = [0.0] * len(PARTS)
    walls = []
    for j in range(k):
        ctx = ctx0 + batch * j
        if cost.has_window:
            ctx = min(ctx, batch * float(spec.sliding_window))
        walls.append(cost.step_time(batch, batch, batch, ctx, 0.0, 0.0, True, 0, slow))
    cost.engine_cpu_rest(slow, sum(walls))
    assert np.allclose(walls, times[:k], rtol=1e-12)
    by_part = dict(zip(PARTS, zip(fast, slow, strict=True), strict=True))
    assert np.allclose(fast, slow, rtol=1e-9, atol=1e-12 * sum(walls)), by_part
    assert math.isclose(sum(fast), sum(walls), rel_tol=1e-9)


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("tp", [1, 2])
def test_a_step_s_parts_are_its_cost_terms(async_scheduling: bool, tp: int) -> None:
    """One step priced by hand from the cost model's pieces: device terms, the launch wait, the engine-CPU wait."""
    spec = MODELS["llama-3.1-8b"]
    cfg = EngineConfig.from_dict({"async_scheduling": async_scheduling, "tensor_parallel_size": tp}).resolve(spec, HW)
    cost = StepCost(spec, HW, cfg, CAL)
    ntok, nreq, nrun, dctx, pairs, pctx = 3000, 40, 60, 50_000.0, cost.chunk_pairs(2000, 0.0), 0.0
    assert cost.graph_mode(ntok, False) == 0  # no CUDA graph fits: launched piece by piece
    parts = [0.0] * len(PARTS)
    wall = cost.step_time(ntok, nreq, nrun, dctx, pairs, pctx, False, 2, parts)
    cost.engine_cpu_rest(parts, wall)
    got = dict(zip(PARTS, parts, strict=True))
    kernels = cost.kernels(ntok, nreq, dctx, pairs, pctx)
    overhead, dispatch = cost.overhead(ntok, nreq, False), cost.dispatch(ntok, False)
    assert got["attention"] == pytest.approx(pairs * cost._attn_flops_per_pair / cost._attn_rate)
    assert got["kv_read"] == pytest.approx(dctx * cost._kv_bytes_per_token / cost._kv_rate)
    assert got["comm"] == pytest.approx(cost._comm(cost.padded(ntok))) and (got["comm"] > 0) == (tp > 1)
    device = kernels + overhead
    one_async = async_scheduling and tp == 1
    gap = max(dispatch - (device if one_async else kernels), 0.0)
    # Past the largest CUDA graph: the step's fixed cost, and with two GPUs the all-reduces launched from Python.
    eager_allreduce = 2.0 * CAL.eager_allreduce_s * spec.num_layers if tp > 1 else 0.0
    assert got["launch"] == pytest.approx(CAL.step_s + eager_allreduce + gap)
    assert got["engine_cpu"] == pytest.approx(wall - device - gap, abs=1e-12)
    assert sum(parts) == pytest.approx(wall) and got["idle"] == 0.0


def test_replicas_add_their_profiles():
    tel, _, _, results = simulate_detailed({"data_parallel_size": 2}, "llama-3.2-1b", "h200", "short_long")
    assert len(results) == 2 and tel.profile == Profile.total_of(r.profile for r in results)
    spans_ = [float(np.max(r.finish) - np.min(r.arrival)) for r in results]
    assert tel.profile.total_s == pytest.approx(sum(spans_))


def _fr(flags: dict, model: str, w: Workload | str) -> dict[str, float]:
    tel = simulate(flags, model, "h200", w)
    assert tel.ok, tel.error
    return tel.profile.fractions()


def test_what_dominates_moves_where_the_cost_model_says():
    small_batch = Workload.from_dict({"name": "one_user", "seed": 1, "requests": 8, "prompt_tokens": 64,
                                      "output_tokens": 256, "arrival": {"process": "closed", "concurrency": 1}})
    eager = _fr({"enforce_eager": True}, "llama-3.2-1b", small_batch)
    graphs = _fr({}, "llama-3.2-1b", small_batch)
    assert eager["launch"] > 0.5 and eager["launch"] > 2 * graphs["launch"]  # eager kernels launched from Python
    assert simulate({"enforce_eager": True}, "llama-3.2-1b", "h200", small_batch).profile.summary().startswith(
        "launch-bound: ")
    assert _fr({"tensor_parallel_size": 2}, "llama-3.1-8b", "rag_chat")["comm"] > 0.05
    assert _fr({}, "llama-3.1-8b", "long_context")["attention"] > 5 * _fr({}, "llama-3.1-8b", "short_long")["attention"]
    sparse = Workload.from_dict({"name": "sparse", "seed": 2, "requests": 20, "prompt_tokens": 128,
                                 "output_tokens": 32, "arrival": {"process": "poisson", "rate": 0.5}})
    tel = simulate({}, "llama-3.1-8b", "h200", sparse)
    assert tel.profile.fractions()["idle"] > 0.9
    assert tel.profile.summary().startswith("idle: ")
