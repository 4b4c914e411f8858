"""The engine loop, compiled: vLLM V1's engine core iteration by iteration over one trace (`engine_loop`).

One iteration is vLLM's (``vllm/v1/core/sched/scheduler.py`` 0.26, ``EngineCore.step_with_batch_queue``), each step
a function of its own:

1. **arrivals** (`arrivals`): requests that arrived before this step is scheduled join the waiting queue (under async
   scheduling one step later: vLLM schedules step N+1 as soon as step N is launched);
2. **a decode span** (`span_length`, `price.price_span`): when only decodes run and nothing could change the batch
   (no admission possible, no finish, no block shortage), the steps to the next finish or arrival are taken at once;
3. **schedule the running requests** (`schedule_running`), in admission order, each taking ``min(tokens it still
   needs, long_prefill_token_threshold, budget left)`` of ``max_num_batched_tokens``; when they do not all fit
   (budget or blocks), one by one, preempting from the tail (FCFS) or the largest victim key (priority), by recompute
   (`schedule_one_by_one`);
4. **admit** waiting requests (`admit`; never in a step that preempted) while fewer than ``max_num_seqs`` run and
   their whole known sequence fits the free blocks, after a prefix-cache lookup capped at ``num_tokens - 1``;
5. **price** the step (`price.step_time`), **advance** every scheduled request by its tokens (`advance`, the decode
   group by one), **finish** those that are done (`leave_finished`, `finish_requests`: their place and blocks freed a
   step later under async scheduling, ``drain``), and the prompts that are done join the decode group (`regroup`).

The block pool is `block_pool`'s arrays; the requests' state is per-request arrays (``comp``: tokens computed,
``known``: prompt plus tokens generated, ``out_left``: tokens still to generate); the running requests are ``run``
(admission order), split into the decode group and ``pre`` (prompts being computed, running order); the waiting
queue is a ring (FCFS) or a heap of (key, id) (priority: the same minimum as a sorted list, the pairs being unique).

Exactness: the float results are the Python cost model's to the last bit (the same operations in the same order, no
fastmath), which fixes the iteration structure: a span never jumps over an arrival.

`rsi_env.sim.engine.EngineSim` packs the arguments and reads the results back.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from rsi_env.sim.vllm.block_pool import (
    PS_EVICTABLE,
    PS_FAILED,
    PS_FREE,
    PS_OWNED,
    PS_SIZE,
    acquire,
    broken,
    cdiv,
    claim,
    extend_prefix,
    lookup,
    release,
    take,
)
from rsi_env.sim.vllm.decode_group import context, join, leave_finished, new_blocks, steps_to_finish, ungroup
from rsi_env.sim.vllm.jit import njit
from rsi_env.sim.vllm.price import C_MAX_GRAPH, P_IDLE, comm, linear, padded, price_span, step_time

__all__ = ["ST_DEADLOCK", "ST_DONE", "ST_INVARIANT", "ST_NO_BLOCKS", "engine_loop"]

# `engine_loop`'s status: done; no request can be scheduled and none runs; an allocation beyond the free blocks;
# the pool's invariant broken (``check``).
ST_DONE, ST_DEADLOCK, ST_NO_BLOCKS, ST_INVARIANT = 0, 3, 4, 5


@njit
def grow(rec_t, rec_i, need):
    """The step trace's arrays with room for ``need`` rows (doubling)."""
    cap = rec_t.shape[0]
    if need <= cap:
        return rec_t, rec_i
    while cap < need:
        cap *= 2
    nt = np.empty(cap)
    nt[:rec_t.shape[0]] = rec_t
    ni = np.empty((cap, 4), np.int64)
    ni[:rec_i.shape[0]] = rec_i
    return nt, ni


@njit
def release_all(drain, ndrain, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached, refs, prv,
                nxt, in_lru, S):
    """The requests that finished in the last step (``drain[:ndrain]``) free their blocks; returns 0 (none left)."""
    for d in range(ndrain):
        release(drain[d], False, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached, refs, prv,
                nxt, in_lru, S)
    return 0


@njit
def finish_requests(fin, nf, now, lag, drain, ndrain, done, issued, closed, arrival, order, round_trip, finish,
                    caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached, refs, prv, nxt, in_lru,
                    S):
    """Requests ``fin[:nf]`` generated their last token at ``now``: their place and blocks are freed (a step later under
    async scheduling: ``drain``); a closed-loop client sends its next request a front-end round trip later. Returns
    (draining, done, issued)."""
    n = arrival.shape[0]
    for x in range(nf):
        i = fin[x]
        finish[i] = now
        if lag:
            drain[ndrain] = i
            ndrain += 1
        else:
            release(i, False, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached, refs, prv,
                    nxt, in_lru, S)
        done += 1
        if closed and issued < n:
            arrival[order[issued]] = now + round_trip
            issued += 1
    return ndrain, done, issued


@njit
def drop_finished(run, nrun, finish):
    """The running requests less those finished, in order; returns how many run."""
    m = 0
    for r in range(nrun):
        i = run[r]
        if finish[i] != finish[i]:
            run[m] = i
            m += 1
    return m


@njit
def schedule_one_by_one(run, nrun, budget, thr, bs, WE, fcfs, keyed, wkey, vkey, arrival, comp, known, was_pre, wq, wh,
                        wc, wheap, preemptions, ch_i, ch_n, caching, ngroups, pblocks, group, shared, in_group,
                        chain_pos, ps, cached, refs, prv, nxt, in_lru, S):
    """The running requests one by one, in running order (``run[:nrun]``), each taking what it still needs of the
    ``budget`` (at most ``thr`` tokens of a prompt): when its blocks do not fit, the last running request (FCFS) or the
    largest (victim key, id) (priority) is preempted, by recompute, and goes back to the front of the waiting queue,
    until they fit or the request itself was the victim (vLLM's ``Scheduler.schedule``, running part).

    Fills ``ch_i``/``ch_n`` (request, tokens). Returns (running, scheduled, budget left, the decodes' context, uniform
    decode, prefill pairs, prefill context, whether it preempted, the FCFS ring's head and count, preemptions)."""
    n = known.shape[0]
    nch = 0
    decode_ctx = 0.0
    pairs = 0.0
    pctx = 0.0
    uniform = True
    preempted = False
    idx = 0
    end = nrun
    while idx < end and budget > 0:
        i = run[idx]
        cc = comp[i]
        full = known[i] - cc
        nn = full
        if thr and nn > thr:
            nn = thr
        if nn > budget:
            nn = budget
        nb = cdiv(cc + nn, bs) - cdiv(cc, bs)
        victim_self = False
        while nb > ps[PS_FREE] + ps[PS_EVICTABLE]:
            vpos = end - 1
            if not fcfs:  # the largest (victim_key, id) among run[idx:end]
                for r in range(idx, end):
                    a = run[r]
                    b2 = run[vpos]
                    ka = vkey[a] if keyed else arrival[a]
                    kb = vkey[b2] if keyed else arrival[b2]
                    if ka > kb or (ka == kb and a > b2):
                        vpos = r
            v = run[vpos]
            for r in range(vpos, end - 1):
                run[r] = run[r + 1]
            end -= 1
            release(v, True, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached, refs, prv, nxt,
                    in_lru, S)
            comp[v] = 0
            was_pre[v] = True
            if fcfs:
                wh = (wh - 1) % n
                wq[wh] = v
                wc += 1
            else:
                heapq.heappush(wheap, (wkey[v] if keyed else arrival[v], v))
            preemptions += 1
            preempted = True
            if v == i:
                victim_self = True
                break
        if victim_self:
            break
        if nb:
            take(nb, ps, cached, prv, nxt, in_lru, S)
        if full == 1 and nn == 1:
            decode_ctx += cc + 1 if cc + 1 < WE else WE
        else:
            uniform = False
            w = cc if cc < WE else WE
            pairs += nn * w + nn * (nn + 1) / 2.0
            pctx += w
            extend_prefix(i, cc + nn, bs, pblocks, chain_pos, in_group, group, shared, cached, ps)
        ch_i[nch] = i
        ch_n[nch] = nn
        nch += 1
        budget -= nn
        idx += 1
    return end, nch, budget, decode_ctx, uniform, pairs, pctx, preempted, wh, wc, preemptions


@njit
def admit(slots, budget, fcfs, wq, wh, wc, wheap, chunked, thr, bs, WE, caching, ngroups, known, comp, pblocks, group,
          was_pre, shared, chain_pos, in_group, run, nrun, pre, npre, seq, nseq, ch_i, ch_n, nch, pairs, pctx, queries,
          hits, pre_hits, lk, ps, cached, refs, prv, nxt, in_lru, S):
    """Waiting requests join the running ones, first in the queue first, while ``slots`` (places among
    ``max_num_seqs``) and ``budget`` last and the request's whole known sequence fits the free blocks after its
    prefix-cache hit (capped at its tokens less one); without chunked prefill a prompt that does not fit the budget
    left blocks the queue (vLLM's ``Scheduler.schedule``, waiting part). Counts the prefix-cache queries and hits.

    Appends to ``run``, ``pre`` and ``ch_i``/``ch_n``. Returns (running, prompts being computed, admissions so far,
    scheduled, budget left, admitted, prefill pairs, prefill context, the FCFS ring's head and count, prefix queries,
    hits, preempted requests' hits)."""
    n = known.shape[0]
    admitted = 0
    while budget > 0 and slots > 0:
        if fcfs:
            if wc == 0:
                break
            i = wq[wh]
        else:
            if not wheap:
                break
            i = wheap[0][1]
        gi = group[i]
        hit_possible = caching and ((pblocks[i] > 0 and gi >= 0) or was_pre[i])
        hg = 0
        hp = 0
        touch = 0
        if hit_possible:
            lookup(i, caching, bs, ngroups, known, pblocks, group, was_pre, cached, in_lru, lk)
            hg = lk[0]
            hp = lk[1]
            touch = lk[2]
        if caching:
            if not was_pre[i]:
                queries += known[i]
                hits += hg * bs
            else:
                pre_hits += (hg + hp) * bs
        start = (hg + hp) * bs
        nn = known[i] - start
        if thr and nn > thr:
            nn = thr
        if not chunked and nn > budget:
            break
        if nn > budget:
            nn = budget
        if cdiv(known[i], bs) - hg - hp + touch > ps[PS_FREE] + ps[PS_EVICTABLE]:
            break
        if fcfs:
            wh = (wh + 1) % n
            wc -= 1
        else:
            heapq.heappop(wheap)
        if gi >= 0 and pblocks[i] > 0:
            acquire(gi, ps, cached, refs, prv, nxt, in_lru)
            in_group[i] = True
        priv = ngroups + i
        if hp:
            got = claim(priv, ps, cached, prv, nxt, in_lru)
            if got > hp:
                ps[PS_FREE] += got - hp
                ps[PS_OWNED] -= got - hp
        elif was_pre[i] and cached[priv]:
            got = claim(priv, ps, cached, prv, nxt, in_lru)
            ps[PS_FREE] += got
            ps[PS_OWNED] -= got
        shared[i] = hg
        chain_pos[i] = hg
        comp[i] = start
        take(cdiv(start + nn, bs) - hg - hp, ps, cached, prv, nxt, in_lru, S)
        if pblocks[i]:
            extend_prefix(i, start + nn, bs, pblocks, chain_pos, in_group, group, shared, cached, ps)
        w = start if start < WE else WE
        pairs += nn * w + nn * (nn + 1) / 2.0
        pctx += w
        run[nrun] = i
        nrun += 1
        seq[i] = nseq
        nseq += 1
        pre[npre] = i
        npre += 1
        ch_i[nch] = i
        ch_n[nch] = nn
        nch += 1
        budget -= nn
        slots -= 1
        admitted += 1
    return nrun, npre, nseq, nch, budget, admitted, pairs, pctx, wh, wc, queries, hits, pre_hits


@njit
def schedule_running(run, nrun, pre, npre, max_tokens, thr, bs, W, WE, g, ndec, base_sum, n_nf, phase, heap, below, ws,
                     is_sat, is_dec, seq, base, out_base, comp, known, out_left, fcfs, keyed, wkey, vkey, arrival,
                     was_pre, wq, wh, wc, wheap, preemptions, ch_i, ch_n, caching, ngroups, pblocks, group, shared,
                     in_group, chain_pos, ps, cached, refs, prv, nxt, in_lru, S):
    """The running requests first, in admission order, each taking what it still needs of the ``max_tokens`` budget
    (at most ``thr`` tokens of a prompt). When all fit (budget and blocks), the decode group runs as one and the
    prompts being computed (``pre``) take their chunks; else the group is dissolved (`ungroup`) and, when the blocks
    do not fit either, the requests are scheduled one by one with preemption (`schedule_one_by_one`).

    Fills ``ch_i``/``ch_n`` (request, tokens scheduled one by one). Returns (budget left, whether the group runs,
    scheduled one by one, the decodes' context, prefill pairs, prefill context, uniform decode, whether it preempted,
    running, prompts being computed, group members, sum of their bases, requests without a first token in the group,
    the FCFS ring's head and count, preemptions)."""
    budget = max_tokens
    group_runs = False
    nch = 0
    decode_ctx = 0.0
    pairs = 0.0
    pctx = 0.0
    uniform = True
    preempted = False
    if nrun:
        total = ndec
        for x in range(npre):
            i = pre[x]
            nn = known[i] - comp[i]
            if thr and nn > thr:
                nn = thr
            ch_i[nch] = i
            ch_n[nch] = nn
            nch += 1
            total += nn
        fast = False
        if total <= budget:
            new = new_blocks(1, ndec, bs, g, phase)
            for c in range(nch):
                new += cdiv(comp[ch_i[c]] + ch_n[c], bs) - cdiv(comp[ch_i[c]], bs)
            if new <= ps[PS_FREE] + ps[PS_EVICTABLE]:
                fast = True
                take(new, ps, cached, prv, nxt, in_lru, S)
                budget -= total
                group_runs = ndec > 0
                decode_ctx = float(context(W, ndec, g, base_sum, below, ws, is_sat, is_dec, seq))
                for c in range(nch):
                    nn = ch_n[c]
                    i = ch_i[c]
                    cc = comp[i]
                    w = cc if cc < WE else WE
                    pairs += nn * w + nn * (nn + 1) / 2.0
                    pctx += w
                    extend_prefix(i, cc + nn, bs, pblocks, chain_pos, in_group, group, shared, cached, ps)
                if nch:
                    uniform = False
        if not fast:
            npre = ungroup(run, nrun, g, comp, known, out_left, base, out_base, is_dec, is_sat, pre, phase, heap,
                           below, ws)
            ndec = 0
            base_sum = 0
            n_nf = 0
            nch = 0
            left = budget
            total_new = 0
            for r in range(nrun):
                i = run[r]
                c = comp[i]
                nn = known[i] - c
                if thr and nn > thr:
                    nn = thr
                s = nn if nn <= left else (left if left > 0 else 0)
                left -= nn
                if s > 0:
                    ch_i[nch] = i
                    ch_n[nch] = s
                    nch += 1
                    total_new += cdiv(c + s, bs) - cdiv(c, bs)
            if total_new <= ps[PS_FREE] + ps[PS_EVICTABLE]:
                take(total_new, ps, cached, prv, nxt, in_lru, S)
                ssum = 0
                dsum = 0
                nd = 0
                for c in range(nch):
                    ssum += ch_n[c]
                    i = ch_i[c]
                    if known[i] - comp[i] == 1:
                        dsum += comp[i] + 1 if comp[i] + 1 < WE else WE
                        nd += 1
                budget -= ssum
                decode_ctx = float(dsum)
                if nd < nch:
                    for c in range(nch):
                        i = ch_i[c]
                        if known[i] - comp[i] != 1:
                            nn = ch_n[c]
                            cc = comp[i]
                            w = cc if cc < WE else WE
                            pairs += nn * w + nn * (nn + 1) / 2.0
                            pctx += w
                            extend_prefix(i, cc + nn, bs, pblocks, chain_pos, in_group, group, shared, cached, ps)
                    uniform = False
            else:  # one by one, preempting when blocks run out
                nrun, nch, budget, decode_ctx, uniform, pairs, pctx, preempted, wh, wc, preemptions = \
                    schedule_one_by_one(run, nrun, budget, thr, bs, WE, fcfs, keyed, wkey, vkey, arrival, comp,
                                        known, was_pre, wq, wh, wc, wheap, preemptions, ch_i, ch_n, caching,
                                        ngroups, pblocks, group, shared, in_group, chain_pos, ps, cached, refs,
                                        prv, nxt, in_lru, S)
                for r in range(nrun):
                    pre[r] = run[r]
                npre = nrun
    return (budget, group_runs, nch, decode_ctx, pairs, pctx, uniform, preempted, nrun, npre, ndec, base_sum, n_nf, wh,
            wc, preemptions)


@njit
def advance(ch_i, ch_n, nch, now, comp, known, out_left, first, fin):
    """The requests scheduled one by one (``ch_i``/``ch_n``: request, tokens) computed their tokens in the step that
    ended at ``now``: a request whose known tokens are all computed samples one (its first token, maybe its last).
    Those done are written to ``fin``. Returns (done, tokens sampled)."""
    nf = 0
    sampled = 0
    for c in range(nch):
        i = ch_i[c]
        cc = comp[i] + ch_n[c]
        comp[i] = cc
        if cc == known[i]:
            sampled += 1
            known[i] = cc + 1
            out_left[i] -= 1
            if first[i] != first[i]:
                first[i] = now
            if out_left[i] == 0:
                fin[nf] = i
                nf += 1
    return nf, sampled


@njit
def in_running_order(fin, nf, seq):
    """``fin[:nf]`` sorted by admission number (``seq``)."""
    keys = np.empty(nf, np.int64)
    for x in range(nf):
        keys[x] = seq[fin[x]]
    return fin[:nf][np.argsort(keys)]


@njit
def regroup(pre, npre, g, ndec, base_sum, n_nf, no_first, bs, W, finish, first, comp, known, out_left, seq, base,
            out_base, is_dec, phase, heap, below, ws, is_sat):
    """The prompts being computed (``pre[:npre]``) whose prompt is done join the decode group, in running order (those
    without a first token yet noted in ``no_first``: they sample it in the group's next step); finished ones leave.
    Returns (prompts still being computed, group members, sum of their bases, requests in ``no_first``)."""
    m = 0
    for x in range(npre):
        i = pre[x]
        if finish[i] == finish[i]:
            continue
        if known[i] - comp[i] == 1:
            ndec, base_sum = join(i, g, ndec, base_sum, bs, W, comp, out_left, seq, base, out_base, is_dec, phase, heap,
                                  below, ws, is_sat)
            if first[i] != first[i]:
                no_first[n_nf] = i
                n_nf += 1
        else:
            pre[m] = i
            m += 1
    return m, ndec, base_sum, n_nf


@njit
def arrivals(cutoff, next_arr, limit, arrival, order, fcfs, wq, wh, wc, wheap, keyed, wkey):
    """Requests that arrived by ``cutoff`` (of the first ``limit`` in arrival ``order``) join the waiting queue: the
    FCFS ring (``wq``, head ``wh``, ``wc`` of them) or, under the priority policy, the heap of (waiting key, id), the
    key the arrival time unless ``keyed``. Returns (the next arrival's place in ``order``, the ring's count)."""
    n = arrival.shape[0]
    while next_arr < limit and arrival[order[next_arr]] <= cutoff:
        i = order[next_arr]
        if fcfs:
            wq[(wh + wc) % n] = i
            wc += 1
        else:
            heapq.heappush(wheap, (wkey[i] if keyed else arrival[i], i))
        next_arr += 1
    return next_arr, wc


@njit
def span_length(nrun, n_wait, max_seqs, next_arr, limit, now, arrival, order, wq, wh, caching, bs, ngroups, known,
                pblocks, group, was_pre, cached, in_lru, lk, ps, g, ndec, phase, heap, is_dec, seq, out_base):
    """How many pure-decode steps nothing can interrupt (the running requests are all in the decode group, FCFS): 0
    when a waiting request could be admitted now; else the steps to the group's next finish, as many as the free
    blocks allow, and ``until``, the time from ``now`` to the next arrival if one could then be admitted (the span
    stops at the first step that ends at or after it; infinite otherwise). Returns (steps, until)."""
    admit_possible = n_wait > 0 or next_arr < limit
    if n_wait and nrun < max_seqs:
        w = wq[wh]
        lookup(w, caching, bs, ngroups, known, pblocks, group, was_pre, cached, in_lru, lk)
        admit_possible = cdiv(known[w], bs) - lk[0] - lk[1] + lk[2] <= ps[PS_FREE] + ps[PS_EVICTABLE]
    elif nrun >= max_seqs:
        admit_possible = False
    if admit_possible and n_wait:
        return 0, 0.0
    ks = steps_to_finish(g, heap, is_dec, seq, out_base)
    free = ps[PS_FREE] + ps[PS_EVICTABLE]
    if new_blocks(ks, ndec, bs, g, phase) > free:  # the most steps the free blocks allow
        lo, hi = 0, ks
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if new_blocks(mid, ndec, bs, g, phase) <= free:
                lo = mid
            else:
                hi = mid - 1
        ks = lo
        if ks < 1:
            return 0, 0.0
    until = arrival[order[next_arr]] - now if admit_possible else math.inf
    return ks, until


@njit
def engine_loop(arrival, order, prompt, out_len, group, pblocks, ngroups, k, bs, num_blocks, max_seqs, max_tokens, thr,
                chunked, caching, lag, fcfs, L, moe, sizes, W, closed, round_trip, record, keyed, wkey, vkey, check,
                out_f, out_i, prof):
    """One engine over one trace, until every request has finished (`rsi_env.sim.engine.EngineSim.run` calls it).

    Per request: ``arrival`` (s; a closed loop's written as its requests are sent), ``prompt``, ``out_len``,
    ``group``/``pblocks`` (prefix group, -1 none, and its shared prefix in blocks; ``ngroups`` groups); ``order``: the
    requests by arrival. The configuration: ``bs`` (block size), ``num_blocks`` (the pool, null block excluded),
    ``max_seqs``, ``max_tokens`` (the step's token budget), ``thr`` (long-prefill threshold, 0 none), ``chunked``,
    ``caching`` (prefix caching), ``lag`` (async scheduling), ``fcfs`` (else priority: by ``wkey``/``vkey`` if
    ``keyed``, else the arrival times), ``W`` (sliding window, 0 none), ``closed`` (closed-loop concurrency, 0 open)
    and ``round_trip`` (the front end's, closed loop). The cost model: ``k``, ``L``, ``moe`` (`price`'s constants),
    ``sizes`` (CUDA-graph capture sizes). ``record``: keep the step trace; ``check``: check the pool's invariant after
    every step and span.

    Writes ``out_f`` (busy time, running-time integral, KV usage peak), ``out_i`` (steps, tokens scheduled, prefix
    queries, status `ST_*`, preemptions, prefix hits, preempted requests' hits, step-trace rows) and adds the profile's
    parts to ``prof``. Returns (first token and finish times, known tokens, the step trace's time and integer columns,
    the pool's counts, cached lengths, references and LRU membership at the end)."""
    n = arrival.shape[0]
    issued = min(closed, n) if closed else 0
    comp = np.zeros(n, np.int64)
    known = prompt.copy()
    out_left = out_len.copy()
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    # the block pool
    S = ngroups + n
    ps = np.zeros(PS_SIZE, np.int64)
    ps[PS_FREE] = num_blocks
    cached = np.zeros(S + 1, np.int64)
    refs = np.zeros(S + 1, np.int64)
    prv = np.full(S + 1, S, np.int64)
    nxt = np.full(S + 1, S, np.int64)
    in_lru = np.zeros(S + 1, np.bool_)
    shared = np.zeros(n, np.int64)
    chain_pos = np.zeros(n, np.int64)
    in_group = np.zeros(n, np.bool_)
    was_pre = np.zeros(n, np.bool_)
    lk = np.zeros(3, np.int64)
    # decode group
    is_dec = np.zeros(n, np.bool_)
    base = np.zeros(n, np.int64)
    out_base = np.zeros(n, np.int64)
    seq = np.zeros(n, np.int64)
    g = 0
    ndec = 0
    base_sum = 0
    phase = np.zeros(bs, np.int64)
    # sliding window (W > 0): members below it by (-base, seq, id), and those that reached it
    below = [(np.int64(0), np.int64(0), np.int64(0))]
    below.pop()
    is_sat = np.zeros(n, np.bool_)
    ws = np.zeros(2, np.int64)
    WE = W if W else np.int64(1) << 60  # `StepCost.window(1 << 60)`
    heap = [(np.int64(0), np.int64(0), np.int64(0))]
    heap.pop()
    no_first = np.empty(n, np.int64)
    n_nf = 0
    # running (admission order), prompts being computed (running order), waiting (FCFS: a ring; priority: a heap)
    run = np.empty(n, np.int64)
    nrun = 0
    pre = np.empty(n, np.int64)
    npre = 0
    wq = np.empty(max(n, 1), np.int64)
    wh = 0
    wc = 0
    wheap = [(0.0, np.int64(0))]
    wheap.pop()
    drain = np.empty(n, np.int64)
    ndrain = 0
    ch_i = np.empty(n, np.int64)
    ch_n = np.empty(n, np.int64)
    fin = np.empty(n, np.int64)
    max_out = 1
    for x in range(n):
        if out_len[x] > max_out:
            max_out = out_len[x]
    kern_buf = np.empty(max_out + 2)
    cum_buf = np.empty(max_out + 2 if record else 1)
    # the step trace (`EngineSim._record`): t, and tokens, running, gen, CUDA-graph mode per row
    rec_t = np.empty(1024 if record else 1)
    rec_i = np.empty((rec_t.shape[0], 4), np.int64)
    nrec = 0
    maxg = k[C_MAX_GRAPH]
    nseq = 0
    next_arr = 0
    now = 0.0
    last_dt = 0.0
    done = 0
    steps = 0
    tokens_total = 0
    kv_peak = 0
    busy = 0.0
    run_int = 0.0
    queries = 0
    hits = 0
    pre_hits = 0
    preemptions = 0
    t_first = arrival[order[0]] if n else 0.0
    status = ST_DONE
    while done < n:
        if ps[PS_FAILED]:
            status = ST_NO_BLOCKS
            break
        # 1. arrivals
        limit = issued if closed else n
        next_arr, wc = arrivals(now - last_dt if lag else now, next_arr, limit, arrival, order, fcfs, wq, wh, wc, wheap,
                                keyed, wkey)
        n_wait = wc if fcfs else len(wheap)
        if nrun == 0 and n_wait == 0:  # nothing runs or waits: jump to the next arrival
            ndrain = release_all(drain, ndrain, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps,
                                 cached, refs, prv, nxt, in_lru, S)
            if next_arr >= limit:
                break
            t_arr = max(now, arrival[order[next_arr]])
            prof[P_IDLE] += t_arr - max(now, t_first)
            now = t_arr
            last_dt = 0.0
            continue
        # 2. a decode span nothing can interrupt (only decodes run, no admission possible meanwhile)
        if fcfs and nrun and npre == 0 and nrun <= max_tokens and not (ndrain and n_wait):
            ks, until = span_length(nrun, n_wait, max_seqs, next_arr, limit, now, arrival, order, wq, wh, caching, bs,
                                    ngroups, known, pblocks, group, was_pre, cached, in_lru, lk, ps, g, ndec, phase, heap,
                                    is_dec, seq, out_base)
            if ks:
                ctx0 = float(context(W, ndec, g, base_sum, below, ws, is_sat, is_dec, seq))
                kk, span, t0, last_dt = price_span(nrun, ks, until, ctx0, W, sizes, L, moe, k, kern_buf, cum_buf,
                                                   prof)
                if record:
                    rec_t, rec_i = grow(rec_t, rec_i, nrec + kk)
                    gm = 2 if nrun <= maxg else 0
                    for j in range(kk):
                        rec_t[nrec] = now + cum_buf[j]
                        rec_i[nrec, 0] = nrun
                        rec_i[nrec, 1] = nrun
                        rec_i[nrec, 2] = nrun
                        rec_i[nrec, 3] = gm
                        nrec += 1
                for x in range(n_nf):  # a request whose last prompt token was computed samples in the first step
                    first[no_first[x]] = now + t0
                n_nf = 0
                need = new_blocks(kk, ndec, bs, g, phase)
                need_first = new_blocks(1, ndec, bs, g, phase) if ndrain else 0
                take(need, ps, cached, prv, nxt, in_lru, S)
                g += kk
                now = now + span
                steps += kk
                tokens_total += kk * nrun
                busy += span
                run_int += span * nrun
                if ndrain:  # the span's first step was scheduled beside them; their blocks go now
                    kv_peak = max(kv_peak, num_blocks - ps[PS_FREE] - ps[PS_EVICTABLE] - need + need_first)
                    ndrain = release_all(drain, ndrain, caching, bs, ngroups, comp, shared, in_group, chain_pos,
                                         group, ps, cached, refs, prv, nxt, in_lru, S)
                kv_peak = max(kv_peak, num_blocks - ps[PS_FREE] - ps[PS_EVICTABLE])
                nf, ndec, base_sum = leave_finished(g, ndec, base_sum, bs, W, heap, is_dec, seq, base, out_base,
                                                    phase, is_sat, ws, comp, known, out_left, fin, 0)
                if nf:
                    ndrain, done, issued = finish_requests(fin, nf, now, lag, drain, ndrain, done, issued, closed,
                                                           arrival, order, round_trip, finish, caching, bs,
                                                           ngroups, comp, shared, in_group, chain_pos, group, ps,
                                                           cached, refs, prv, nxt, in_lru, S)
                    nrun = drop_finished(run, nrun, finish)
                if check and broken(num_blocks, ps, cached, refs, in_lru):
                    status = ST_INVARIANT
                    break
                continue
        # 3. the running requests
        (budget, group_runs, nch, decode_ctx, pairs, pctx, uniform, preempted, nrun, npre, ndec, base_sum, n_nf, wh, wc,
         preemptions) = schedule_running(
            run, nrun, pre, npre, max_tokens, thr, bs, W, WE, g, ndec, base_sum, n_nf, phase, heap, below, ws, is_sat,
            is_dec, seq, base, out_base, comp, known, out_left, fcfs, keyed, wkey, vkey, arrival, was_pre, wq, wh, wc,
            wheap, preemptions, ch_i, ch_n, caching, ngroups, pblocks, group, shared, in_group, chain_pos, ps, cached,
            refs, prv, nxt, in_lru, S)
        # 4. admissions (never in a step that preempted)
        admitted = 0
        if not preempted:
            nrun, npre, nseq, nch, budget, admitted, pairs, pctx, wh, wc, queries, hits, pre_hits = admit(
                max_seqs - nrun - ndrain, budget, fcfs, wq, wh, wc, wheap, chunked, thr, bs, WE, caching, ngroups,
                known, comp, pblocks, group, was_pre, shared, chain_pos, in_group, run, nrun, pre, npre, seq, nseq,
                ch_i, ch_n, nch, pairs, pctx, queries, hits, pre_hits, lk, ps, cached, refs, prv, nxt, in_lru, S)
        if admitted:
            uniform = False
        if group_runs or nch:
            # 5. price, advance, finish
            ntok = max_tokens - budget
            n_group = ndec if group_runs else 0
            pt = padded(ntok, sizes)
            dt = step_time(linear(pt, n_group + nch, L, moe), comm(pt, L), ntok, n_group + nch, nrun, decode_ctx,
                              pairs, pctx, uniform, admitted, k, prof)
            now = now + dt
            last_dt = dt
            steps += 1
            tokens_total += ntok
            busy += dt
            run_int += dt * nrun
            kv_peak = max(kv_peak, num_blocks - ps[PS_FREE] - ps[PS_EVICTABLE])
            nf, sampled = advance(ch_i, ch_n, nch, now, comp, known, out_left, first, fin)
            sampled += n_group
            ndrain = release_all(drain, ndrain, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps,
                                 cached, refs, prv, nxt, in_lru, S)
            if group_runs:
                for x in range(n_nf):
                    first[no_first[x]] = now
                n_nf = 0
                g += 1
                nf, ndec, base_sum = leave_finished(g, ndec, base_sum, bs, W, heap, is_dec, seq, base, out_base,
                                                    phase, is_sat, ws, comp, known, out_left, fin, nf)
            if nf:
                ndrain, done, issued = finish_requests(in_running_order(fin, nf, seq), nf, now, lag, drain, ndrain,
                                                       done, issued, closed, arrival, order, round_trip, finish,
                                                       caching, bs, ngroups, comp, shared, in_group, chain_pos, group,
                                                       ps, cached, refs, prv, nxt, in_lru, S)
                nrun = drop_finished(run, nrun, finish)
            if record:
                rec_t, rec_i = grow(rec_t, rec_i, nrec + 1)
                rec_t[nrec] = now
                rec_i[nrec, 0] = ntok
                rec_i[nrec, 1] = nrun
                rec_i[nrec, 2] = sampled
                rec_i[nrec, 3] = (2 if ntok <= maxg else 0) if uniform else (1 if ntok <= maxg else 0)
                nrec += 1
            if check and broken(num_blocks, ps, cached, refs, in_lru):
                status = ST_INVARIANT
                break
        # prompts done join the decode group, in running order
        npre, ndec, base_sum, n_nf = regroup(pre, npre, g, ndec, base_sum, n_nf, no_first, bs, W, finish, first, comp,
                                             known, out_left, seq, base, out_base, is_dec, phase, heap, below, ws,
                                             is_sat)
        if not group_runs and nch == 0:
            if ndrain:
                ndrain = release_all(drain, ndrain, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps,
                                     cached, refs, prv, nxt, in_lru, S)
                continue
            if next_arr < (issued if closed else n) and nrun == 0:
                t_arr = max(now, arrival[order[next_arr]])
                prof[P_IDLE] += t_arr - max(now, t_first)
                now = t_arr
                last_dt = 0.0
                continue
            status = ST_DEADLOCK
            break
    release_all(drain, ndrain, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached, refs,
                prv, nxt, in_lru, S)
    out_f[0], out_f[1], out_f[2] = busy, run_int, float(kv_peak) / max(num_blocks, 1)
    out_i[0], out_i[1], out_i[2], out_i[3] = steps, tokens_total, queries, status
    out_i[4], out_i[5], out_i[6], out_i[7] = preemptions, hits, pre_hits, nrec
    return first, finish, known, rec_t, rec_i, ps, cached, refs, in_lru

