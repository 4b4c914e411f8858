"""The SGLang sim's scheduler: policies, admission, chunked prefill, retraction, and the loop's conservation."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_env.engine import Workload
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.sglang_config import SglangConfig
from rsi_env.sim.calibration import load_calibration
from rsi_env.sim.cost import StepCost
from rsi_env.sim.sglang import simulate_sglang, simulate_sglang_detailed
from rsi_env.sim.sglang.engine import SglangEngineSim, make_requests
from rsi_env.sim.sglang.kv_pool import TokenPool
from rsi_env.sim.sglang.policy import SchedulePolicy
from rsi_env.sim.sglang.radix import RadixCache
from rsi_env.sim.sglang.request import Req
from rsi_env.sim.sglang.scheduler import SglangScheduler
from rsi_env.sim.sglang.simulate import sglang_calibration
from rsi_env.sim.sglang.sizing import SglangPlan, plan_sglang

MODEL, HW = "llama-3.1-8b", "h100-sxm"
SMALL = Workload.from_dict({"name": "small", "seed": 5, "requests": 60, "prompt_tokens": {"dist": "uniform",
                            "min": 16, "max": 200}, "output_tokens": {"dist": "uniform", "min": 4, "max": 90},
                            "arrival": {"process": "poisson", "rate": 100}})
SHARED = Workload.from_dict({"name": "shared", "seed": 9, "requests": 80, "prompt_tokens": 64, "output_tokens": 32,
                             "shared_prefix": {"groups": 4, "tokens": 512}, "arrival": {"process": "poisson",
                                                                                        "rate": 40}})


def plan_for(cfg: SglangConfig, **changes) -> SglangPlan:
    spec, hw = load_model(MODEL), load_hardware(HW)
    return replace(plan_sglang(cfg, spec, hw, load_calibration(hw.name, "0.26")), **changes)


def run_engine(cfg: SglangConfig, workload: Workload, **plan_changes):
    """The loop on a plan whose pool or limits a test sets, checking slot conservation after every pass."""
    spec, hw = load_model(MODEL), load_hardware(HW)
    plan = plan_for(cfg, **plan_changes)
    sched = SglangScheduler(cfg, plan)
    cost = StepCost(spec, hw, plan.resolved, load_calibration(hw.name, "0.26"))
    trace = workload.trace()
    res = SglangEngineSim(sched, cost, make_requests(trace, spec.vocab_size), trace.closed_concurrency,
                          check_invariants=True).run()
    return res, sched


def req(i: int, prompt: list[int], out: int = 4, arrival: float = 0.0) -> Req:
    return Req(i, tuple(prompt), tuple(range(100, 100 + out)), arrival)


# ---- policies --------------------------------------------------------------------------------------
def cache_with(*prefixes: list[int]) -> RadixCache:
    cache = RadixCache(TokenPool(10_000, 1))
    for p in prefixes:
        cache.insert(p)
    return cache


def test_lpm_orders_by_the_longest_cached_prefix():
    cache = cache_with([1] * 40, [2] * 10)
    queue = [req(0, [3] * 50), req(1, [2] * 50), req(2, [1] * 50)]
    SchedulePolicy("lpm", cache).calc_priority(queue)
    assert [r.i for r in queue] == [2, 1, 0]


def test_lpm_holds_back_a_request_whose_prefix_an_earlier_one_will_compute():
    cache = cache_with()
    queue = [req(0, [7] * 60 + [1]), req(1, [7] * 60 + [2]), req(2, [8] * 10)]
    SchedulePolicy("lpm", cache).calc_priority(queue)
    assert [r.i for r in queue] == [0, 2, 1]  # request 1 shares 60 tokens with request 0: it waits for the cache


def test_lpm_leaves_a_long_queue_as_it_stands():
    cache = cache_with([1] * 40)
    queue = [req(k, [2] * 8) for k in range(129)] + [req(129, [1] * 50)]
    SchedulePolicy("lpm", cache).calc_priority(queue)
    assert [r.i for r in queue] == list(range(130))


def test_cache_aware_policies_fall_back_to_fcfs_without_the_cache():
    assert SchedulePolicy("lpm", RadixCache(TokenPool(10, 1), disable=True)).policy == "fcfs"
    assert SchedulePolicy("dfs-weight", RadixCache(TokenPool(10, 1), disable=True)).policy == "fcfs"


def test_dfs_weight_walks_the_heavier_subtree_first():
    cache = cache_with([1] * 8, [2] * 8)
    queue = [req(0, [1] * 9), req(1, [2] * 9), req(2, [2] * 9), req(3, [5] * 9)]
    SchedulePolicy("dfs-weight", cache).calc_priority(queue)
    assert [r.i for r in queue] == [1, 2, 0, 3]  # [2]*8 holds two requests, [1]*8 one; no match goes last


def test_lof_and_random():
    queue = [req(0, [1], out=3), req(1, [1], out=9), req(2, [1], out=5)]
    SchedulePolicy("lof", cache_with()).calc_priority(queue)
    assert [r.i for r in queue] == [1, 2, 0]
    orders = []
    for seed in (0, 0, 1):
        q = [req(k, [1]) for k in range(20)]
        SchedulePolicy("random", cache_with(), seed).calc_priority(q)
        orders.append([r.i for r in q])
    assert orders[0] == orders[1] and sorted(orders[2]) == list(range(20))


def test_lpm_admits_the_request_sharing_the_longest_cached_prefix_first():
    """One request slot left: lpm gives it to the request whose prompt the cache holds most of; fcfs to the first."""
    for policy, first in (("lpm", 2), ("fcfs", 0)):
        cfg = SglangConfig(schedule_policy=policy)
        sched = SglangScheduler(cfg, plan_for(cfg, max_running_requests=1))
        warm = req(9, [5] * 300, out=1)
        sched.waiting = [warm]
        sched.process(sched.next_batch())  # finishes at once: its 300 tokens stay in the tree
        sched.waiting = [req(0, [6] * 300), req(1, [5] * 100 + [6] * 200), req(2, [5] * 250 + [6] * 50)]
        batch = sched.next_batch()
        assert [r.i for r in batch.reqs] == [first]
        sched.check()


# ---- admission and chunked prefill -----------------------------------------------------------------
def test_a_prompt_longer_than_the_chunk_is_prefilled_chunk_by_chunk():
    cfg = SglangConfig(chunked_prefill_size=1024)
    sched = SglangScheduler(cfg, plan_for(cfg))
    long = req(0, list(range(10, 3010)), out=2)
    sched.waiting = [long, req(1, [4] * 50)]
    extends = []
    while long.generated == 0:
        batch = sched.next_batch()
        extends.append([(r.i, r.extend) for r in batch.reqs])
        sched.process(batch)
        sched.check()
    # The chunk is spent by the long prompt: the short one waits; the last chunk leaves room for it.
    assert extends == [[(0, 1024)], [(0, 1024)], [(0, 952), (1, 50)]]
    assert sched.cache.match_prefix(long.prompt)[0] == 3000  # its chunks, then its prompt, went into the tree


def test_without_chunking_max_prefill_tokens_bounds_all_but_the_first_request():
    cfg = SglangConfig(chunked_prefill_size=-1, max_prefill_tokens=1000)
    sched = SglangScheduler(cfg, plan_for(cfg))
    sched.waiting = [req(0, list(range(10, 2010))), req(1, [3] * 400), req(2, [4] * 400)]
    assert [(r.i, r.extend) for r in sched.next_batch().reqs] == [(0, 2000)]
    sched.waiting = [req(3, [5] * 400), req(4, [6] * 400), req(5, [7] * 400)]
    assert [r.i for r in sched.next_batch().reqs] == [3, 4]


def test_max_running_requests_caps_the_running_batch():
    res, sched = run_engine(SglangConfig(), SMALL, max_running_requests=3)
    assert all(r.generated == r.output_len for r in res.reqs)
    assert res.running_time_integral / res.busy_time <= 3


# ---- retraction --------------------------------------------------------------------------------------
def test_a_pool_too_small_retracts_and_every_request_still_finishes():
    burst = Workload.from_dict({"name": "b", "seed": 3, "requests": 40, "prompt_tokens": 32, "output_tokens": 120,
                                "arrival": {"process": "burst"}})
    cfg = SglangConfig(schedule_conservativeness=0.3)
    res, sched = run_engine(cfg, burst, max_total_num_tokens=1500)
    assert res.num_retractions > 0
    assert sum(r.retractions for r in res.reqs) == res.num_retractions
    assert all(r.generated == r.output_len for r in res.reqs)
    assert not sched.running and not sched.waiting and sched.cache.protected_size == 0
    assert sched.pool.available + sched.cache.total_size() == sched.pool.size


def test_a_retraction_resets_the_new_token_ratio_from_the_kept_batch():
    cfg = SglangConfig(schedule_conservativeness=0.3)
    sched = SglangScheduler(cfg, plan_for(cfg, max_total_num_tokens=400))
    sched.waiting = [req(k, [k + 10] * 60, out=200) for k in range(5)]
    ratios = []
    while sched.num_retractions == 0:
        ratios.append(sched.ratio.current)
        sched.process(sched.next_batch())
        sched.check()
    kept = sched.running
    assert ratios[-1] < ratios[0] == sched.ratio.init  # decays while decode fits
    # Set when the step was formed, before the step sampled one more token for each kept request.
    decoded = sum(r.generated - 1 for r in kept)
    expected = min(1.0, (decoded + 20 * len(kept)) / (sum(r.output_len for r in kept) + 1))
    assert sched.ratio.current == pytest.approx(expected)
    retracted = [r for r in sched.waiting if r.retractions]
    assert retracted and all(r.kv == r.alloc == 0 for r in retracted)
    assert max(r.generated for r in retracted) <= min(r.generated for r in kept)


# ---- the whole run -------------------------------------------------------------------------------------
@pytest.mark.parametrize("flags", [{}, {"schedule_policy": "lpm"}, {"schedule_policy": "dfs-weight"},
                                   {"schedule_policy": "lof"}, {"schedule_policy": "random"},
                                   {"disable_radix_cache": True}, {"page_size": 16, "chunked_prefill_size": 512},
                                   {"chunked_prefill_size": -1}])
def test_every_request_produces_exactly_its_output_and_slots_are_conserved(flags):
    for w in (SMALL, SHARED):
        tel, plan, res = simulate_sglang_detailed(flags, MODEL, HW, w, check_invariants=True)
        assert tel.ok and tel.tier == "sim", tel.error
        assert [r.generated for r in res.reqs] == w.trace().output_len.tolist()
        assert all(r.arrival <= r.first_token <= r.finish for r in res.reqs)


def test_a_run_is_deterministic_under_its_seed():
    for flags in ({}, {"schedule_policy": "random"}, {"schedule_policy": "lpm"}):
        assert simulate_sglang(flags, MODEL, HW, SHARED).to_dict() == simulate_sglang(flags, MODEL, HW, SHARED).to_dict()


def test_disabling_the_radix_cache_gives_no_hits():
    on = simulate_sglang({}, MODEL, HW, SHARED)
    off = simulate_sglang({"disable_radix_cache": True}, MODEL, HW, SHARED)
    assert on.prefix_cache_hit_rate > 0.5  # 512 of 576 prompt tokens are one of 4 shared prefixes
    assert off.prefix_cache_hit_rate == 0.0
    assert on.ttft_p50 < off.ttft_p50


def test_a_shared_prefix_read_from_cache_prices_decode_only_where_a_prefix_is_shared():
    """kv_shared_read: a pass's repeated reads of a shared cached prefix cost less, so decode is cheaper on a workload
    whose requests share prefixes; with the cache off, or with no prefix shared, nothing changes."""
    base = sglang_calibration(HW).with_coefficients({"kv_shared_read": 0.0})  # every read from HBM
    free = base.with_coefficients({"kv_shared_read": 1.0})
    on = [simulate_sglang({}, MODEL, HW, SHARED, calibration=c) for c in (base, free)]
    assert on[1].tpot_p50 < on[0].tpot_p50 and on[1].out_tok_per_s > on[0].out_tok_per_s
    assert on[1].ttft_p50 <= on[0].ttft_p50  # prefill passes read no cached prefix twice: only decode moves
    off = [simulate_sglang({"disable_radix_cache": True}, MODEL, HW, SHARED, calibration=c).to_dict()
           for c in (base, free)]
    assert {**off[0], "calibration": None} == {**off[1], "calibration": None}
    alone = [simulate_sglang({}, MODEL, HW, SMALL, calibration=c) for c in (base, free)]
    assert alone[1].tpot_p50 == pytest.approx(alone[0].tpot_p50, rel=1e-3)  # random prompts share next to nothing


def test_a_small_chunk_raises_the_ttft_of_a_long_prompt_and_one_past_the_prompt_changes_nothing():
    """Real SGLang on an H100 (lease 2's long_context, ~8,000-token prompts): TTFT p50 0.289 s at a chunk of 2048,
    0.277 s at 8192 and 0.278 s at 16384. More chunks, more passes with their fixed costs; one pass either way."""
    one = Workload.from_dict({"name": "one", "seed": 1, "requests": 1, "prompt_tokens": 16000, "output_tokens": 8})
    ttft = {c: simulate_sglang({"chunked_prefill_size": c}, MODEL, HW, one).ttft_p50 for c in (1024, 4096, 16384,
                                                                                             32768)}
    assert ttft[1024] > 1.01 * ttft[4096]
    assert ttft[16384] == pytest.approx(ttft[32768], rel=1e-3)


def test_the_overlap_loop_picks_the_next_pass_before_the_one_in_flight_ends():
    """SGLang's overlap loop chooses pass N+1 when pass N is launched: a request arriving during a long prompt's first
    chunk is not yet seen, so that prompt's last chunk runs alone and its first token comes early; one that had
    arrived before shares the pass and delays it."""
    cfg = SglangConfig(chunked_prefill_size=8192)
    spec, hw = load_model(MODEL), load_hardware(HW)
    plan = plan_for(cfg)

    def first_token(second_arrives: float) -> float:
        reqs = [req(0, list(range(1000, 9400)), 4), req(1, list(range(20000, 27500)), 4, second_arrives)]
        cost = StepCost(spec, hw, plan.resolved, load_calibration(hw.name, "0.26"))
        SglangEngineSim(SglangScheduler(cfg, plan), cost, reqs, check_invariants=True).run()
        return reqs[0].first_token

    assert first_token(0.01) < 0.8 * first_token(0.0)


def test_a_prefill_after_a_decode_waits_for_its_scheduling_among_the_running_requests():
    """``cpu_switch_per_req_s``: a prefill pass whose predecessor was a decode costs that term per running request on
    top of its own price; a prefill after a prefill, and every decode, cost what they did. It is zero in a
    calibration that does not fit it (vLLM's), so such a run is priced as it was; SGLang's H100 fit holds it."""
    cfg = SglangConfig()
    spec, hw = load_model(MODEL), load_hardware(HW)
    plan = plan_for(cfg)
    shipped = load_calibration(hw.name, "0.26")
    assert shipped.cpu_switch_per_req_s == 0.0 and sglang_calibration(hw.name).cpu_switch_per_req_s > 0.0
    passes: list[tuple[bool, int, bool, float]] = []

    class Recording(SglangEngineSim):
        def _price(self, batch, running, parts, after_decode=False):
            dt = super()._price(batch, running, parts, after_decode)
            alone = super()._price(batch, running, [0.0] * len(parts), False)
            passes.append((batch.is_prefill, running, after_decode, dt - alone))
            return dt

    def run(cal):
        passes.clear()
        trace = SMALL.trace()
        return Recording(SglangScheduler(cfg, plan), StepCost(spec, hw, plan.resolved, cal),
                         make_requests(trace, spec.vocab_size), check_invariants=True).run()

    free = run(shipped)
    assert all(extra == 0.0 for *_, extra in passes)
    dear = run(replace(shipped, cpu_switch_per_req_s=2e-4))
    kinds = [p[0] for p in passes]
    assert [p[2] for p in passes] == [False] + [not k for k in kinds[:-1]]  # "after a decode" is the previous pass
    switches = [(running, extra) for prefill, running, after, extra in passes if prefill and after]
    assert sum(running for running, _ in switches) > 0
    for prefill, running, after, extra in passes:
        assert extra == pytest.approx(2e-4 * running if prefill and after else 0.0, abs=1e-12)
    assert dear.busy_time > free.busy_time and dear.profile.engine_cpu > free.profile.engine_cpu


def test_a_decode_pass_above_the_largest_cuda_graph_costs_its_per_request_term_and_no_other_pass_does():
    """``uncaptured_per_req_s``: a decode pass of more requests than ``cuda_graph_max_bs`` runs eagerly and costs that
    term per request on top of its price; a decode within the graphs and every prefill cost what they did, so the
    slowdown grows with the batch above the graph. At 0 (every calibration so far) a run is priced as it was."""
    cfg = SglangConfig(cuda_graph_max_bs=16)
    spec, hw = load_model(MODEL), load_hardware(HW)
    plan = plan_for(cfg)
    base = sglang_calibration(hw.name).with_coefficients({"uncaptured_per_req_s": 0.0})
    assert sglang_calibration(hw.name).uncaptured_per_req_s == 0.0
    passes: list[tuple[bool, int, float]] = []

    class Recording(SglangEngineSim):
        def _price(self, batch, running, parts, after_decode=False):
            dt = super()._price(batch, running, parts, after_decode)
            self.cost.cal, cal = base, self.cost.cal
            plain = super()._price(batch, running, [0.0] * len(parts), after_decode)
            self.cost.cal = cal
            passes.append((batch.is_prefill, len(batch.reqs), dt - plain))
            return dt

    def run(cal):
        passes.clear()
        return Recording(SglangScheduler(cfg, plan), StepCost(spec, hw, plan.resolved, cal),
                         make_requests(SMALL.trace(), spec.vocab_size), check_invariants=True).run()

    free = run(base)
    assert all(extra == 0.0 for *_, extra in passes)
    dear = run(base.with_coefficients({"uncaptured_per_req_s": 2e-5}))
    largest = plan.cuda_graph_max_bs
    assert largest == 16 and any(not prefill and bs > largest for prefill, bs, _ in passes)
    assert any(not prefill and bs <= largest for prefill, bs, _ in passes)
    for prefill, bs, extra in passes:
        assert extra == pytest.approx(2e-5 * bs if not prefill and bs > largest else 0.0, abs=1e-12)
    assert dear.busy_time > free.busy_time
    assert [r.output_len for r in dear.reqs] == [r.output_len for r in free.reqs]


def test_prefill_passes_run_under_cuda_graphs_only_up_to_the_chunk_size():
    """SGLang captures its prefill graphs up to the chunk size and none without chunking (its log: "Disable prefill
    CUDA graph because the capture size is not set"); its decode graphs go up to cuda_graph_max_bs. The cost model
    holds each kind of pass to its own sizes, and a vLLM cost model (one list for both) is as it was."""
    from rsi_env.sim.cost import GRAPH_MODES

    spec, hw, cal = load_model(MODEL), load_hardware(HW), load_calibration(HW, "0.26")
    chunked, unchunked = plan_for(SglangConfig()), plan_for(SglangConfig(chunked_prefill_size=-1))
    assert chunked.prefill_graphs[-1] == 8192 and unchunked.prefill_graphs == ()
    with_graphs = StepCost(spec, hw, chunked.resolved, cal, chunked.prefill_graphs)
    eager = StepCost(spec, hw, unchunked.resolved, cal, unchunked.prefill_graphs)
    assert with_graphs.graph_mode(700, False) == GRAPH_MODES["PIECEWISE"] and with_graphs.padded(700, False) == 704
    assert eager.graph_mode(100, False) == GRAPH_MODES["NONE"] and eager.padded(100, False) == 100
    assert eager.graph_mode(100, True) == GRAPH_MODES["FULL"] and eager.padded(100, True) == 104  # decode sizes
    assert with_graphs.graph_mode(300, True) == GRAPH_MODES["NONE"]  # past cuda_graph_max_bs (256)
    step = (700, 8, 208, 0.0, 700 * 88 / 2.0, 0.0, False, 8)
    assert eager.step_time(*step) > with_graphs.step_time(*step)
    vllm = StepCost(spec, hw, replace(chunked.resolved, cudagraph_capture_sizes=(8, 16, 512)), cal)
    assert (vllm.graph_mode(300, False), vllm.padded(300, False)) == (GRAPH_MODES["PIECEWISE"], 512)
    assert vllm.graph_mode(600, False) == GRAPH_MODES["NONE"]


def test_refusals_come_back_as_errors():
    assert "invalid_config" in simulate_sglang({"schedule_policy": "nope"}, MODEL, HW, SMALL).error
    assert "dp_size" in simulate_sglang({"dp_size": 2}, MODEL, HW, SMALL).error
    low = simulate_sglang({"mem_fraction_static": 0.1}, MODEL, HW, SMALL)
    assert not low.ok and "Loaded weights leave no GPU memory" in low.error


def test_the_default_pool_is_sized_like_sglangs_on_an_h100():
    # The real row (H100, Llama-3.1-8B): max_total_num_tokens 410,620, max_running_requests 2048, chunk 8192.
    plan = plan_for(SglangConfig())
    assert plan.chunked_prefill_size == 8192 and plan.max_running_requests == 2048
    assert 0.82 <= plan.mem_fraction_static <= 0.84
    assert abs(plan.max_total_num_tokens - 410_620) / 410_620 < 0.03


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 25), st.integers(1, 300), st.integers(1, 80), st.integers(0, 3), st.integers(0, 200),
       st.sampled_from(["fcfs", "lpm", "dfs-weight", "lof", "random"]), st.sampled_from([1, 4, 16]),
       st.sampled_from([-1, 64, 256]), st.sampled_from([0.3, 1.0, 2.0]), st.booleans(), st.integers(0, 3000),
       st.sampled_from([None, 2, 8]))
def test_any_small_run_finishes_every_request_exactly_and_leaks_nothing(
        n, prompt, out, groups, prefix, policy, page, chunk, conservativeness, no_cache, spare, max_running):
    """Random workloads on pools from just big enough to roomy: exact outputs, conserved slots, nothing left held."""
    raw = {"name": "h", "seed": n + prompt, "requests": n, "prompt_tokens": {"dist": "uniform", "min": 1,
           "max": prompt}, "output_tokens": {"dist": "uniform", "min": 1, "max": out},
           "arrival": {"process": "poisson", "rate": 50}}
    if groups and prefix:
        raw["shared_prefix"] = {"groups": groups, "tokens": prefix}
    w = Workload.from_dict(raw)
    trace = w.trace()
    pool = int((trace.prompt_len + trace.output_len).max()) + 2 * page + spare
    cfg = SglangConfig(schedule_policy=policy, page_size=page, chunked_prefill_size=chunk,
                       schedule_conservativeness=conservativeness, disable_radix_cache=no_cache)
    changes = {"max_total_num_tokens": pool // page * page}
    if max_running:
        changes["max_running_requests"] = max_running
    res, sched = run_engine(cfg, w, **changes)
    assert [r.generated for r in res.reqs] == trace.output_len.tolist()
    assert all(r.arrival <= r.first_token <= r.finish for r in res.reqs)
    assert not sched.running and not sched.waiting and sched.chunked is None
    assert sched.cache.protected_size == 0
    assert sched.pool.available + sched.cache.total_size() == sched.pool.size


def test_a_closed_loop_client_keeps_its_concurrency():
    closed = Workload.from_dict({"name": "c", "seed": 1, "requests": 50, "prompt_tokens": 100, "output_tokens": 20,
                                 "arrival": {"process": "closed", "concurrency": 4}})
    tel, _, res = simulate_sglang_detailed({}, MODEL, HW, closed, check_invariants=True)
    assert tel.ok and [r.generated for r in res.reqs] == [20] * 50
    assert 0 < tel.mean_batch_size <= 4
    starts = sorted(r.arrival for r in res.reqs)
    assert starts[:4] == [0.0] * 4 and starts[4] > 0.0  # the fifth is sent when one of the first four finished
