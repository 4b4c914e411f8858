"""The simulated vLLM V1 engine: its scheduler, iteration by iteration, over a paged KV cache.

Each step follows ``vllm/v1/core/sched/scheduler.py`` (0.26): running requests first, in
admission order, each taking ``min(tokens it still needs, long_prefill_token_threshold, budget
left)`` of the ``max_num_batched_tokens`` budget; a running request whose blocks cannot be
allocated preempts from the tail (FCFS) or the latest arrival (priority), by recompute, and the
victim goes back to the front of the waiting queue; only in steps without a preemption are waiting
requests admitted, while fewer than ``max_num_seqs`` run and their whole known sequence fits in
the free blocks, after a prefix-cache lookup capped at ``num_tokens - 1``. Without chunked prefill
a prompt that does not fit the budget left blocks the queue.

Async scheduling (vLLM's default): the engine core schedules step N+1 before it processes step N's output
(``EngineCore.step_with_batch_queue``), so a request that arrives while step N runs is first scheduled in step
N+2, and a request that finishes in step N still holds its place among the ``max_num_seqs`` and its KV blocks
when step N+1 is scheduled: they are freed when its output is processed, for step N+2 (``draining``). A waiting
request takes a finished one's place one step later than the finish, and a tight KV cache preempts a little more.

One iteration of :meth:`EngineSim.run` is vLLM's: arrivals, schedule (running requests, then admissions), price,
advance, finish. Speed: the running requests in their decode phase form one `DecodeGroup`, whose step costs
the same for any batch size; the others (prompts being computed) are kept one by one. Runs of pure-decode steps in
which nothing can change the batch (no arrival that could be admitted, no finish, no block shortage) are advanced
in one span from the last event to the next; their step times differ only by the growing KV read, so one roofline
evaluation prices all of them.

Profile: every priced step (or span) adds its cost terms to the run's `Profile` (`StepCost.step_time`), and every
wait for an arrival with nothing to run adds to ``idle``, so the parts sum to the engine's time from the first
arrival to the last output.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from rsi_env.engine.config import ResolvedConfig
from rsi_env.engine.profile import PARTS, Profile
from rsi_env.engine.workload import Trace
from rsi_env.sim.cost import StepCost
from rsi_env.sim.decoders import DecodeGroup
from rsi_env.sim.kv_cache import BlockPool

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


class _Batch:
    """One step's schedule: the token budget left, who runs, and what the cost model prices it by."""

    __slots__ = ("budget", "group", "chunks", "admitted", "decode_ctx", "pairs", "pctx", "uniform", "preempted",
                 "ungrouped")

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.group = False  # the decode group runs (one token each)
        self.chunks: list[tuple[int, int]] = []  # (request, tokens) scheduled one by one, in running order
        self.admitted = 0
        self.decode_ctx = 0.0
        self.pairs = 0.0
        self.pctx = 0.0
        self.uniform = True
        self.preempted = False
        self.ungrouped = False  # the running requests were scheduled one by one (`EngineSim._ungroup`)


class EngineSim:
    """One engine, one trace. :meth:`run` simulates until every request has finished.

    ``record_steps``: keep the per-step trace (`SimResult.steps`); `rsi_env.sim.simulate` does without it.
    """

    def __init__(self, cfg: ResolvedConfig, cost: StepCost, trace: Trace, num_gpu_blocks: int,
                 check_invariants: bool = False, record_steps: bool = True) -> None:
        self.cfg = cfg
        self.cost = cost
        self.trace = trace
        n = len(trace)
        self.n = n
        bs = cfg.block_size
        self.bs = bs
        self.pool = BlockPool(max(num_gpu_blocks - 1, 0))  # block 0 is vLLM's null block
        self.check = check_invariants
        self.record_steps = record_steps
        self.prompt = trace.prompt_len.astype(np.int64)
        self.out_len = trace.output_len.astype(np.int64)
        self.arrival: list[float] = trace.arrival_s.astype(np.float64).tolist()
        # Per request, plain lists (a request's counts change one at a time). A member of the decode group has its
        # counts in the group; these hold them once it leaves.
        self.comp = [0] * n                            # tokens whose KV is computed (scheduled)
        self.known: list[int] = self.prompt.tolist()   # prompt + tokens generated so far
        self.out_left: list[int] = self.out_len.tolist()  # tokens still to generate
        self.first = [math.nan] * n
        self.finish = [math.nan] * n
        groups = int(trace.prefix_group.max()) + 1 if n else 0
        self.ngroups = max(groups, 0)
        self.group: list[int] = trace.prefix_group.astype(np.int64).tolist()
        pblocks = trace.prefix_len.astype(np.int64) // bs
        self.pblocks: list[int] = pblocks.tolist() if cfg.enable_prefix_caching else [0] * n
        self.shared = [0] * n     # blocks of the group chain this request references
        self.chain_pos = [0] * n  # prefix blocks this request has accounted for
        self.in_group = [False] * n
        self.was_preempted = [False] * n
        # The running requests, in admission order (request -> admission number), split in two: the decode group,
        # and the others (``prefill``: prompt tokens still to compute), kept in running order.
        self.running: dict[int, int] = {}
        self.decoding = DecodeGroup(bs, cost.window(1 << 60) if cost.has_window else None, n)
        self.prefill: dict[int, None] = {}
        self.waiting: deque[int] = deque()
        self.wait_sorted: list[tuple[float, int]] = []  # priority policy: (key, id)
        # Requests that finished in the last step, their slots and blocks freed once the next step is scheduled.
        self.draining: list[int] = []

    # ---- per-request helpers -----------------------------------------------------------------------
    def _cdiv(self, x: int) -> int:
        return -(-x // self.bs)

    def _extend_prefix(self, i: int, upto_tokens: int) -> None:
        """Blocks of the shared prefix that request ``i`` now covers join the group's chain."""
        pb = self.pblocks[i]
        pos = self.chain_pos[i]
        if pos >= pb or not self.in_group[i]:
            return
        covered = min(pb, upto_tokens // self.bs)
        if covered <= pos:
            return
        g = self.group[i]
        if self.pool.cached_len(g) == pos:
            self.pool.extend(g, covered - pos)
            self.shared[i] += covered - pos
        self.chain_pos[i] = covered

    def _release(self, i: int, preempt: bool) -> None:
        """Free request ``i``'s blocks (those covering its computed tokens); after a preemption its full blocks stay
        cached for its return."""
        owned = -(-self.comp[i] // self.bs) - self.shared[i]
        if preempt and self.cfg.enable_prefix_caching:
            full = max(self.comp[i] // self.bs - self.shared[i], 0)
            full = min(full, owned)
            self.pool.park(self.ngroups + i, full)
            owned -= full
        self.pool.release(owned)
        if self.in_group[i]:
            self.pool.unacquire(self.group[i])
            self.in_group[i] = False
        self.shared[i] = 0
        self.chain_pos[i] = 0

    def _lookup(self, i: int) -> tuple[int, int, int]:
        """Prefix-cache hit of waiting request ``i``: (group blocks, private blocks, free blocks touched)."""
        if not self.cfg.enable_prefix_caching:
            return 0, 0, 0
        cap = (self.known[i] - 1) // self.bs
        pb = self.pblocks[i]
        g = self.group[i]
        hg = min(self.pool.cached_len(g), pb, cap) if (g >= 0 and pb) else 0
        touch = self.pool.touch_cost(g, hg) if hg else 0
        hp = 0
        priv = self.ngroups + i
        if self.was_preempted[i] and hg == pb:
            hp = min(self.pool.cached_len(priv), cap - hg)
            touch += self.pool.touch_cost(priv, hp)
        return hg, hp, touch

    def _enqueue(self, i: int) -> None:
        if self.fcfs:
            self.waiting.append(i)
        else:
            bisect.insort(self.wait_sorted, (self.waiting_key(i), i))

    def _n_waiting(self) -> int:
        return len(self.waiting) if self.fcfs else len(self.wait_sorted)

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
        self.fcfs = cfg.scheduling_policy == "fcfs"
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
        self.steps = self.preemptions = self.queries = self.hits = self.preempted_hits = 0
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
        self._seq = 0
        while self.done < n:
            self._arrivals()
            if not self.running and not self._n_waiting():
                if not self._idle():
                    break
                continue
            if self._decode_span():
                continue
            batch = _Batch(cfg.max_num_batched_tokens)
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

    # 3. schedule the running requests
    def _schedule_running(self, b: _Batch) -> None:
        """Running requests first, in admission order, each taking what it still needs of the budget."""
        if not self.running:
            return
        dec, comp, known, thr, cdiv = self.decoding, self.comp, self.known, self.cfg.long_prefill_token_threshold, \
            self._cdiv
        # The common case: every running request fits the budget and the free blocks.
        chunks = []
        total = len(dec)
        for i in self.prefill:
            nn = known[i] - comp[i]
            if thr and nn > thr:
                nn = thr
            chunks.append((i, nn))
            total += nn
        if total <= b.budget:
            new = dec.new_blocks(1) + sum(cdiv(comp[i] + nn) - cdiv(comp[i]) for i, nn in chunks)
            if new <= self.pool.num_free:
                self.pool.take(new)
                b.budget -= total
                b.group = len(dec) > 0
                b.decode_ctx = float(dec.context())
                self._price_chunks(b, chunks)
                return
        self._schedule_one_by_one(b)

    def _price_chunks(self, b: _Batch, chunks: list[tuple[int, int]]) -> None:
        """Prompt chunks scheduled: their attention pairs and context, and the shared-prefix blocks they complete."""
        cost, comp = self.cost, self.comp
        for i, nn in chunks:
            cc = comp[i]
            w = cost.window(cc)
            b.pairs += cost.chunk_pairs(nn, w)
            b.pctx += w
            self._extend_prefix(i, cc + nn)
        if chunks:
            b.uniform = False
            b.chunks = chunks

    def _ungroup(self) -> list[int]:
        """Every running request out of the decode group, one by one, in running order."""
        for i, c, ol in self.decoding.remove_all():
            self.comp[i], self.known[i], self.out_left[i] = c, c + 1, ol
        self.prefill = dict.fromkeys(self.running)
        return list(self.running)

    def _schedule_one_by_one(self, b: _Batch) -> None:
        """The running requests, one by one: some do not fit the budget, or their blocks do not fit the pool."""
        comp, known, thr, cost, pool = self.comp, self.known, self.cfg.long_prefill_token_threshold, self.cost, \
            self.pool
        run = self._ungroup()
        b.ungrouped = True
        bs = self.bs
        chunks = []  # each takes what the budget has left after those before it
        left = b.budget
        total_new = 0
        for i in run:
            c = comp[i]
            nn = known[i] - c
            if thr and nn > thr:
                nn = thr
            s = nn if nn <= left else (left if left > 0 else 0)
            left -= nn
            if s > 0:
                chunks.append((i, s))
                total_new += -(-(c + s) // bs) - -(-c // bs)
        if total_new <= pool.num_free:
            pool.take(total_new)
            b.budget -= sum(s for _, s in chunks)
            w = cost.window(1 << 60)
            decodes = [comp[i] for i, s in chunks if known[i] - comp[i] == 1]
            b.decode_ctx = float(sum(c + 1 if c + 1 < w else w for c in decodes))
            if len(decodes) < len(chunks):
                self._price_chunks(b, [(i, s) for i, s in chunks if known[i] - comp[i] != 1])
            b.chunks = chunks
            return
        # Allocate one by one, preempting from the tail when blocks run out.
        fcfs = self.fcfs
        w = cost.window(1 << 60)
        chunks = []
        idx = 0
        budget = b.budget
        decode_ctx = b.decode_ctx
        end = len(run)
        while idx < end and budget > 0:
            i = run[idx]
            cc = comp[i]
            full = nn = known[i] - cc
            if thr and nn > thr:
                nn = thr
            if nn > budget:
                nn = budget
            nb = -(-(cc + nn) // bs) - -(-cc // bs)
            victim_self = False
            while nb > pool.free_plain + pool.evictable:
                if fcfs:
                    v = run.pop()
                else:
                    v = max(run[idx:], key=lambda r: (self.victim_key(r), r))
                    run.remove(v)
                end -= 1
                self._preempt(v)
                if fcfs:
                    self.waiting.appendleft(v)
                else:
                    bisect.insort(self.wait_sorted, (self.waiting_key(v), v))
                self.preemptions += 1
                b.preempted = True
                if v == i:
                    victim_self = True
                    break
            if victim_self:
                break
            if nb:
                pool.take(nb)
            if full == 1 and nn == 1:
                decode_ctx += cc + 1 if cc + 1 < w else w  # the decode's context with its new token (`StepCost.window`)
            else:
                b.uniform = False
                b.pairs += cost.chunk_pairs(nn, cost.window(cc))
                b.pctx += cost.window(cc)
                self._extend_prefix(i, cc + nn)
            chunks.append((i, nn))
            budget -= nn
            idx += 1
        b.decode_ctx = decode_ctx
        b.budget = budget
        b.chunks = chunks

    # 4. admit waiting requests (never in a step that preempted)
    def _admit(self, b: _Batch) -> None:
        """Waiting requests join while the budget, ``max_num_seqs`` and the free blocks allow, in queue order."""
        cfg, pool, cost, bs = self.cfg, self.pool, self.cost, self.bs
        known, comp, fcfs, thr = self.known, self.comp, self.fcfs, cfg.long_prefill_token_threshold
        caching, chunked, max_seqs = cfg.enable_prefix_caching, cfg.enable_chunked_prefill, cfg.max_num_seqs
        waiting, wait_sorted, running, prefill, draining = self.waiting, self.wait_sorted, self.running, \
            self.prefill, self.draining
        was_preempted, group, pblocks = self.was_preempted, self.group, self.pblocks
        budget = b.budget
        slots = max_seqs - len(running) - len(draining)
        while budget > 0 and slots > 0:
            if fcfs:
                if not waiting:
                    break
                i = waiting[0]
            else:
                if not wait_sorted:
                    break
                i = wait_sorted[0][1]
            # Only a request with a shared prefix, or one coming back from a preemption, can hit the prefix cache.
            hit_possible = caching and ((pblocks[i] and group[i] >= 0) or was_preempted[i])
            hg, hp, touch = self._lookup(i) if hit_possible else (0, 0, 0)
            if caching:
                if not was_preempted[i]:
                    self.queries += known[i]
                    self.hits += hg * bs
                else:
                    self.preempted_hits += (hg + hp) * bs
            start = (hg + hp) * bs
            nn = known[i] - start
            if thr and nn > thr:
                nn = thr
            if not chunked and nn > budget:
                break
            if nn > budget:
                nn = budget
            if -(-known[i] // bs) - hg - hp + touch > pool.free_plain + pool.evictable:
                break
            if fcfs:
                waiting.popleft()
            else:
                wait_sorted.pop(0)
            g = group[i]
            if g >= 0 and pblocks[i] > 0:
                pool.acquire(g)
                self.in_group[i] = True
            if hp:
                got = pool.claim(self.ngroups + i)
                if got > hp:
                    pool.release(got - hp)
            elif was_preempted[i] and pool.cached_len(self.ngroups + i):
                pool.release(pool.claim(self.ngroups + i))
            self.shared[i] = hg
            self.chain_pos[i] = hg
            comp[i] = start
            pool.take(-(-(start + nn) // bs) - hg - hp)
            if pblocks[i]:
                self._extend_prefix(i, start + nn)
            w = cost.window(start)
            b.pairs += cost.chunk_pairs(nn, w)
            b.pctx += w
            running[i] = self._seq
            self._seq += 1
            prefill[i] = None
            b.chunks.append((i, nn))
            budget -= nn
            slots -= 1
            b.admitted += 1
        if b.admitted:
            b.uniform = False
        b.budget = budget

    def _nothing_scheduled(self, b: _Batch) -> bool:
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
    def _step(self, b: _Batch) -> None:
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

    def _regroup(self, ids: list[int]) -> None:
        """Running requests among ``ids`` whose prompt is done join the decode group."""
        comp, known, prefill, first, out_left, running = self.comp, self.known, self.prefill, self.first, \
            self.out_left, self.running
        joining = [(i, comp[i], out_left[i], running[i], first[i] == first[i]) for i in ids
                   if i in prefill and known[i] - comp[i] == 1]
        for i, *_ in joining:
            del prefill[i]
        if len(joining) > 1:
            self.decoding.add_many(joining)
        elif joining:
            self.decoding.add(*joining[0])

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

    # ---- the priority policy's two keys (overridable: a scheduling policy is a choice of them) ---------
    def waiting_key(self, i: int) -> float:
        """Where request ``i`` waits under the priority policy: smaller keys are admitted first."""
        return float(self.arrival[i])

    def victim_key(self, i: int) -> float:
        """Under the priority policy, the running request with the largest key is preempted first."""
        return float(self.arrival[i])

    def _preempt(self, v: int) -> None:
        """Request ``v`` gives its blocks back (its full ones stay cached) and will compute its tokens again."""
        self._release(v, True)
        self.comp[v] = 0
        self.was_preempted[v] = True
        del self.running[v]
        self.prefill.pop(v, None)
