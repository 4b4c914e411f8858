"""The simulated engine's scheduler: who runs in a step, as ``vllm/v1/core/sched/scheduler.py`` (0.26) decides it.

Running requests first, in admission order, each taking ``min(tokens it still needs, long_prefill_token_threshold,
budget left)`` of the ``max_num_batched_tokens`` budget; a running request whose blocks cannot be allocated preempts
from the tail (FCFS) or the largest `Scheduler.victim_key` (priority), by recompute, and the victim goes back to the
front of the waiting queue; only in steps without a preemption are waiting requests admitted, while fewer than
``max_num_seqs`` run and their whole known sequence fits in the free blocks, after a prefix-cache lookup capped at
``num_tokens - 1``. Without chunked prefill a prompt that does not fit the budget left blocks the queue.

The running requests in their decode phase are one `DecodeGroup` (one token each per step, sums kept as they join
and leave); the others (prompts still being computed) are kept one by one, in running order. A step whose running
requests do not all fit (budget or blocks) takes them one by one (`Scheduler._ungroup`) and puts the group back
together after it. `rsi_env.sim.engine.EngineSim` runs the loop around this: arrivals, spans, pricing, finishing.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

import numpy as np

from rsi_env.engine.config import ResolvedConfig
from rsi_env.engine.workload import Trace
from rsi_env.sim.cost import StepCost
from rsi_env.sim.decoders import DecodeGroup
from rsi_env.sim.kv_cache import BlockPool

__all__ = ["Scheduler", "StepBatch"]


class StepBatch:
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
        self.ungrouped = False  # the running requests were scheduled one by one (`Scheduler._ungroup`)


class Scheduler:
    """One engine's requests and KV cache, and the scheduling decisions of a step (`EngineSim` runs the steps)."""

    def __init__(self, cfg: ResolvedConfig, cost: StepCost, trace: Trace, num_gpu_blocks: int,
                 check_invariants: bool = False) -> None:
        self.cfg = cfg
        self.cost = cost
        self.trace = trace
        n = len(trace)
        self.n = n
        bs = cfg.block_size
        self.bs = bs
        self.pool = BlockPool(max(num_gpu_blocks - 1, 0))  # block 0 is vLLM's null block
        self.check = check_invariants
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
        self.fcfs = cfg.scheduling_policy == "fcfs"
        self.preemptions = self.queries = self.hits = self.preempted_hits = 0  # vLLM's counters
        self._seq = 0  # admissions so far: the next one's place in the running order

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

    # 3. schedule the running requests
    def _schedule_running(self, b: StepBatch) -> None:
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

    def _price_chunks(self, b: StepBatch, chunks: list[tuple[int, int]]) -> None:
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

    def _schedule_one_by_one(self, b: StepBatch) -> None:
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
    def _admit(self, b: StepBatch) -> None:
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

    def _preempt(self, v: int) -> None:
        """Request ``v`` gives its blocks back (its full ones stay cached) and will compute its tokens again."""
        self._release(v, True)
        self.comp[v] = 0
        self.was_preempted[v] = True
        del self.running[v]
        self.prefill.pop(v, None)

    # ---- the priority policy's two keys (overridable: a scheduling policy is a choice of them) ---------
    def waiting_key(self, i: int) -> float:
        """Where request ``i`` waits under the priority policy: smaller keys are admitted first."""
        return float(self.arrival[i])

    def victim_key(self, i: int) -> float:
        """Under the priority policy, the running request with the largest key is preempted first."""
        return float(self.arrival[i])
