"""The simulator reacts to each flag the way vLLM does, and refuses what vLLM refuses."""

from __future__ import annotations

import pytest

from rsi_env.engine import Workload, load_workload
from rsi_env.sim import SimTier, simulate, simulate_detailed

BURST = Workload.from_dict({"name": "burst", "seed": 7, "requests": 256, "prompt_tokens": 128,
                            "output_tokens": 512, "arrival": {"process": "burst"}})


def sim(flags: dict, model: str = "llama-3.1-8b", hw: str = "h200", w: Workload | str = BURST):
    return simulate(flags, model, hw, w)


def test_default_burst_is_in_the_measured_range():
    # shared/GPU.md: real vLLM 0.26, H200, Llama-3.1-8B, this burst: ~18,400 output tok/s, TPOT p50 ~12.7 ms.
    t = sim({})
    assert t.ok and 14_000 < t.out_tok_per_s < 23_000
    assert 0.009 < t.tpot_p50 < 0.017


def test_batching_flags_move_throughput_in_the_right_direction():
    base = sim({}).out_tok_per_s
    assert sim({"max_num_seqs": 16}).out_tok_per_s < 0.5 * base  # a small batch starves the GPU
    assert sim({"enforce_eager": True}).tpot_p50 > 1.3 * sim({}).tpot_p50  # real: 19.4 vs 12.5 ms (1.54x)
    assert sim({"max_num_batched_tokens": 512}).ttft_p99 > sim({}).ttft_p99  # prefill spread over more steps


def test_prefix_caching_pays_on_shared_prefixes():
    on = sim({}, w="shared_prefix_chat")
    off = sim({"enable_prefix_caching": False}, w="shared_prefix_chat")
    assert on.prefix_cache_hit_rate > 0.8 and off.prefix_cache_hit_rate == 0.0
    assert on.ttft_p50 < off.ttft_p50


def test_little_kv_memory_preempts_and_fp8_kv_doubles_the_blocks():
    small = sim({"gpu_memory_utilization": 0.2, "max_model_len": 8192})
    assert small.ok and small.num_preemptions > 0 and small.kv_cache_usage_peak > 0.95
    fp8 = sim({"gpu_memory_utilization": 0.2, "max_model_len": 8192, "kv_cache_dtype": "fp8"})
    assert fp8.num_gpu_blocks == pytest.approx(2 * small.num_gpu_blocks, rel=0.01)
    assert fp8.num_preemptions < small.num_preemptions


def test_bigger_budgets_take_memory_from_the_kv_cache():
    a = simulate_detailed({"max_num_batched_tokens": 2048}, "llama-3.1-8b", "h200", BURST)[2]
    b = simulate_detailed({"max_num_batched_tokens": 32768}, "llama-3.1-8b", "h200", BURST)[2]
    assert a is not None and b is not None and b.num_gpu_blocks < a.num_gpu_blocks


def test_parallelism_fp8_moe_and_data_parallel():
    assert not sim({}, model="llama-3.1-70b").ok  # 141 GB of weights do not fit one H200
    tp2 = sim({"tensor_parallel_size": 2}, model="llama-3.1-70b")
    tp4 = sim({"tensor_parallel_size": 4}, model="llama-3.1-70b")
    assert tp2.ok and tp4.ok and tp4.out_tok_per_s > tp2.out_tok_per_s
    assert tp4.cost_per_mtok_usd > 0
    pp2 = sim({"pipeline_parallel_size": 2}, model="llama-3.1-70b")
    assert pp2.ok
    fp8 = sim({"quantization": "fp8"})
    assert fp8.ok and fp8.tpot_p50 < sim({}).tpot_p50
    assert sim({}, model="qwen3-30b-a3b").ok
    dp2 = sim({"data_parallel_size": 2})
    assert dp2.out_tok_per_s > sim({}).out_tok_per_s


def test_every_catalog_combination_returns_telemetry_or_a_reason():
    from rsi_env.engine import list_hardware, list_models, list_workloads

    for m in list_models():
        for h in list_hardware():
            t = simulate({}, m, h, load_workload(list_workloads()[0]))
            assert t.ok or t.error.startswith(("oom", "invalid_config")), (m, h, t.error)


@pytest.mark.parametrize("flags, reason", [
    ({"tensor_parallel_size": 3}, "invalid_config: tensor_parallel_size=3"),
    ({"gpu_memory_utilization": 0.12}, "invalid_config: "),
    ({"max_model_len": 100}, "invalid_config: a prompt of"),
    ({"max_num_partial_prefills": 4}, "Concurrent Partial Prefill"),
])
def test_refused_configs_come_back_as_errors_not_exceptions(flags, reason):
    t = sim(flags, w="short_long")
    assert not t.ok and reason in t.error
    assert t.out_tok_per_s == 0 and t.goodput_req_per_s == 0  # a failure never looks like a fast success


def test_kv_too_small_for_max_model_len_uses_vllms_message():
    t = sim({"gpu_memory_utilization": 0.2})
    assert "To serve at least one request with the model's max seq len (131072)" in t.error
    assert "estimated maximum model length is" in t.error


def test_sim_tier_seam():
    tier = SimTier()
    t = tier.measure({"max_num_seqs": 128}, "llama-3.2-1b", "l4", "many_small")
    assert t.ok and t.tier == "sim" and t.calibration is not None


def test_fp8_weights_pay_for_quantizing_activations_every_step():
    """vLLM's online fp8 quantizes the activations before each linear layer: a fixed cost per layer and step that
    bf16 weights do not pay, fitted from the fp8-weight measurements (small decode batches show it most)."""
    from rsi_env.engine import EngineConfig, load_hardware, load_model
    from rsi_env.sim.calibration import load_calibration
    from rsi_env.sim.cost import StepCost

    m, hw, cal = load_model("llama-3.1-8b"), load_hardware("h200"), load_calibration("h200", "0.26")
    assert cal.quant_layer_s > 0

    def decode_step(flags: dict, c) -> float:
        cost = StepCost(m, hw, EngineConfig(**flags).resolve(m, hw, "0.26"), c)
        return cost.step_time(8, 8, 8, 8 * 1000.0, 0.0, 0.0, True)

    free = cal.with_coefficients({"quant_layer_s": 0.0})
    fp8 = {"quantization": "fp8"}
    assert decode_step(fp8, cal) - decode_step(fp8, free) == pytest.approx(cal.quant_layer_s * m.num_layers, rel=1e-6)
    assert decode_step({}, cal) == decode_step({}, free)


def test_moe_prefill_pays_the_fused_moe_rate_and_its_uncaptured_launches():
    """A MoE model's routed experts run vLLM's fused-MoE grouped GEMM, slower per FLOP than a dense GEMM
    (`moe_mm_eff`): a compute-bound prefill of Qwen3-30B-A3B costs more with it, a bandwidth-bound small decode
    step nearly nothing more. A step above the largest CUDA graph launches each MoE layer's extra kernels from
    Python (`uncaptured_moe_layer_s`); a dense model has no MoE layer and pays none of either."""
    from rsi_env.engine import EngineConfig, load_hardware, load_model
    from rsi_env.sim.calibration import load_calibration
    from rsi_env.sim.cost import StepCost

    hw, cal = load_hardware("h200"), load_calibration("h200", "0.26")
    assert 0 < cal.moe_mm_eff < 1 and cal.uncaptured_moe_layer_s > 0
    ideal = cal.with_coefficients({"moe_mm_eff": 1.0, "uncaptured_moe_layer_s": 0.0})

    def cost(model: str, c) -> StepCost:
        m = load_model(model)
        return StepCost(m, hw, EngineConfig().resolve(m, hw, "0.26"), c)

    moe, moe_ideal = cost("qwen3-30b-a3b", cal), cost("qwen3-30b-a3b", ideal)
    prefill = (8192, 64, 64, 0.0, 64 * 128 * 129 / 2.0, 0.0, False)
    assert moe.step_time(*prefill) > 1.3 * moe_ideal.step_time(*prefill)
    decode = (8, 8, 8, 8 * 1000.0, 0.0, 0.0, True)
    assert moe.step_time(*decode) < 1.05 * moe_ideal.step_time(*decode)
    m = load_model("qwen3-30b-a3b")
    extra = moe.dispatch(600) - moe_ideal.dispatch(600)
    assert extra == pytest.approx(cal.uncaptured_moe_layer_s * m.num_moe_layers)
    assert moe.dispatch(256) == moe_ideal.dispatch(256) == 0.0  # captured: no launches from Python
    dense, dense_ideal = cost("llama-3.1-8b", cal), cost("llama-3.1-8b", ideal)
    assert dense.step_time(*prefill) == dense_ideal.step_time(*prefill)
    assert dense.dispatch(600) == dense_ideal.dispatch(600)


def test_a_closed_loop_client_sends_its_next_request_a_front_end_round_trip_later():
    """The client of a closed loop sees a request's last token after the front-end hop out, and its next request
    reaches the engine after the hop back in: the engine gets it ``frontend_s`` after the last step, not at once.
    TTFT is measured from the client's send, which is the hop in before the engine's arrival."""
    import numpy as np

    from rsi_env.sim.calibration import load_calibration

    cal = load_calibration("h200", "0.26")
    assert cal.frontend_s > 0
    w = Workload.from_dict({"name": "one_at_a_time", "seed": 3, "requests": 6, "prompt_tokens": 64,
                            "output_tokens": 16, "arrival": {"process": "closed", "concurrency": 1}})
    tel, _, _, results = simulate_detailed({}, "llama-3.1-8b", "h200", w)
    r = results[0]
    order = np.argsort(r.arrival)
    assert r.arrival[order[0]] == 0.0
    for prev, nxt in zip(order[:-1], order[1:], strict=True):
        assert r.arrival[nxt] == pytest.approx(r.finish[prev] + cal.frontend_s)
    # One request at a time: the whole run is the requests' latencies back to back, plus a round trip between two.
    assert r.finish.max() == pytest.approx(float(np.sum(r.finish - r.arrival)) + 5 * cal.frontend_s)
    assert tel.ok and tel.ttft_p50 > cal.frontend_s


def test_a_step_with_prompt_tokens_launches_piecewise_graphs_from_the_engine_core_thread():
    """Within the captured sizes only a decode-only step runs as one CUDA graph; a step with prompt tokens runs
    piecewise graphs with each layer's attention called from Python (``piecewise_layer_s`` a layer). That is CPU
    time beside the kernels: a small mixed step whose launches outlast its kernels takes its launches' time (the
    real traces' 8-14 ms gap before a prompt's first step on Llama-3.1-8B), a large prefill hides most of them, and
    enforce_eager has no graph pieces to launch: it launches every layer's kernels from Python instead, every step."""
    from rsi_env.engine import EngineConfig, load_hardware, load_model
    from rsi_env.sim.calibration import load_calibration
    from rsi_env.sim.cost import StepCost

    m, hw = load_model("llama-3.1-8b"), load_hardware("h200")
    cal = load_calibration("h200", "0.26").with_coefficients({"piecewise_layer_s": 300e-6})
    none = cal.with_coefficients({"piecewise_layer_s": 0.0})
    cost, cost_none = (StepCost(m, hw, EngineConfig().resolve(m, hw, "0.26"), c) for c in (cal, none))
    assert cost.dispatch(256, uniform_decode=False) == pytest.approx(300e-6 * m.num_layers)
    assert cost.dispatch(256, uniform_decode=True) == 0.0
    assert cost.dispatch(600, uniform_decode=False) == cost.dispatch(600)  # past the largest graph: uncaptured
    mixed = (240, 41, 41, 40 * 500.0, 200 * 201 / 2.0, 0.0, False)  # 40 decodes and a 200-token prompt
    assert cost.step_time(*mixed) >= cost.dispatch(240, False) + cal.cpu_step_s
    assert cost.step_time(*mixed) > cost_none.step_time(*mixed) + 4e-3
    decode = (40, 40, 40, 40 * 500.0, 0.0, 0.0, True)
    assert cost.step_time(*decode) == cost_none.step_time(*decode)
    big = (512, 1, 1, 0.0, 512 * 513 / 2.0, 0.0, False)  # a 512-token prompt, the largest graph: kernels dominate
    hidden = cost.step_time(*big) - cost_none.step_time(*big)
    assert hidden < 0.5 * (cost.step_time(*mixed) - cost_none.step_time(*mixed))
    eager = StepCost(m, hw, EngineConfig(enforce_eager=True).resolve(m, hw, "0.26"), cal)
    assert eager.dispatch(240, uniform_decode=False) == eager.dispatch(40) == pytest.approx(
        cal.eager_layer_s * m.num_layers)


def test_eager_launches_are_the_engine_core_threads_and_scale_with_layers_not_model_size():
    """With enforce_eager every layer's kernels are launched from Python on the engine core's thread, beside the
    kernels: a small batch's decode step costs its launches plus the engine core's work whatever its kernels take, so
    Llama-3.2-1B (16 layers) pays half of Llama-3.1-8B's (32) though its kernels are a fraction; a step whose kernels
    outlast the launches and that work costs its kernels. The real engine's eager decode steps of a few requests:
    8-8.5 ms for the 1B, 13-16 ms for the 8B (the sixteenth lease)."""
    from rsi_env.engine import EngineConfig, load_hardware, load_model
    from rsi_env.sim.calibration import load_calibration
    from rsi_env.sim.cost import StepCost

    hw = load_hardware("h200")
    cal = load_calibration("h200", "0.26")
    small: dict[str, float] = {}
    for name in ("llama-3.2-1b", "llama-3.1-8b"):
        m = load_model(name)
        eager = StepCost(m, hw, EngineConfig(enforce_eager=True).resolve(m, hw, "0.26"), cal)
        step = (4, 4, 4, 4 * 300.0, 0.0, 0.0, True)
        kernels = eager.kernels(4, 4, 4 * 300.0, 0.0, 0.0)
        launches = cal.eager_layer_s * m.num_layers
        assert kernels < launches  # a small batch: the launches set the pace
        small[name] = eager.step_time(*step)
        assert small[name] == pytest.approx(launches + eager.cpu_time(4))
        # A big prefill's kernels outlast the launches: the launches hide behind them.
        big = (8192, 1, 1, 0.0, 8192 * 8193 / 2.0, 0.0, False)
        assert eager.step_time(*big) == pytest.approx(eager.kernels(8192, 1, 0.0, 8192 * 8193 / 2.0, 0.0)
                                                      + eager.overhead(8192, 1, False))
    # Both pay the engine core's same per-step work; the launches part by layer count alone.
    cpu = cal.cpu_step_s + 4 * cal.cpu_per_req_s
    assert (small["llama-3.1-8b"] - cpu) == pytest.approx(2.0 * (small["llama-3.2-1b"] - cpu))


def test_uncaptured_launches_share_the_engine_core_thread_on_one_gpu():
    """vLLM's single-GPU executor launches the model from the engine core's own thread: a step outside every CUDA
    graph (its launches take ``dispatch``) leaves the scheduler and output processing no time to hide in, so they
    add to it even with async scheduling. Tensor-parallel workers launch in processes of their own. A captured
    step has no launch time at all."""
    from rsi_env.engine import EngineConfig, load_hardware, load_model
    from rsi_env.sim.calibration import load_calibration
    from rsi_env.sim.cost import StepCost

    m, hw = load_model("llama-3.1-8b"), load_hardware("h200")
    cal = load_calibration("h200", "0.26").with_coefficients({"uncaptured_layer_s": 1e-3, "cpu_step_s": 5e-3})
    one = StepCost(m, hw, EngineConfig().resolve(m, hw, "0.26"), cal)
    tp2 = StepCost(m, hw, EngineConfig(tensor_parallel_size=2).resolve(m, hw, "0.26"), cal)
    busier = cal.with_coefficients({"cpu_step_s": 10e-3})
    one_busier = StepCost(m, hw, EngineConfig().resolve(m, hw, "0.26"), busier)
    tp2_busier = StepCost(m, hw, EngineConfig(tensor_parallel_size=2).resolve(m, hw, "0.26"), busier)
    uncaptured = (600, 600, 600, 600 * 500.0, 0.0, 0.0, True)  # 600 decodes: above the largest graph (512)
    dispatch = one.dispatch(600)
    assert dispatch == pytest.approx(32e-3)
    # One process: launching and the engine core's work are serial, 5 ms more CPU is 5 ms more step.
    assert one_busier.step_time(*uncaptured) - one.step_time(*uncaptured) == pytest.approx(5e-3)
    assert one.step_time(*uncaptured) >= dispatch + cal.cpu_step_s
    # Two processes: the workers launch; the engine core's CPU hides under the step.
    assert tp2_busier.step_time(*uncaptured) == tp2.step_time(*uncaptured)
    captured = (256, 256, 256, 256 * 500.0, 0.0, 0.0, True)
    assert one.dispatch(256) == 0.0
    assert one_busier.step_time(*captured) - one.step_time(*captured) <= 5e-3 + 1e-12  # CPU-bound: exactly 5 ms


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_a_finished_request_holds_its_place_until_the_engine_core_processes_its_output(async_scheduling: bool):
    """Under async scheduling vLLM schedules step N+1 before it processes step N's output: a request that finished in
    step N still counts against max_num_seqs, and holds its KV blocks, when step N+1 is scheduled, so a waiting request
    takes its place in step N+2; without async scheduling, in step N+1. Nothing leaks either way."""
    import numpy as np

    from rsi_env.engine import EngineConfig, load_hardware, load_model
    from rsi_env.engine.workload import Trace
    from rsi_env.sim.calibration import load_calibration
    from rsi_env.sim.cost import StepCost
    from rsi_env.sim.engine import EngineSim

    m, hw = load_model("llama-3.1-8b"), load_hardware("h200")
    cfg = EngineConfig(max_num_seqs=2, async_scheduling=async_scheduling).resolve(m, hw, "0.26")
    cost = StepCost(m, hw, cfg, load_calibration("h200", "0.26"))
    # A (3 tokens) and B (40) start at once; C waits for a place and gets A's.
    trace = Trace(np.zeros(3), np.array([64, 64, 64]), np.array([3, 40, 5]), np.full(3, -1), np.zeros(3, np.int64),
                  0, 0)
    sim = EngineSim(cfg, cost, trace, 5000, check_invariants=True)
    r = sim.run()
    t = r.steps["t"]
    step_of = {name: int(np.searchsorted(t, x)) for name, x in (("a_done", r.finish[0]), ("c_first", r.first_token[2]))}
    assert step_of["c_first"] == step_of["a_done"] + (2 if async_scheduling else 1)
    assert (r.generated == trace.output_len).all()
    assert sim.pool.owned == 0 and not sim.pool.refs and sim.pool.free_plain + sim.pool.evictable == sim.pool.num_blocks
