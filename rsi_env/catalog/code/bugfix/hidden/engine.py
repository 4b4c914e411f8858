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

Speed: runs of pure-decode steps in which nothing can change the batch (no arrival that could be
admitted, no finish, no block shortage) are advanced in one vectorised span; their step times
differ only by the growing KV read, so one roofline evaluation prices all of them.

Profile: every priced step (or span) adds its cost terms to the run's `Profile` (`StepCost.step_time`), and every
wait for an arrival with nothing to run adds to ``idle``, so the parts sum to the engine's time from the first
arrival to the last output.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from rsi_env.engine.config import ResolvedConfig
from rsi_env.engine.profile import PARTS, Profile
from rsi_env.engine.workload import Trace
from rsi_env.sim.cost import StepCost
from rsi_env.tasks.bugfix.kv_cache import BlockPool

__all__ = ["STEP_COLUMNS", "EngineSim", "SimResult"]

STEP_COLUMNS = ("t", "tokens", "running", "gen", "mode")

_EMPTY = np.zeros(0, np.int64)


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


class EngineSim:
    """One engine, one trace. :meth:`run` simulates until every request has finished."""

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
        self.arrival = trace.arrival_s.astype(np.float64).copy()
        self.comp = np.zeros(n, np.int64)       # tokens whose KV is computed (scheduled)
        self.known = self.prompt.copy()         # prompt + tokens generated so far
        self.out_left = self.out_len.copy()     # tokens still to generate
        self.held = np.zeros(n, np.int64)       # blocks covering the request's computed tokens
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        groups = int(trace.prefix_group.max()) + 1 if n else 0
        self.ngroups = max(groups, 0)
        self.group = trace.prefix_group.astype(np.int64)
        pblocks = trace.prefix_len.astype(np.int64) // bs
        self.pblocks = pblocks if cfg.enable_prefix_caching else np.zeros(n, np.int64)
        # Python-side per-request prefix state (only touched at admission, prefill and release).
        self.shared = [0] * n     # blocks of the group chain this request references
        self.chain_pos = [0] * n  # prefix blocks this request has accounted for
        self.in_group = [False] * n
        self.was_preempted = [False] * n

    # ---- helpers -------------------------------------------------------------------------------------
    def _cdiv(self, x: int) -> int:
        return -(-x // self.bs)

    def _extend_prefix(self, i: int, upto_tokens: int) -> None:
        """Blocks of the shared prefix that request ``i`` now covers join the group's chain."""
        pb = int(self.pblocks[i])
        pos = self.chain_pos[i]
        if pos >= pb or not self.in_group[i]:
            return
        covered = min(pb, upto_tokens // self.bs)
        if covered <= pos:
            return
        g = int(self.group[i])
        if self.pool.cached_len(g) == pos:
            self.pool.extend(g, covered - pos)
            self.shared[i] += covered - pos
        self.chain_pos[i] = covered

    def _release(self, i: int, preempt: bool) -> None:
        """Free request ``i``'s blocks; after a preemption its full blocks stay cached for its return."""
        owned = int(self.held[i]) - self.shared[i]
        if preempt and self.cfg.enable_prefix_caching:
            full = max(int(self.comp[i]) // self.bs - self.shared[i], 0)
            full = min(full, owned)
            self.pool.park(self.ngroups + i, full)
            owned -= full
        self.pool.release(owned)
        if self.in_group[i]:
            self.pool.unacquire(int(self.group[i]))
            self.in_group[i] = False
        self.held[i] = 0
        self.shared[i] = 0
        self.chain_pos[i] = 0

    def _lookup(self, i: int) -> tuple[int, int, int]:
        """Prefix-cache hit of waiting request ``i``: (group blocks, private blocks, free blocks touched)."""
        if not self.cfg.enable_prefix_caching:
            return 0, 0, 0
        cap = (int(self.known[i]) - 1) // self.bs
        pb = int(self.pblocks[i])
        g = int(self.group[i])
        hg = min(self.pool.cached_len(g), pb, cap) if (g >= 0 and pb) else 0
        touch = self.pool.touch_cost(g, hg) if hg else 0
        hp = 0
        priv = self.ngroups + i
        if self.was_preempted[i] and hg == pb:
            hp = min(self.pool.cached_len(priv), cap - hg)
            touch += self.pool.touch_cost(priv, hp)
        return hg, hp, touch

    # ---- the loop -----------------------------------------------------------------------------------
    def run(self) -> SimResult:
        cfg, cost, pool, bs = self.cfg, self.cost, self.pool, self.bs
        n = self.n
        budget_max = cfg.max_num_batched_tokens
        max_seqs = cfg.max_num_seqs
        thr = cfg.long_prefill_token_threshold
        chunked = cfg.enable_chunked_prefill
        fcfs = cfg.scheduling_policy == "fcfs"
        closed = self.trace.closed_concurrency
        comp, known, out_left, held = self.comp, self.known, self.out_left, self.held
        waiting: deque[int] = deque()
        wait_sorted: list[tuple[float, int]] = []  # priority policy: (arrival, id)
        running: list[int] = []
        run_arr = np.zeros(0, np.int64)
        dirty = False
        now = 0.0
        next_arr = 0
        # A closed-loop client sends its next request when it has received the last one's final token:
        # the engine sees it a front-end round trip (out to the client, back in) after that token.
        round_trip = self.cost.cal.frontend_s
        if closed:
            issue = min(closed, n)
            self.arrival[:issue] = 0.0
            self.arrival[issue:] = np.inf
            order = list(range(n))
        else:
            order = list(np.argsort(self.arrival, kind="stable"))
        arrivals_sorted = self.arrival[order] if not closed else None
        issued = min(closed, n) if closed else 0
        done = 0
        steps = preemptions = queries = hits = preempted_hits = 0
        tokens_total = 0
        kv_peak = 0
        busy = run_int = 0.0
        prof = [0.0] * len(PARTS)  # seconds per profile part (PARTS order); idle is the last
        t_first = float(self.arrival[order[0]]) if n else 0.0  # the run's time starts at its first arrival
        usable = max(pool.num_blocks, 1)
        # The step trace, column by column (plain lists: a numpy array per step would cost more than the step).
        rec: dict[str, list[float]] = {k: [] for k in STEP_COLUMNS}

        def record(t: list[float], tokens: int, running_n: int, gen: int, uniform_decode: bool) -> None:
            k = len(t)
            rec["t"].extend(t)
            for key, v in (("tokens", tokens), ("running", running_n), ("gen", gen),
                           ("mode", cost.graph_mode(tokens, uniform_decode))):
                rec[key].extend([v] * k)

        def enqueue(i: int) -> None:
            if fcfs:
                waiting.append(i)
            else:
                bisect.insort(wait_sorted, (self.waiting_key(i), i))

        # With async scheduling vLLM schedules step N+1 as soon as step N is launched, so a request that
        # arrives while step N runs is first seen when step N+2 is scheduled.
        lag = cfg.async_scheduling
        # Requests that finished in the last step, their slots and blocks freed once the next step is scheduled.
        draining: list[int] = []
        last_dt = 0.0
        while done < n:
            # 1. arrivals
            cutoff = now - last_dt if lag else now
            if closed:
                while next_arr < issued and self.arrival[order[next_arr]] <= cutoff:
                    enqueue(order[next_arr])
                    next_arr += 1
            else:
                while next_arr < n and arrivals_sorted[next_arr] <= cutoff:  # type: ignore[index]
                    enqueue(order[next_arr])
                    next_arr += 1
            n_wait = len(waiting) if fcfs else len(wait_sorted)
            if not running and not n_wait:
                for i in draining:
                    self._release(i, False)
                draining.clear()
                if next_arr >= (issued if closed else n):
                    break
                t_arr = max(now, float(self.arrival[order[next_arr]]))
                prof[-1] += t_arr - max(now, t_first)
                now = t_arr
                last_dt = 0.0  # an idle engine schedules a request the moment it arrives
                continue
            if dirty:
                run_arr = np.fromiter(running, np.int64, len(running))
                dirty = False
            nrun = len(running)

            # 2. fast path: a span of pure-decode steps nothing can interrupt
            # (requests still draining keep a waiting one out of the next step only: then no span is taken)
            if nrun and fcfs and nrun <= budget_max and not (draining and n_wait):
                c = comp[run_arr]
                if int((known[run_arr] - c).max()) == 1:
                    admit_possible = n_wait > 0 or next_arr < (issued if closed else n)
                    if n_wait and nrun < max_seqs:
                        hg, hp, touch = self._lookup(waiting[0])
                        need_w = self._cdiv(int(known[waiting[0]])) - hg - hp + touch
                        admit_possible = need_w <= pool.num_free
                    elif nrun >= max_seqs:
                        admit_possible = False
                    ol = out_left[run_arr]
                    k = int(ol.min())
                    if not admit_possible or n_wait == 0:
                        h = held[run_arr]
                        hsum = int(h.sum())
                        def need_blocks(kk: int, c: np.ndarray = c, hsum: int = hsum) -> int:
                            return int(((c + kk + bs - 1) // bs).sum()) - hsum
                        if need_blocks(k) > pool.num_free:
                            lo, hi = 0, k
                            while lo < hi:
                                mid = (lo + hi + 1) // 2
                                if need_blocks(mid) <= pool.num_free:
                                    lo = mid
                                else:
                                    hi = mid - 1
                            k = lo
                        if k >= 1:
                            ctx0 = float(np.minimum(c + 1, cost.window(1 << 60)).sum())
                            times, terms = cost.decode_span(nrun, nrun, ctx0, k)
                            cum = np.cumsum(times)
                            if admit_possible and not n_wait:
                                nxt = float(self.arrival[order[next_arr]])
                                k_arr = int(np.searchsorted(cum, nxt - now)) + 1
                                if k_arr < k:
                                    k = k_arr
                            span = float(cum[k - 1])
                            cost.add_span_parts(prof, terms, k)
                            last_dt = float(times[k - 1])
                            record((now + cum[:k]).tolist(), nrun, nrun, nrun, True)
                            # A request whose last prompt token is computed in the span's first step
                            # samples its first token then.
                            fresh = run_arr[np.isnan(self.first[run_arr])]
                            if fresh.size:
                                self.first[fresh] = now + float(cum[0])
                            newc = c + k
                            newh = (newc + bs - 1) // bs
                            pool.take(int(newh.sum()) - hsum)
                            comp[run_arr] = newc
                            known[run_arr] += k
                            held[run_arr] = newh
                            out_left[run_arr] = ol - k
                            now += span
                            steps += k
                            tokens_total += k * nrun
                            busy += span
                            run_int += span * nrun
                            if draining:  # the span's first step was scheduled beside them; their blocks go now
                                kv_peak = max(kv_peak, pool.used - (int(newh.sum()) - hsum)
                                              + int(((c + bs) // bs).sum()) - hsum)
                                for i in draining:
                                    self._release(i, False)
                                draining.clear()
                            kv_peak = max(kv_peak, pool.used)
                            fin = run_arr[ol == k]
                            if fin.size:
                                for i in fin.tolist():
                                    self.finish[i] = now
                                    if lag:
                                        draining.append(i)
                                    else:
                                        self._release(i, False)
                                    running.remove(i)
                                    done += 1
                                    if closed and issued < n:
                                        self.arrival[order[issued]] = now + round_trip
                                        issued += 1
                                dirty = True
                            if self.check:
                                pool.check()
                            continue

            # 3. schedule the running requests
            sched_ids: list[int] = []  # scheduled one by one (slow path, admissions)
            sched_n: list[int] = []
            sched_arr = _EMPTY  # scheduled in one vectorised block (the running requests)
            sched_n_arr = _EMPTY
            budget = budget_max
            preempted_now = False
            decode_ctx = 0.0
            pairs = 0.0
            pctx = 0.0
            uniform = True
            if nrun:
                c = comp[run_arr]
                full_need = known[run_arr] - c  # 1 for a decode, more for a prompt (chunk) still to compute
                need = np.minimum(full_need, thr) if thr else full_need
                csum = np.cumsum(need)
                everyone = int(csum[-1]) <= budget  # the common case: every running request fits the budget
                sched = need if everyone else np.clip(budget - (csum - need), 0, need)
                h = held[run_arr]
                after = (c + sched + bs - 1) // bs
                newb = after - h if everyone else np.where(sched > 0, np.maximum(after - h, 0), 0)
                total_new = int(newb.sum())
                if total_new <= pool.num_free:
                    pool.take(total_new)
                    if everyone:
                        held[run_arr] = after
                        ids, ns, cs, fn = run_arr, sched, c, full_need
                    else:
                        mask = sched > 0
                        held[run_arr] = np.where(mask, np.maximum(after, h), h)
                        ids, ns, cs, fn = run_arr[mask], sched[mask], c[mask], full_need[mask]
                    budget -= int(csum[-1]) if everyone else int(ns.sum())
                    is_dec = fn == 1
                    n_dec = int(is_dec.sum())
                    if n_dec == len(ids):
                        decode_ctx = float(cs.sum()) + n_dec
                        if cost.has_window:
                            decode_ctx = float(np.minimum(cs + 1, cost.window(1 << 60)).sum())
                    else:
                        decode_ctx = float(np.minimum(cs[is_dec] + 1, cost.window(1 << 60)).sum())
                        uniform = False
                        for j in np.nonzero(~is_dec)[0].tolist():
                            i, nn, cc = int(ids[j]), int(ns[j]), int(cs[j])
                            pairs += cost.chunk_pairs(nn, cost.window(cc))
                            pctx += cost.window(cc)
                            self._extend_prefix(i, cc + nn)
                    sched_arr = ids
                    sched_n_arr = ns
                else:
                    # Slow path: allocate one by one, preempting from the tail when blocks run out.
                    idx = 0
                    while idx < len(running) and budget > 0:
                        i = running[idx]
                        nn = min(int(known[i] - comp[i]), thr or (1 << 62), budget)
                        nb = max(self._cdiv(int(comp[i]) + nn) - int(held[i]), 0)
                        victim_self = False
                        while nb > pool.num_free:
                            if fcfs:
                                v = running[-1]
                            else:
                                tail = running[idx:]
                                v = max(tail, key=lambda r: (self.victim_key(r), r))
                            self._preempt(v, running)
                            if fcfs:
                                waiting.appendleft(v)
                            else:
                                bisect.insort(wait_sorted, (self.waiting_key(v), v))
                            preemptions += 1
                            preempted_now = True
                            if v == i:
                                victim_self = True
                                break
                        if victim_self:
                            break
                        pool.take(nb)
                        held[i] += nb
                        cc = int(comp[i])
                        if known[i] - cc == 1 and nn == 1:
                            decode_ctx += cost.window(cc + 1)
                        else:
                            uniform = False
                            pairs += cost.chunk_pairs(nn, cost.window(cc))
                            pctx += cost.window(cc)
                            self._extend_prefix(i, cc + nn)
                        sched_ids.append(i)
                        sched_n.append(nn)
                        budget -= nn
                        idx += 1
                    dirty = True

            # 4. admit waiting requests (never in a step that preempted)
            admitted = 0
            if not preempted_now:
                while budget > 0 and len(running) + len(draining) < max_seqs:
                    if fcfs:
                        if not waiting:
                            break
                        i = waiting[0]
                    else:
                        if not wait_sorted:
                            break
                        i = wait_sorted[0][1]
                    hg, hp, touch = self._lookup(i)
                    if not self.was_preempted[i] and cfg.enable_prefix_caching:
                        queries += int(known[i])
                        hits += hg * bs
                    elif cfg.enable_prefix_caching:
                        preempted_hits += (hg + hp) * bs
                    start = (hg + hp) * bs
                    nn = int(known[i]) - start
                    if thr:
                        nn = min(nn, thr)
                    if not chunked and nn > budget:
                        break
                    nn = min(nn, budget)
                    seq_need = self._cdiv(int(known[i])) - hg - hp + touch
                    if seq_need > pool.num_free:
                        break
                    if fcfs:
                        waiting.popleft()
                    else:
                        wait_sorted.pop(0)
                    g = int(self.group[i])
                    if g >= 0 and self.pblocks[i] > 0:
                        pool.acquire(g)
                        self.in_group[i] = True
                    priv = self.ngroups + i
                    if hp:
                        got = pool.claim(priv)
                        if got > hp:
                            pool.release(got - hp)
                    elif self.was_preempted[i] and pool.cached_len(priv):
                        pool.release(pool.claim(priv))
                    self.shared[i] = hg
                    self.chain_pos[i] = hg
                    comp[i] = start
                    nb = self._cdiv(start + nn) - hg - hp
                    pool.take(nb)
                    held[i] = hg + hp + nb
                    self._extend_prefix(i, start + nn)
                    pairs += cost.chunk_pairs(nn, cost.window(start))
                    pctx += cost.window(start)
                    uniform = False
                    running.append(i)
                    dirty = True
                    sched_ids.append(i)
                    sched_n.append(nn)
                    budget -= nn
                    admitted += 1

            n_sched = len(sched_ids) + len(sched_arr)
            if not n_sched and draining:
                for i in draining:
                    self._release(i, False)
                draining.clear()
                continue
            if not n_sched:
                # Nothing fits (every block is taken by requests that cannot advance): wait for arrivals.
                if next_arr < (issued if closed else n) and not running:
                    t_arr = max(now, float(self.arrival[order[next_arr]]))
                    prof[-1] += t_arr - max(now, t_first)
                    now = t_arr
                    last_dt = 0.0
                    continue
                raise RuntimeError("scheduler deadlock: no request can be scheduled and none is running")

            # 5. price the step and advance it
            ntok = int(budget_max - budget)
            dt = cost.step_time(ntok, n_sched, len(running), decode_ctx, pairs, pctx, uniform, admitted, prof)
            now += dt
            last_dt = dt
            steps += 1
            tokens_total += ntok
            busy += dt
            run_int += dt * len(running)
            kv_peak = max(kv_peak, pool.used)
            if sched_ids:
                ids_a = np.concatenate((sched_arr, np.asarray(sched_ids, np.int64)))
                n_a = np.concatenate((sched_n_arr, np.asarray(sched_n, np.int64)))
            else:
                ids_a, n_a = sched_arr, sched_n_arr
            comp[ids_a] += n_a
            for i in draining:
                self._release(i, False)
            draining.clear()
            sampled = ids_a[comp[ids_a] == known[ids_a]]
            if sampled.size:
                known[sampled] += 1
                out_left[sampled] -= 1
                firsts = sampled[np.isnan(self.first[sampled])]
                self.first[firsts] = now
                fin = sampled[out_left[sampled] == 0]
                for i in fin.tolist():
                    self.finish[i] = now
                    if lag:
                        draining.append(i)
                    else:
                        self._release(i, False)
                    running.remove(i)
                    dirty = True
                    done += 1
                    if closed and issued < n:
                        self.arrival[order[issued]] = now + round_trip
                        issued += 1
            record([now], ntok, len(running), int(sampled.size), uniform)
            if self.check:
                pool.check()

        for i in draining:
            self._release(i, False)
        return SimResult(
            arrival=self.arrival, first_token=self.first, finish=self.finish, prompt_len=self.prompt,
            output_len=self.out_len, generated=self.known - self.prompt, num_steps=steps,
            num_preemptions=preemptions, prefix_queries=queries,
            prefix_hits=hits, kv_usage_peak=kv_peak / usable, busy_time=busy, running_time_integral=run_int,
            tokens_scheduled=tokens_total, preempted_prefix_hits=preempted_hits,
            steps={k: np.asarray(v, np.float64 if k == "t" else np.int64) for k, v in rec.items()},
            profile=self._profile(prof, busy),
        )

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

    def _preempt(self, v: int, running: list[int]) -> None:
        self._release(v, True)
        self.comp[v] = 0
        self.was_preempted[v] = True
        running.remove(v)

