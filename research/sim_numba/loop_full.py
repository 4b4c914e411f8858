"""`loop_group.py` widened toward the whole engine: preemption, the block pool's chains, shared prefixes, spans
outside a CUDA graph, the priority policy, MoE and unsorted capture sizes.

What it adds to `loop_group`, each as `rsi_env/sim` does it, in its order:

- the block pool (`rsi_env/sim/kv_cache.py`) as arrays: free plain blocks and evictable ones, per chain (a prefix
  group ``g``, or ``ngroups + i`` for request ``i``'s own blocks after a preemption) its cached length and references,
  and the LRU order of the unreferenced chains as a doubly linked list (sentinel ``S``; head = least recently freed);
  ``take`` evicts from the head, a chain from its tail (a count);
- `Scheduler._schedule_one_by_one` with preemption (FCFS: from the tail; priority: the largest (arrival, id)), the
  victim's full blocks parked as its private chain, claimed back on its return;
- shared prefixes: `Scheduler._lookup`, `_extend_prefix`, acquire/unacquire, the hit counters;
- a decode span outside a CUDA graph: the launch waits summed as numpy's pairwise sum does (`_pairwise`);
- the priority policy, with vLLM's default keys (arrival time: `Scheduler.waiting_key`/`victim_key`) or a
  scheduling policy's static keys passed in as arrays (`PolicyEngineSim`'s), the waiting queue a heap of (key, id)
  (the same minimum as the Python engine's sorted list: the pairs are unique);
- MoE's `_linear` (``(1 - k/e) ** tokens`` as a float power, libm's ``pow`` as CPython's);
- capture sizes in any order (numpy's binary search, as `StepCost.padded` runs ``np.searchsorted`` on them);
- sliding windows: the decode group's below-window heap (`DecodeGroup.context`), `StepCost.window` wherever the
  Python engine applies it, a span's context capped at the batch times the window and its KV part as the pairwise sum
  of its kernels (`StepCost.add_span_parts`).

- the step trace (`record=True`: `EngineSim._record`'s rows, in arrays that double as they fill);
- invariant checks (`check=True`: `BlockPool.check`'s conditions after each step and span, status 5 if broken).

Not covered: an `EngineSim` subclass as such (a policy's static keys can be passed in, ``keys=``), SGLang's prefill
capture sizes (`reason` refuses them).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np
from kernels import _combine, consts_of, step_time_nb
from loop import _cdiv, _comm, _roof, linear_consts
from loop_group import _new_blocks
from numba import njit

__all__ = ["reason", "run_compiled"]

_W, _COMM, _KV, _LAUNCH, _IDLE = 0, 3, 2, 5, 6


def reason(cfg: Any, cost: Any, trace: Any) -> str | None:
    """Why `run_compiled` does not cover a run (None: it does)."""
    if cost.prefill_graph_sizes is not None:
        return "prefill capture sizes"
    if cfg.scheduling_policy not in ("fcfs", "priority"):
        return f"policy {cfg.scheduling_policy}"
    return None


# ---- numpy's pairwise sum (`pairwise_sum_DOUBLE`, numpy/_core/src/umath/loops_utils.h.src) ----------------------
@njit(cache=True, fastmath=False)
def _pw_leaf(a, lo, n):  # type: ignore[no-untyped-def]
    """numpy's `pairwise_sum` on at most 128 elements: sequential below 8, else 8 accumulators."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    m = n - n % 8
    while i < m:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True, fastmath=False)
def _pairwise(a, lo, n):  # type: ignore[no-untyped-def]
    """``a[lo:lo + n].sum()`` as numpy adds it (`pairwise_sum_DOUBLE`): halves (the first a multiple of 8) summed
    apart and added, down to blocks of 128. Its recursion walked with an explicit stack (numba's cache does not
    reload a recursive function: the process crashed)."""
    if n <= 128:
        return _pw_leaf(a, lo, n)
    f_lo = np.empty(64, np.int64)
    f_n = np.empty(64, np.int64)
    f_state = np.zeros(64, np.int64)
    f_left = np.zeros(64)
    sp = 0
    f_lo[0] = lo
    f_n[0] = n
    f_state[0] = 0
    ret = 0.0
    have = False
    while True:
        if have:
            if f_state[sp] == 0:  # the left half's sum: now the right half
                f_left[sp] = ret
                f_state[sp] = 1
                have = False
                h = f_n[sp] // 2
                h -= h % 8
                sp += 1
                f_lo[sp] = f_lo[sp - 1] + h
                f_n[sp] = f_n[sp - 1] - h
                f_state[sp] = 0
            else:
                ret = f_left[sp] + ret
                sp -= 1
                if sp < 0:
                    return ret
            continue
        if f_n[sp] <= 128:
            ret = _pw_leaf(a, f_lo[sp], f_n[sp])
            sp -= 1
            have = True
            if sp < 0:
                return ret
            continue
        h = f_n[sp] // 2
        h -= h % 8
        sp += 1
        f_lo[sp] = f_lo[sp - 1]
        f_n[sp] = h
        f_state[sp] = 0


# ---- the linear layers (dense and MoE), numpy's searchsorted ---------------------------------------------------
@njit(cache=True, fastmath=False)
def _lin(tp_, rows, L, moe):  # type: ignore[no-untyped-def]
    """`StepCost._linear`; ``moe``: [is_moe, experts, experts per token, MoE layers, expert bytes]."""
    w_bytes = L[0]
    if moe[0] != 0.0:
        e = moe[1]
        kk = moe[2]
        active = e * (1.0 - (1.0 - kk / e) ** float(tp_))
        w_bytes += moe[3] * active * moe[4]
    rate = L[1] * tp_ / (tp_ + L[2])
    lm_rate = L[1] * rows / (rows + L[2])
    t = _roof(L[5] * tp_, rate, w_bytes, L[3], L[4])
    return t + _roof(L[6] * rows, lm_rate, L[7], L[3], L[4])


@njit(cache=True, fastmath=False)
def _padded(t, sizes):  # type: ignore[no-untyped-def]
    """`StepCost.padded`: numpy's left binary search (`binsearch<side::left>`), also on sizes in the user's order."""
    n = sizes.shape[0]
    if n and t <= sizes[n - 1]:
        lo = 0
        hi = n
        while lo < hi:
            mid = lo + ((hi - lo) >> 1)
            if sizes[mid] < t:
                lo = mid + 1
            else:
                hi = mid
        return sizes[lo]
    return t


# ---- the block pool (`BlockPool`) --------------------------------------------------------------------------------
# ps: [free_plain, evictable, a take beyond the free blocks, owned]; per chain: cached, refs, in_lru, prv/nxt
# (index S the list's sentinel).
@njit(cache=True, fastmath=False)
def _lru_unlink(c, prv, nxt, in_lru):  # type: ignore[no-untyped-def]
    p = prv[c]
    q = nxt[c]
    nxt[p] = q
    prv[q] = p
    in_lru[c] = False


@njit(cache=True, fastmath=False)
def _lru_append(c, prv, nxt, in_lru, S):  # type: ignore[no-untyped-def]
    t = prv[S]
    nxt[t] = c
    prv[c] = t
    nxt[c] = S
    prv[S] = c
    in_lru[c] = True


@njit(cache=True, fastmath=False)
def _take(n, ps, cached, prv, nxt, in_lru, S):  # type: ignore[no-untyped-def]
    if n <= 0:
        return
    if n > ps[0] + ps[1]:  # `BlockPool.take` raises: the run stops (status 4), the Python engine reports it
        ps[2] = 1
        return
    ps[3] += n
    use = min(n, ps[0])
    ps[0] -= use
    n -= use
    while n:
        c = nxt[S]
        have = cached[c]
        k = min(n, have)
        cached[c] = have - k
        ps[1] -= k
        n -= k
        if have == k:
            _lru_unlink(c, prv, nxt, in_lru)


@njit(cache=True, fastmath=False)
def _acquire(c, ps, cached, refs, prv, nxt, in_lru):  # type: ignore[no-untyped-def]
    if refs[c] == 0 and in_lru[c]:
        _lru_unlink(c, prv, nxt, in_lru)
        ps[1] -= cached[c]
    refs[c] += 1


@njit(cache=True, fastmath=False)
def _unacquire(c, ps, cached, refs, prv, nxt, in_lru, S):  # type: ignore[no-untyped-def]
    refs[c] -= 1
    if refs[c]:
        return
    if cached[c]:
        if not in_lru[c]:
            _lru_append(c, prv, nxt, in_lru, S)
        ps[1] += cached[c]


@njit(cache=True, fastmath=False)
def _claim(c, ps, cached, prv, nxt, in_lru):  # type: ignore[no-untyped-def]
    n = cached[c]
    cached[c] = 0
    ps[3] += n
    if in_lru[c]:
        _lru_unlink(c, prv, nxt, in_lru)
        ps[1] -= n
    return n


@njit(cache=True, fastmath=False)
def _park(c, n, ps, cached, prv, nxt, in_lru, S):  # type: ignore[no-untyped-def]
    if n <= 0:
        return
    cached[c] += n
    ps[3] -= n
    if in_lru[c]:
        _lru_unlink(c, prv, nxt, in_lru)
    _lru_append(c, prv, nxt, in_lru, S)
    ps[1] += n


@njit(cache=True, fastmath=False)
def _check(num_blocks, ps, cached, refs, in_lru):  # type: ignore[no-untyped-def]
    """`BlockPool.check`: True when it would raise."""
    held = 0
    lru = 0
    for c in range(cached.shape[0]):
        if refs[c] > 0:
            held += cached[c]
        if in_lru[c]:
            lru += cached[c]
    if lru != ps[1] or ps[0] < 0 or ps[1] < 0 or ps[3] < 0:
        return True
    return ps[0] + ps[1] + ps[3] + held != num_blocks


@njit(cache=True, fastmath=False)
def _release(i, preempt, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached, refs, prv,
             nxt, in_lru, S):  # type: ignore[no-untyped-def]
    """`Scheduler._release`."""
    owned = _cdiv(comp[i], bs) - shared[i]
    if preempt and caching:
        full = max(comp[i] // bs - shared[i], 0)
        full = min(full, owned)
        _park(ngroups + i, full, ps, cached, prv, nxt, in_lru, S)
        owned -= full
    ps[0] += owned
    ps[3] -= owned
    if in_group[i]:
        _unacquire(group[i], ps, cached, refs, prv, nxt, in_lru, S)
        in_group[i] = False
    shared[i] = 0
    chain_pos[i] = 0


@njit(cache=True, fastmath=False)
def _extend_prefix(i, upto, bs, pblocks, chain_pos, in_group, group, shared, cached, ps):  # type: ignore[no-untyped-def]
    """`Scheduler._extend_prefix`."""
    pb = pblocks[i]
    pos = chain_pos[i]
    if pos >= pb or not in_group[i]:
        return
    covered = min(pb, upto // bs)
    if covered <= pos:
        return
    g = group[i]
    if cached[g] == pos:
        cached[g] += covered - pos
        ps[3] -= covered - pos
        shared[i] += covered - pos
    chain_pos[i] = covered


@njit(cache=True, fastmath=False)
def _lookup(i, caching, bs, ngroups, known, pblocks, group, was_preempted, cached, in_lru, out3):  # type: ignore[no-untyped-def]
    """`Scheduler._lookup` into ``out3``: (group blocks, private blocks, free blocks touched)."""
    out3[0] = 0
    out3[1] = 0
    out3[2] = 0
    if not caching:
        return
    cap = (known[i] - 1) // bs
    pb = pblocks[i]
    g = group[i]
    hg = min(cached[g], pb, cap) if (g >= 0 and pb > 0) else 0
    touch = hg if (hg > 0 and in_lru[g]) else 0
    hp = 0
    priv = ngroups + i
    if was_preempted[i] and hg == pb:
        hp = min(cached[priv], cap - hg)
        if hp > 0 and in_lru[priv]:
            touch += hp
    out3[0] = hg
    out3[1] = hp
    out3[2] = touch


@njit(cache=True, fastmath=False)
def _grow(rec_t, rec_i, need):  # type: ignore[no-untyped-def]
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


@njit(cache=True, fastmath=False)
def _context(W, ndec, g, base_sum, below, ws, is_sat, is_dec, seq):  # type: ignore[no-untyped-def]
    """`DecodeGroup.context`: with a window ``W``, members whose context reached it leave the below-window heap
    (largest base first) for the saturated ones. ``ws``: [sum of the bases below the window, saturated members]."""
    if W == 0:
        return base_sum + ndec * (g + 1)
    while below:
        nb, sq, i = below[0]
        if not is_dec[i] or seq[i] != sq or is_sat[i]:  # left the group since
            heapq.heappop(below)
            continue
        if -nb + g + 1 < W:
            break
        heapq.heappop(below)
        is_sat[i] = True
        ws[1] += 1
        ws[0] -= -nb
    return ws[0] + (ndec - ws[1]) * (g + 1) + ws[1] * W


@njit(cache=True, fastmath=False)
def _loop(arrival, order, prompt, out_len, group, pblocks, ngroups, k, bs, num_blocks, max_seqs, max_tokens, thr,
          chunked, caching, lag, fcfs, L, moe, sizes, W, closed, round_trip, record, keyed, wkey, vkey, check, out_f,
          out_i, prof):  # type: ignore[no-untyped-def]
    n = arrival.shape[0]
    issued = min(closed, n) if closed else 0
    comp = np.zeros(n, np.int64)
    known = prompt.copy()
    out_left = out_len.copy()
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    # the block pool
    S = ngroups + n
    ps = np.zeros(4, np.int64)
    ps[0] = num_blocks
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
    cap = math.inf
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
    maxg = k[5]
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
    kv_rate = k[8] / k[9]
    combine_mode = int(k[14])
    status = 0
    while done < n:
        if ps[2]:
            status = 4
            break
        cutoff = now - last_dt if lag else now
        limit = issued if closed else n
        while next_arr < limit and arrival[order[next_arr]] <= cutoff:
            i = order[next_arr]
            if fcfs:
                wq[(wh + wc) % n] = i
                wc += 1
            else:
                heapq.heappush(wheap, (wkey[i] if keyed else arrival[i], i))
            next_arr += 1
        n_wait = wc if fcfs else len(wheap)
        if nrun == 0 and n_wait == 0:
            for d in range(ndrain):
                _release(drain[d], False, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached,
                         refs, prv, nxt, in_lru, S)
            ndrain = 0
            if next_arr >= limit:
                break
            t_arr = max(now, arrival[order[next_arr]])
            prof[_IDLE] += t_arr - max(now, t_first)
            now = t_arr
            last_dt = 0.0
            continue
        # a decode span
        if fcfs and nrun and npre == 0 and nrun <= max_tokens and not (ndrain and n_wait):
            admit_possible = n_wait > 0 or next_arr < limit
            if n_wait and nrun < max_seqs:
                w = wq[wh]
                _lookup(w, caching, bs, ngroups, known, pblocks, group, was_pre, cached, in_lru, lk)
                admit_possible = _cdiv(known[w], bs) - lk[0] - lk[1] + lk[2] <= ps[0] + ps[1]
            elif nrun >= max_seqs:
                admit_possible = False
            if not (admit_possible and n_wait):
                while True:
                    ob, sq, i = heap[0]
                    if is_dec[i] and seq[i] == sq and out_base[i] == ob:
                        break
                    heapq.heappop(heap)
                ks = ob - g
                free = ps[0] + ps[1]
                need = _new_blocks(ks, ndec, bs, g, phase)
                ok = True
                if need > free:
                    lo, hi = 0, ks
                    while lo < hi:
                        mid = (lo + hi + 1) // 2
                        if _new_blocks(mid, ndec, bs, g, phase) <= free:
                            lo = mid
                        else:
                            hi = mid - 1
                    ks = lo
                    ok = ks >= 1
                if ok:
                    until = arrival[order[next_arr]] - now if admit_possible else math.inf
                    pb = _padded(nrun, sizes)
                    lin = _lin(pb, nrun, L, moe)
                    comm = _comm(pb, L)
                    bterm = lin + comm
                    mode = 0 if nrun > k[5] else 2
                    overhead = k[0] + k[1] * nrun + k[2] * nrun + k[3]
                    if mode == 0 and k[4] != 0.0:
                        overhead += k[4]
                    dispatch = k[15 + 2 * mode]
                    fixed = k[16 + 2 * mode]
                    cpu = k[10] + k[11] * nrun + k[12] * 0
                    ctx0 = float(_context(W, ndec, g, base_sum, below, ws, is_sat, is_dec, seq))
                    if W:
                        cap = nrun * float(W)
                    t = 0.0
                    dt = 0.0
                    t0 = 0.0
                    kk = 0
                    for j in range(ks):
                        ctx = ctx0 + nrun * float(j)
                        kern = bterm + (ctx if ctx <= cap else cap) * kv_rate
                        kern_buf[j] = kern
                        dt = _combine(kern, overhead, dispatch, cpu, combine_mode)
                        t = dt if j == 0 else t + dt
                        if record:
                            cum_buf[j] = t
                        if j == 0:
                            t0 = t
                        kk = j + 1
                        if t >= until:
                            break
                    last_dt = dt
                    span = t
                    prof[_W] += kk * (lin + overhead - fixed)
                    prof[_COMM] += kk * comm
                    if W:  # the context stops growing at the window: the kernels' sum (numpy's pairwise)
                        prof[_KV] += _pairwise(kern_buf, 0, kk) - kk * (lin + comm)
                    else:
                        prof[_KV] += (kk * ctx0 + nrun * kk * (kk - 1) / 2.0) * kv_rate
                    prof[_LAUNCH] += kk * fixed
                    if dispatch != 0.0:  # `add_span_parts`: np.maximum(dispatch - kernels - overlapped, 0).sum()
                        ov = overhead if k[13] != 0.0 else 0.0
                        for j in range(kk):
                            kern_buf[j] = max(dispatch - kern_buf[j] - ov, 0.0)
                        prof[_LAUNCH] += _pairwise(kern_buf, 0, kk)
                    if record:
                        rec_t, rec_i = _grow(rec_t, rec_i, nrec + kk)
                        gm = 2 if nrun <= maxg else 0
                        for j in range(kk):
                            rec_t[nrec] = now + cum_buf[j]
                            rec_i[nrec, 0] = nrun
                            rec_i[nrec, 1] = nrun
                            rec_i[nrec, 2] = nrun
                            rec_i[nrec, 3] = gm
                            nrec += 1
                    for x in range(n_nf):
                        first[no_first[x]] = now + t0
                    n_nf = 0
                    need = _new_blocks(kk, ndec, bs, g, phase)
                    need_first = _new_blocks(1, ndec, bs, g, phase) if ndrain else 0
                    _take(need, ps, cached, prv, nxt, in_lru, S)
                    g += kk
                    now = now + span
                    steps += kk
                    tokens_total += kk * nrun
                    busy += span
                    run_int += span * nrun
                    if ndrain:
                        kv_peak = max(kv_peak, num_blocks - ps[0] - ps[1] - need + need_first)
                        for d in range(ndrain):
                            _release(drain[d], False, caching, bs, ngroups, comp, shared, in_group, chain_pos, group,
                                     ps, cached, refs, prv, nxt, in_lru, S)
                        ndrain = 0
                    kv_peak = max(kv_peak, num_blocks - ps[0] - ps[1])
                    nf = 0
                    while heap and heap[0][0] <= g:
                        ob, sq, i = heapq.heappop(heap)
                        if is_dec[i] and seq[i] == sq and out_base[i] == ob:
                            b = base[i]
                            is_dec[i] = False
                            ndec -= 1
                            base_sum -= b
                            phase[(b - 1) % bs] -= 1
                            if W:
                                if is_sat[i]:
                                    is_sat[i] = False
                                    ws[1] -= 1
                                else:
                                    ws[0] -= b
                            comp[i] = b + g
                            known[i] = comp[i] + 1
                            out_left[i] = 0
                            fin[nf] = i
                            nf += 1
                    for x in range(nf):
                        i = fin[x]
                        finish[i] = now
                        if lag:
                            drain[ndrain] = i
                            ndrain += 1
                        else:
                            _release(i, False, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps,
                                     cached, refs, prv, nxt, in_lru, S)
                        done += 1
                        if closed and issued < n:
                            arrival[order[issued]] = now + round_trip
                            issued += 1
                    if nf:
                        m = 0
                        for r in range(nrun):
                            i = run[r]
                            if finish[i] != finish[i]:
                                run[m] = i
                                m += 1
                        nrun = m
                    if check and _check(num_blocks, ps, cached, refs, in_lru):
                        status = 5
                        break
                    continue
        # the running requests
        budget = max_tokens
        group_runs = False
        nch = 0
        admitted = 0
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
                new = _new_blocks(1, ndec, bs, g, phase)
                for c in range(nch):
                    new += _cdiv(comp[ch_i[c]] + ch_n[c], bs) - _cdiv(comp[ch_i[c]], bs)
                if new <= ps[0] + ps[1]:
                    fast = True
                    _take(new, ps, cached, prv, nxt, in_lru, S)
                    budget -= total
                    group_runs = ndec > 0
                    decode_ctx = float(_context(W, ndec, g, base_sum, below, ws, is_sat, is_dec, seq))
                    for c in range(nch):
                        nn = ch_n[c]
                        i = ch_i[c]
                        cc = comp[i]
                        w = cc if cc < WE else WE
                        pairs += nn * w + nn * (nn + 1) / 2.0
                        pctx += w
                        _extend_prefix(i, cc + nn, bs, pblocks, chain_pos, in_group, group, shared, cached, ps)
                    if nch:
                        uniform = False
            if not fast:
                for r in range(nrun):  # every member out of the group, in running order
                    i = run[r]
                    if is_dec[i]:
                        comp[i] = base[i] + g
                        known[i] = comp[i] + 1
                        out_left[i] = out_base[i] - g
                        is_dec[i] = False
                    is_sat[i] = False
                    pre[r] = i
                npre = nrun
                ndec = 0
                base_sum = 0
                phase[:] = 0
                heap.clear()
                below.clear()
                ws[0] = 0
                ws[1] = 0
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
                        total_new += _cdiv(c + s, bs) - _cdiv(c, bs)
                if total_new <= ps[0] + ps[1]:
                    _take(total_new, ps, cached, prv, nxt, in_lru, S)
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
                                _extend_prefix(i, cc + nn, bs, pblocks, chain_pos, in_group, group, shared, cached, ps)
                        uniform = False
                else:  # one by one, preempting when blocks run out
                    nch = 0
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
                        nb = _cdiv(cc + nn, bs) - _cdiv(cc, bs)
                        victim_self = False
                        while nb > ps[0] + ps[1]:
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
                            _release(v, True, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps,
                                     cached, refs, prv, nxt, in_lru, S)
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
                            _take(nb, ps, cached, prv, nxt, in_lru, S)
                        if full == 1 and nn == 1:
                            decode_ctx += cc + 1 if cc + 1 < WE else WE
                        else:
                            uniform = False
                            w = cc if cc < WE else WE
                            pairs += nn * w + nn * (nn + 1) / 2.0
                            pctx += w
                            _extend_prefix(i, cc + nn, bs, pblocks, chain_pos, in_group, group, shared, cached, ps)
                        ch_i[nch] = i
                        ch_n[nch] = nn
                        nch += 1
                        budget -= nn
                        idx += 1
                    nrun = end
                    for r in range(nrun):
                        pre[r] = run[r]
                    npre = nrun
        # admissions (never in a step that preempted)
        slots = max_seqs - nrun - ndrain
        while not preempted and budget > 0 and slots > 0:
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
                _lookup(i, caching, bs, ngroups, known, pblocks, group, was_pre, cached, in_lru, lk)
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
            if _cdiv(known[i], bs) - hg - hp + touch > ps[0] + ps[1]:
                break
            if fcfs:
                wh = (wh + 1) % n
                wc -= 1
            else:
                heapq.heappop(wheap)
            if gi >= 0 and pblocks[i] > 0:
                _acquire(gi, ps, cached, refs, prv, nxt, in_lru)
                in_group[i] = True
            priv = ngroups + i
            if hp:
                got = _claim(priv, ps, cached, prv, nxt, in_lru)
                if got > hp:
                    ps[0] += got - hp
                    ps[3] -= got - hp
            elif was_pre[i] and cached[priv]:
                got = _claim(priv, ps, cached, prv, nxt, in_lru)
                ps[0] += got
                ps[3] -= got
            shared[i] = hg
            chain_pos[i] = hg
            comp[i] = start
            _take(_cdiv(start + nn, bs) - hg - hp, ps, cached, prv, nxt, in_lru, S)
            if pblocks[i]:
                _extend_prefix(i, start + nn, bs, pblocks, chain_pos, in_group, group, shared, cached, ps)
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
        if admitted:
            uniform = False
        if group_runs or nch:
            # price, advance, finish
            ntok = max_tokens - budget
            n_group = ndec if group_runs else 0
            pt = _padded(ntok, sizes)
            dt = step_time_nb(_lin(pt, n_group + nch, L, moe), _comm(pt, L), ntok, n_group + nch, nrun, decode_ctx,
                              pairs, pctx, uniform, admitted, k, prof)
            now = now + dt
            last_dt = dt
            steps += 1
            tokens_total += ntok
            busy += dt
            run_int += dt * nrun
            kv_peak = max(kv_peak, num_blocks - ps[0] - ps[1])
            nf = 0
            sampled = n_group
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
            for d in range(ndrain):
                _release(drain[d], False, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached,
                         refs, prv, nxt, in_lru, S)
            ndrain = 0
            if group_runs:
                for x in range(n_nf):
                    first[no_first[x]] = now
                n_nf = 0
                g += 1
                while heap and heap[0][0] <= g:
                    ob, sq, i = heapq.heappop(heap)
                    if is_dec[i] and seq[i] == sq and out_base[i] == ob:
                        b = base[i]
                        is_dec[i] = False
                        ndec -= 1
                        base_sum -= b
                        phase[(b - 1) % bs] -= 1
                        if W:
                            if is_sat[i]:
                                is_sat[i] = False
                                ws[1] -= 1
                            else:
                                ws[0] -= b
                        comp[i] = b + g
                        known[i] = comp[i] + 1
                        out_left[i] = 0
                        fin[nf] = i
                        nf += 1
            if nf:
                fs = fin[:nf].copy()
                keys = np.empty(nf, np.int64)
                for x in range(nf):
                    keys[x] = seq[fs[x]]
                fs = fs[np.argsort(keys)]
                for x in range(nf):
                    i = fs[x]
                    finish[i] = now
                    if lag:
                        drain[ndrain] = i
                        ndrain += 1
                    else:
                        _release(i, False, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached,
                                 refs, prv, nxt, in_lru, S)
                    done += 1
                    if closed and issued < n:
                        arrival[order[issued]] = now + round_trip
                        issued += 1
                m = 0
                for r in range(nrun):
                    i = run[r]
                    if finish[i] != finish[i]:
                        run[m] = i
                        m += 1
                nrun = m
            if record:
                rec_t, rec_i = _grow(rec_t, rec_i, nrec + 1)
                rec_t[nrec] = now
                rec_i[nrec, 0] = ntok
                rec_i[nrec, 1] = nrun
                rec_i[nrec, 2] = sampled
                rec_i[nrec, 3] = (2 if ntok <= maxg else 0) if uniform else (1 if ntok <= maxg else 0)
                nrec += 1
            if check and _check(num_blocks, ps, cached, refs, in_lru):
                status = 5
                break
        # regroup: prompts done join the decode group, in running order
        m = 0
        for x in range(npre):
            i = pre[x]
            if finish[i] == finish[i]:
                continue
            if known[i] - comp[i] == 1:
                b = comp[i] - g
                base[i] = b
                out_base[i] = out_left[i] + g
                is_dec[i] = True
                ndec += 1
                base_sum += b
                phase[(b - 1) % bs] += 1
                heapq.heappush(heap, (out_base[i], seq[i], i))
                if W:
                    if comp[i] + 1 >= W:
                        is_sat[i] = True
                        ws[1] += 1
                    else:
                        heapq.heappush(below, (-b, seq[i], i))
                        ws[0] += b
                if first[i] != first[i]:
                    no_first[n_nf] = i
                    n_nf += 1
            else:
                pre[m] = i
                m += 1
        npre = m
        if not group_runs and nch == 0:
            if ndrain:
                for d in range(ndrain):
                    _release(drain[d], False, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps,
                             cached, refs, prv, nxt, in_lru, S)
                ndrain = 0
                continue
            if next_arr < (issued if closed else n) and nrun == 0:
                t_arr = max(now, arrival[order[next_arr]])
                prof[_IDLE] += t_arr - max(now, t_first)
                now = t_arr
                last_dt = 0.0
                continue
            status = 3
            break
    for d in range(ndrain):
        _release(drain[d], False, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached, refs,
                 prv, nxt, in_lru, S)
    out_f[0], out_f[1], out_f[2] = busy, run_int, float(kv_peak) / max(num_blocks, 1)
    out_i[0], out_i[1], out_i[2], out_i[3] = steps, tokens_total, queries, status
    out_i[4], out_i[5], out_i[6], out_i[7] = preemptions, hits, pre_hits, nrec
    return first, finish, known, rec_t, rec_i


RECORDS = True  # `run_compiled` keeps the step trace when asked
CHECKS = True  # and checks the pool's invariants when asked


def run_compiled(cfg: Any, cost: Any, trace: Any, num_gpu_blocks: int, record: bool = False,
                 keys: Any = None, check: bool = False) -> tuple[dict[str, Any], list[float], int]:
    """`EngineSim(cfg, cost, trace, num_gpu_blocks, record_steps=record).run()`'s numbers: (result fields, the step
    trace under ``"steps"`` (None unless ``record``), profile parts before `StepCost.engine_cpu_rest`, status: 0 done,
    3 deadlock (the Python engine raises there), 4 an allocation beyond the free blocks (it raises there too), 5 an
    invariant broken (``check``: `BlockPool.check` after each step and span, as ``check_invariants=True``)).

    ``keys``: a scheduling policy's static keys (`rsi_env.engine.policy.PolicyKeys`: ``waiting``, ``victim`` per
    request, as `PolicyEngineSim` consults them; the priority policy); None: the arrival times (`EngineSim`'s)."""
    n = len(trace)
    closed = int(trace.closed_concurrency or 0)
    if closed:  # as `EngineSim.run`: the first ``closed`` requests at 0, each next one a round trip after a finish
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
    m = cost.model
    moe = np.array([1.0 if m.is_moe else 0.0, m.num_experts or 0, m.num_experts_per_tok or 0, m.num_moe_layers,
                    cost._expert_bytes], np.float64)
    if keys is not None:
        wkey = np.array([float(x) for x in keys.waiting], np.float64)
        vkey = np.array([float(x) for x in keys.victim], np.float64)
    else:
        wkey = vkey = np.zeros(0)
    out_f, out_i, prof = np.zeros(3), np.zeros(8, np.int64), np.zeros(7)
    first, finish, known, rec_t, rec_i = _loop(
        arrival, order, prompt, out_len, group, pblocks, ngroups, consts_of(cost), bs, max(num_gpu_blocks - 1, 0),
        int(cfg.max_num_seqs), int(cfg.max_num_batched_tokens), int(cfg.long_prefill_token_threshold or 0),
        bool(cfg.enable_chunked_prefill), caching, bool(cfg.async_scheduling), cfg.scheduling_policy == "fcfs",
        linear_consts(cost), moe, np.asarray(cost._sizes, np.int64), int(cost._window or 0), closed,
        float(cost.cal.frontend_s),
        bool(record), keys is not None, wkey, vkey, bool(check), out_f, out_i, prof)
    res = {"arrival": arrival, "first_token": first, "finish": finish, "generated": known - prompt,
           "num_steps": int(out_i[0]), "tokens_scheduled": int(out_i[1]), "prefix_queries": int(out_i[2]),
           "num_preemptions": int(out_i[4]), "prefix_hits": int(out_i[5]), "preempted_prefix_hits": int(out_i[6]),
           "busy_time": float(out_f[0]), "running_time_integral": float(out_f[1]), "kv_usage_peak": float(out_f[2]),
           "steps": None}
    if record:
        nrec = int(out_i[7])
        res["steps"] = {"t": rec_t[:nrec].copy(), "tokens": rec_i[:nrec, 0].copy(), "running": rec_i[:nrec, 1].copy(),
                        "gen": rec_i[:nrec, 2].copy(), "mode": rec_i[:nrec, 3].copy()}
    return res, prof.tolist(), int(out_i[3])
