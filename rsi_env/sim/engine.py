"""The simulated vLLM V1 engine: its engine core's loop, iteration by iteration, over a paged KV cache.

One iteration of :meth:`EngineSim.run` is vLLM's: arrivals, schedule (the running requests, then admissions, by the
rules of ``vllm/v1/core/sched/scheduler.py`` 0.26, in `rsi_env.sim.scheduler`), price the step (`StepCost`), advance
it and finish what is done.

Async scheduling (vLLM's default): the engine core schedules step N+1 before it processes step N's output
(``EngineCore.step_with_batch_queue``), so a request that arrives while step N runs is first scheduled in step
N+2, and a request that finishes in step N still holds its place among the ``max_num_seqs`` and its KV blocks
when step N+1 is scheduled: they are freed when its output is processed, for step N+2 (``draining``). A waiting
request takes a finished one's place one step later than the finish, and a tight KV cache preempts a little more.

Speed: the running requests in their decode phase form one `DecodeGroup`, whose step costs the same for any batch
size; the others (prompts being computed) are kept one by one. Runs of pure-decode steps in
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
from rsi_env.sim.scheduler import Scheduler, StepBatch

__all__ = ["STEP_COLUMNS", "EngineSim", "SimResult"]

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


class EngineSim(Scheduler):
    """One engine, one trace. :meth:`run` simulates until every request has finished.

    ``record_steps``: keep the per-step trace (`SimResult.steps`); `rsi_env.sim.simulate` does without it.
    """

    def __init__(self, cfg: ResolvedConfig, cost: StepCost, trace: Trace, num_gpu_blocks: int,
                 check_invariants: bool = False, record_steps: bool = True) -> None:
        super().__init__(cfg, cost, trace, num_gpu_blocks, check_invariants)
        self.record_steps = record_steps

    def _record(self, t: list[float], tokens: int, running_n: int, gen: int, uniform_decode: bool) -> None:
        k = len(t)
        rec = self.rec
        rec["t"].extend(t)
        for key, v in (("tokens", tokens), ("running", running_n), ("gen", gen),
                       ("mode", self.cost.graph_mode(tokens, uniform_decode))):
            rec[key].extend([v] * k)

    # ---- the loop -----------------------------------------------------------------------------------
    def run(self) -> SimResult:
        cfg, n = self.cfg, self.n
        self.closed = self.trace.closed_concurrency
        # A closed-loop client sends its next request when it has received the last one's final token:
        # the engine sees it a front-end round trip (out to the client, back in) after that token.
        self.round_trip = self.cost.cal.frontend_s
        if self.closed:
            issue = min(self.closed, n)
            self.arrival = [0.0] * issue + [math.inf] * (n - issue)
            self.order = list(range(n))
        else:
            self.order = np.argsort(np.asarray(self.arrival, np.float64), kind="stable").tolist()
        self.issued = min(self.closed, n) if self.closed else 0
        self.next_arr = 0
        self.now = 0.0
        self.last_dt = 0.0
        self.done = 0
        self.steps = 0
        self.tokens_total = 0
        self.kv_peak = 0
        self.busy = self.run_int = 0.0
        self.prof = [0.0] * len(PARTS)  # seconds per profile part (PARTS order); idle is the last
        self.t_first = self.arrival[self.order[0]] if n else 0.0  # the run's time starts at its first arrival
        # The step trace, column by column (plain lists: a numpy array per step would cost more than the step).
        self.rec: dict[str, list[float]] = {k: [] for k in STEP_COLUMNS}
        # With async scheduling vLLM schedules step N+1 as soon as step N is launched, so a request that
        # arrives while step N runs is first seen when step N+2 is scheduled.
        self.lag = cfg.async_scheduling
        while self.done < n:
            self._arrivals()
            if not self.running and not self._n_waiting():
                if not self._idle():
                    break
                continue
            if self._decode_span():
                continue
            batch = StepBatch(cfg.max_num_batched_tokens)
            self._schedule_running(batch)
            if not batch.preempted:
                self._admit(batch)
            if self._nothing_scheduled(batch):
                continue
            self._step(batch)

        for i in self.draining:
            self._release(i, False)
        usable = max(self.pool.num_blocks, 1)
        return SimResult(
            arrival=np.asarray(self.arrival, np.float64), first_token=np.asarray(self.first, np.float64),
            finish=np.asarray(self.finish, np.float64), prompt_len=self.prompt, output_len=self.out_len,
            generated=np.asarray(self.known, np.int64) - self.prompt, num_steps=self.steps,
            num_preemptions=self.preemptions, prefix_queries=self.queries,
            prefix_hits=self.hits, kv_usage_peak=self.kv_peak / usable, busy_time=self.busy,
            running_time_integral=self.run_int, tokens_scheduled=self.tokens_total,
            preempted_prefix_hits=self.preempted_hits,
            steps=({k: np.asarray(v, np.float64 if k == "t" else np.int64) for k, v in self.rec.items()}
                   if self.record_steps else None),
            profile=self._profile(self.prof, self.busy),
        )

    # 1. arrivals
    def _arrivals(self) -> None:
        """Requests that arrived before this step is scheduled join the waiting queue (a step later under async)."""
        cutoff = self.now - self.last_dt if self.lag else self.now
        limit = self.issued if self.closed else self.n
        arrival, order = self.arrival, self.order
        j = self.next_arr
        if self.fcfs:
            append = self.waiting.append
            while j < limit and arrival[order[j]] <= cutoff:
                append(order[j])
                j += 1
        else:
            while j < limit and arrival[order[j]] <= cutoff:
                self._enqueue(order[j])
                j += 1
        self.next_arr = j

    def _idle(self) -> bool:
        """Nothing runs or waits: jump to the next arrival (False when none is left)."""
        for i in self.draining:
            self._release(i, False)
        self.draining.clear()
        if self.next_arr >= (self.issued if self.closed else self.n):
            return False
        t_arr = max(self.now, self.arrival[self.order[self.next_arr]])
        self.prof[-1] += t_arr - max(self.now, self.t_first)
        self.now = t_arr
        self.last_dt = 0.0  # an idle engine schedules a request the moment it arrives
        return True

    # 2. a span of pure-decode steps nothing can interrupt
    def _decode_span(self) -> bool:
        """Advance every running request by the steps until the next finish, arrival or block shortage, if only
        decodes run and no waiting request could be admitted meanwhile; False (nothing done) otherwise.

        Requests still draining keep a waiting one out of the next step only: then no span is taken.
        """
        nrun = len(self.running)
        n_wait = self._n_waiting()
        cfg, pool, dec = self.cfg, self.pool, self.decoding
        if not nrun or self.prefill or not self.fcfs or nrun > cfg.max_num_batched_tokens or (
                self.draining and n_wait):
            return False
        admit_possible = n_wait > 0 or self.next_arr < (self.issued if self.closed else self.n)
        if n_wait and nrun < cfg.max_num_seqs:
            w = self.waiting[0]
            hg, hp, touch = self._lookup(w)
            admit_possible = self._cdiv(self.known[w]) - hg - hp + touch <= pool.num_free
        elif nrun >= cfg.max_num_seqs:
            admit_possible = False
        if admit_possible and n_wait:
            return False
        k = dec.steps_to_finish()
        free = pool.free_plain + pool.evictable
        need = dec.new_blocks(k)
        if need > free:  # the most steps the free blocks allow
            lo, hi = 0, k
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if dec.new_blocks(mid) <= free:
                    lo = mid
                else:
                    hi = mid - 1
            k = lo
            if k < 1:
                return False
            need = dec.new_blocks(k)
        now = self.now
        until = self.arrival[self.order[self.next_arr]] - now if admit_possible else math.inf
        steps = k
        k, cum, self.last_dt, terms = self.cost.decode_span_until(nrun, nrun, float(dec.context()), k, until)
        span = float(cum[k - 1])
        self.cost.add_span_parts(self.prof, terms, k)
        if self.record_steps:
            self._record([now + float(c) for c in cum[:k]], nrun, nrun, nrun, True)
        if dec.no_first:  # a request whose last prompt token is computed in the span's first step samples then
            t0 = now + float(cum[0])
            for i in dec.no_first:
                self.first[i] = t0
        if k < steps:  # the next arrival cut the span short
            need = dec.new_blocks(k)
        need_first = dec.new_blocks(1) if self.draining else 0
        pool.take(need)
        finished = dec.advance(k)
        self.now = now + span
        self.steps += k
        self.tokens_total += k * nrun
        self.busy += span
        self.run_int += span * nrun
        if self.draining:  # the span's first step was scheduled beside them; their blocks go now
            self.kv_peak = max(self.kv_peak, pool.used - need + need_first)
            for i in self.draining:
                self._release(i, False)
            self.draining.clear()
        self.kv_peak = max(self.kv_peak, pool.used)
        comp, known, out_left = self.comp, self.known, self.out_left
        for i, c in finished:  # their counts back in the per-request lists
            comp[i], known[i], out_left[i] = c, c + 1, 0
            self._finish_request(i)
        if self.check:
            pool.check()
        return True

    def _nothing_scheduled(self, b: StepBatch) -> bool:
        """A step with nothing to run: free the draining requests' places, or wait for an arrival."""
        if b.group or b.chunks:
            return False
        self._regroup(list(self.prefill))
        if self.draining:
            for i in self.draining:
                self._release(i, False)
            self.draining.clear()
            return True
        # Nothing fits (every block is taken by requests that cannot advance): wait for arrivals.
        if self.next_arr < (self.issued if self.closed else self.n) and not self.running:
            t_arr = max(self.now, self.arrival[self.order[self.next_arr]])
            self.prof[-1] += t_arr - max(self.now, self.t_first)
            self.now = t_arr
            self.last_dt = 0.0
            return True
        raise RuntimeError("scheduler deadlock: no request can be scheduled and none is running")

    # 5. price the step, advance it, finish what is done
    def _step(self, b: StepBatch) -> None:
        """Price the step, advance every scheduled request by its tokens, and finish those that are done."""
        cfg, pool, dec = self.cfg, self.pool, self.decoding
        comp, known, out_left, first = self.comp, self.known, self.out_left, self.first
        ntok = cfg.max_num_batched_tokens - b.budget
        n_group = len(dec) if b.group else 0
        nrun = len(self.running)
        dt = self.cost.step_time(ntok, n_group + len(b.chunks), nrun, b.decode_ctx, b.pairs, b.pctx, b.uniform,
                                 b.admitted, self.prof)
        now = self.now = self.now + dt
        self.last_dt = dt
        self.steps += 1
        self.tokens_total += ntok
        self.busy += dt
        self.run_int += dt * nrun
        self.kv_peak = max(self.kv_peak, pool.used)
        done: list[int] = []
        sampled = n_group
        for i, nn in b.chunks:
            c = comp[i] = comp[i] + nn
            if c == known[i]:  # the prompt (or its recompute) is done: the step samples a token
                known[i] = c + 1
                out_left[i] -= 1
                sampled += 1
                if first[i] != first[i]:
                    first[i] = now
                if not out_left[i]:
                    done.append(i)
        for i in self.draining:
            self._release(i, False)
        self.draining.clear()
        if b.group:
            for i in dec.no_first:
                first[i] = now
            finished = dec.advance(1)
            for i, c in finished:  # their counts back in the per-request lists
                comp[i], known[i], out_left[i] = c, c + 1, 0
            if finished:
                done = sorted([i for i, _ in finished] + done, key=self.running.__getitem__) if done else \
                    [i for i, _ in finished]
        for i in done:
            self.prefill.pop(i, None)
            self._finish_request(i)
        self._regroup(list(self.prefill) if b.ungrouped else [i for i, _ in b.chunks])
        if self.record_steps:
            self._record([now], ntok, len(self.running), sampled, b.uniform)
        if self.check:
            pool.check()

    def _finish_request(self, i: int) -> None:
        """Request ``i`` generated its last token: its place and blocks are freed (a step later under async)."""
        self.finish[i] = self.now
        if self.lag:
            self.draining.append(i)
        else:
            self._release(i, False)
        del self.running[i]
        self.done += 1
        if self.closed and self.issued < self.n:
            self.arrival[self.order[self.issued]] = self.now + self.round_trip
            self.issued += 1

    def _profile(self, parts: list[float], busy: float) -> Profile:
        """The run's `Profile`: the steps' priced parts, the engine-CPU wait they leave, the idle waits."""
        self.cost.engine_cpu_rest(parts, busy)
        return Profile(*parts)
