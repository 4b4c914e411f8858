"""The simulated vLLM V1 engine: its engine core's loop, iteration by iteration, over a paged KV cache.

One iteration of :meth:`EngineSim.run` is vLLM's: arrivals, schedule (the running requests, then admissions, by the
rules of ``vllm/v1/core/sched/scheduler.py`` 0.26), price the step (`StepCost`'s model), advance it and finish what is
done. The loop itself is `rsi_env.sim.vllm.loop.engine_loop`, compiled by numba (plain Python where numba is missing:
`rsi_env.sim.vllm.jit`); this module packs a run's arguments for it and reads its results back.

Async scheduling (vLLM's default): the engine core schedules step N+1 before it processes step N's output
(``EngineCore.step_with_batch_queue``), so a request that arrives while step N runs is first scheduled in step
N+2, and a request that finishes in step N still holds its place among the ``max_num_seqs`` and its KV blocks
when step N+1 is scheduled: they are freed when its output is processed, for step N+2 (``draining``). A waiting
request takes a finished one's place one step later than the finish, and a tight KV cache preempts a little more.

Speed: the running requests in their decode phase form one group (`rsi_env.sim.vllm.decode_group`), whose step costs
the same for any batch size; the others (prompts being computed) are kept one by one. Runs of pure-decode steps in
which nothing can change the batch (no arrival that could be admitted, no finish, no block shortage) are advanced
in one span from the last event to the next; their step times differ only by the growing KV read, so one roofline
evaluation prices all of them.

Profile: every priced step (or span) adds its cost terms to the run's `Profile` (`StepCost.step_time`), and every
wait for an arrival with nothing to run adds to ``idle``, so the parts sum to the engine's time from the first
arrival to the last output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rsi_env.engine.config import ResolvedConfig
from rsi_env.engine.profile import PARTS, Profile
from rsi_env.engine.workload import Trace
from rsi_env.sim.cost import StepCost

__all__ = ["STEP_COLUMNS", "EngineSim", "PoolCounts", "SimResult"]

STEP_COLUMNS = ("t", "tokens", "running", "gen", "mode")


@dataclass
class SimResult:
    """Per-request timestamps and engine counters of one simulated run."""

    arrival: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    generated: np.ndarray
    num_steps: int
    num_preemptions: int
    prefix_queries: int
    prefix_hits: int  # as vLLM's counters: a preempted request's return is counted apart (preempted_prefix_hits)
    kv_usage_peak: float
    busy_time: float
    running_time_integral: float
    tokens_scheduled: int
    # Per step, as the real tier's step trace (`rsi_env.real.step_trace`): end time, tokens scheduled, running
    # requests after scheduling, tokens generated, CUDA-graph mode (0 none, 1 piecewise, 2 full).
    steps: dict[str, np.ndarray] | None = None
    preempted_prefix_hits: int = 0  # cached tokens preempted requests found on their return (vLLM's preempted_hits)
    profile: Profile = field(default_factory=Profile)  # busy_time split by part, plus the idle waits


@dataclass(frozen=True)
class PoolCounts:
    """The KV block pool's counts at the end of a run (`EngineSim.pool`), read back from the compiled loop."""

    num_blocks: int
    free_plain: int
    evictable: int
    owned: int  # blocks owned by single requests (not in any chain)
    cached: dict[int, int]  # chain -> cached blocks (chains with any)
    refs: dict[int, int]  # chain -> running requests referencing it (chains with any)
    lru: frozenset[int]  # the chains whose cached blocks are evictable

    @property
    def num_free(self) -> int:
        return self.free_plain + self.evictable

    @property
    def used(self) -> int:
        return self.num_blocks - self.num_free

    def check(self) -> None:
        """Raise if blocks leaked or the pool is over-committed (the property tests' check)."""
        held = sum(self.cached.get(c, 0) for c in self.refs)
        lru = sum(self.cached.get(c, 0) for c in self.lru)
        if lru != self.evictable:
            raise AssertionError(f"evictable {self.evictable} != cached in LRU {lru}")
        if self.free_plain < 0 or self.evictable < 0 or self.owned < 0:
            raise AssertionError("negative block count")
        if self.free_plain + self.evictable + self.owned + held != self.num_blocks:
            raise AssertionError(
                f"blocks leak: free {self.free_plain} + evictable {self.evictable} + owned {self.owned} "
                f"+ referenced-cached {held} != {self.num_blocks}")


class EngineSim:
    """One engine, one trace. :meth:`run` simulates until every request has finished.

    ``check_invariants``: check the block pool's accounting after every step (`AssertionError` if broken; the
    property tests); ``record_steps``: keep the per-step trace (`SimResult.steps`); `rsi_env.sim.simulate` does
    without it.

    Under the priority policy, the waiting queue is ordered by `waiting_key` and victims are the largest
    `victim_key` (ties by request id): the arrival time by default. A subclass may override both with keys that are
    static per request (`rsi_env.sim.policy_hook.PolicyEngineSim`): they are read once per request, before the run.
    """

    def __init__(self, cfg: ResolvedConfig, cost: StepCost, trace: Trace, num_gpu_blocks: int,
                 check_invariants: bool = False, record_steps: bool = True) -> None:
        self.cfg = cfg
        self.cost = cost
        self.trace = trace
        self.n = len(trace)
        self.num_gpu_blocks = num_gpu_blocks
        self.check = check_invariants
        self.record_steps = record_steps
        self.pool: PoolCounts | None = None  # after `run`: the pool's final counts

    def waiting_key(self, i: int) -> float:
        """Request ``i``'s place in the waiting queue under the priority policy (smallest first)."""
        return float(self.trace.arrival_s[i])

    def victim_key(self, i: int) -> float:
        """Request ``i``'s rank as a preemption victim under the priority policy (largest first)."""
        return float(self.trace.arrival_s[i])

    def run(self) -> SimResult:
        from rsi_env.sim.vllm import block_pool as bp
        from rsi_env.sim.vllm import loop
        from rsi_env.sim.vllm.jit import first_call
        from rsi_env.sim.vllm.price import linear_consts, moe_consts, step_consts

        cfg, cost, trace, n = self.cfg, self.cost, self.trace, self.n
        closed = int(trace.closed_concurrency or 0)
        if closed:  # the first ``closed`` requests at 0; each next one a front-end round trip after a finish
            issue = min(closed, n)
            arrival = np.array([0.0] * issue + [math.inf] * (n - issue), np.float64)
            order = np.arange(n, dtype=np.int64)
        else:
            arrival = trace.arrival_s.astype(np.float64)
            order = np.argsort(arrival, kind="stable").astype(np.int64)
        prompt = trace.prompt_len.astype(np.int64)
        out_len = trace.output_len.astype(np.int64)
        bs = int(cfg.block_size)
        group = trace.prefix_group.astype(np.int64)
        ngroups = max(int(group.max()) + 1, 0) if n else 0
        caching = bool(cfg.enable_prefix_caching)
        pblocks = trace.prefix_len.astype(np.int64) // bs if caching else np.zeros(n, np.int64)
        keyed = type(self).waiting_key is not EngineSim.waiting_key or type(self).victim_key is not EngineSim.victim_key
        if keyed:  # a policy's static keys
            wkey = np.array([float(self.waiting_key(i)) for i in range(n)], np.float64)
            vkey = np.array([float(self.victim_key(i)) for i in range(n)], np.float64)
        else:  # the arrival times, read as the requests arrive (a closed loop's are known only then)
            wkey = vkey = np.zeros(0)
        num_blocks = max(self.num_gpu_blocks - 1, 0)  # block 0 is vLLM's null block
        out_f, out_i, prof = np.zeros(3), np.zeros(8, np.int64), np.zeros(len(PARTS))
        with first_call(loop.engine_loop):  # one process compiles where many start on an empty cache
            first, finish, known, rec_t, rec_i, ps, cached, refs, in_lru = loop.engine_loop(
                arrival, order, prompt, out_len, group, pblocks, ngroups, step_consts(cost), bs, num_blocks,
                int(cfg.max_num_seqs), int(cfg.max_num_batched_tokens), int(cfg.long_prefill_token_threshold or 0),
                bool(cfg.enable_chunked_prefill), caching, bool(cfg.async_scheduling), cfg.scheduling_policy == "fcfs",
                linear_consts(cost), moe_consts(cost), np.asarray(cost._sizes, np.int64), int(cost._window or 0),
                closed, float(cost.cal.frontend_s), bool(self.record_steps), keyed, wkey, vkey, bool(self.check), out_f,
                out_i, prof)
        self.pool = PoolCounts(
            num_blocks, int(ps[bp.PS_FREE]), int(ps[bp.PS_EVICTABLE]), int(ps[bp.PS_OWNED]),
            {int(c): int(x) for c, x in enumerate(cached[:-1]) if x},
            {int(c): int(x) for c, x in enumerate(refs[:-1]) if x},
            frozenset(int(c) for c in np.flatnonzero(in_lru[:-1])))
        status = int(out_i[3])
        if status == loop.ST_NO_BLOCKS:
            raise RuntimeError(f"allocating {int(ps[bp.PS_ASKED])} blocks with {int(ps[bp.PS_HAD])} free")
        if status == loop.ST_DEADLOCK:
            raise RuntimeError("scheduler deadlock: no request can be scheduled and none is running")
        if status == loop.ST_INVARIANT:
            self.pool.check()
            raise AssertionError("the block pool's invariant broke during the run")
        steps = None
        if self.record_steps:
            nrec = int(out_i[7])
            steps = {"t": rec_t[:nrec].copy(), **{c: rec_i[:nrec, j].copy() for j, c in enumerate(STEP_COLUMNS[1:])}}
        busy = float(out_f[0])
        parts = prof.tolist()
        cost.engine_cpu_rest(parts, busy)
        return SimResult(
            arrival=arrival, first_token=first, finish=finish, prompt_len=prompt, output_len=out_len,
            generated=known - prompt, num_steps=int(out_i[0]), num_preemptions=int(out_i[4]),
            prefix_queries=int(out_i[2]), prefix_hits=int(out_i[5]), kv_usage_peak=float(out_f[2]), busy_time=busy,
            running_time_integral=float(out_f[1]), tokens_scheduled=int(out_i[1]),
            preempted_prefix_hits=int(out_i[6]), steps=steps, profile=Profile(*parts))
