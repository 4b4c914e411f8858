"""`loop.py`'s compiled engine loop with the decode group kept incrementally, as `rsi_env.sim.decoders.DecodeGroup`.

Same subset and same arithmetic as `loop.py`, plus closed-loop clients (a request sent a front-end round trip after
the last one finished, as `EngineSim.run` does); what differs is the state: a decoding member's counts are relative to a
shared step counter (``base``, ``out_base``), the sums a step needs (context, blocks by phase, the next finish from a
heap) are updated when a member joins or leaves, and the prompts still being computed are their own array. A decode
step or span then costs the same for any batch size, except the compaction of the running array when requests finish.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np
from kernels import _combine, consts_of, step_time_nb
from loop import _cdiv, _comm, _lin, _padded, linear_consts
from numba import njit

__all__ = ["run_compiled"]

_W, _COMM, _KV, _LAUNCH, _IDLE = 0, 3, 2, 5, 6


@njit(cache=True, fastmath=False)
def _new_blocks(kk, n, bs, g, phase):  # type: ignore[no-untyped-def]
    full = kk // bs
    r = kk - full * bs
    total = full * n
    if r:
        start = (bs - r - g) % bs
        end = start + r
        if end <= bs:
            for s in range(start, end):
                total += phase[s]
        else:
            for s in range(start, bs):
                total += phase[s]
            for s in range(0, end - bs):
                total += phase[s]
    return total


@njit(cache=True, fastmath=False)
def _loop(arrival, order, prompt, out_len, k, bs, num_blocks, max_seqs, max_tokens, thr, chunked, caching, lag,
          L, sizes, closed, round_trip, out_f, out_i, prof):  # type: ignore[no-untyped-def]
    n = arrival.shape[0]
    issued = min(closed, n) if closed else 0
    comp = np.zeros(n, np.int64)
    known = prompt.copy()
    out_left = out_len.copy()
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    # decode group
    is_dec = np.zeros(n, np.bool_)
    base = np.zeros(n, np.int64)
    out_base = np.zeros(n, np.int64)
    seq = np.zeros(n, np.int64)
    g = 0
    ndec = 0
    base_sum = 0
    phase = np.zeros(bs, np.int64)
    heap = [(np.int64(0), np.int64(0), np.int64(0))]
    heap.pop()
    no_first = np.empty(n, np.int64)
    n_nf = 0
    # running (admission order), prompts being computed (running order), waiting, draining
    run = np.empty(n, np.int64)
    nrun = 0
    pre = np.empty(n, np.int64)
    npre = 0
    wait = np.empty(n, np.int64)
    w_head = 0
    w_tail = 0
    drain = np.empty(n, np.int64)
    ndrain = 0
    ch_i = np.empty(n, np.int64)
    ch_n = np.empty(n, np.int64)
    fin = np.empty(n, np.int64)
    nseq = 0
    free = num_blocks
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
    t_first = arrival[order[0]] if n else 0.0
    kv_rate = k[8] / k[9]
    combine_mode = int(k[14])
    status = 0
    while done < n:
        cutoff = now - last_dt if lag else now
        limit = issued if closed else n
        while next_arr < limit and arrival[order[next_arr]] <= cutoff:
            wait[w_tail] = order[next_arr]
            w_tail += 1
            next_arr += 1
        n_wait = w_tail - w_head
        if nrun == 0 and n_wait == 0:
            for d in range(ndrain):
                free += _cdiv(comp[drain[d]], bs)
            ndrain = 0
            if next_arr >= limit:
                break
            t_arr = max(now, arrival[order[next_arr]])
            prof[_IDLE] += t_arr - max(now, t_first)
            now = t_arr
            last_dt = 0.0
            continue
        # a decode span
        if nrun and npre == 0 and nrun <= max_tokens and not (ndrain and n_wait):
            admit_possible = n_wait > 0 or next_arr < limit
            if n_wait and nrun < max_seqs:
                admit_possible = _cdiv(known[wait[w_head]], bs) <= free
            elif nrun >= max_seqs:
                admit_possible = False
            if not (admit_possible and n_wait):
                while True:
                    ob, sq, i = heap[0]
                    if is_dec[i] and seq[i] == sq and out_base[i] == ob:
                        break
                    heapq.heappop(heap)
                ks = ob - g
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
                    lin = _lin(pb, nrun, L)
                    comm = _comm(pb, L)
                    bterm = lin + comm
                    mode = 0 if nrun > k[5] else 2
                    overhead = k[0] + k[1] * nrun + k[2] * nrun + k[3]
                    if mode == 0 and k[4] != 0.0:
                        overhead += k[4]
                    dispatch = k[15 + 2 * mode]
                    fixed = k[16 + 2 * mode]
                    cpu = k[10] + k[11] * nrun + k[12] * 0
                    if dispatch != 0.0:
                        status = 2
                        break
                    ctx0 = float(base_sum + ndec * (g + 1))
                    t = 0.0
                    dt = 0.0
                    t0 = 0.0
                    kk = 0
                    for j in range(ks):
                        ctx = ctx0 + nrun * float(j)
                        kern = bterm + ctx * kv_rate
                        dt = _combine(kern, overhead, dispatch, cpu, combine_mode)
                        t = dt if j == 0 else t + dt
                        if j == 0:
                            t0 = t
                        kk = j + 1
                        if t >= until:
                            break
                    last_dt = dt
                    span = t
                    prof[_W] += kk * (lin + overhead - fixed)
                    prof[_COMM] += kk * comm
                    prof[_KV] += (kk * ctx0 + nrun * kk * (kk - 1) / 2.0) * kv_rate
                    prof[_LAUNCH] += kk * fixed
                    for x in range(n_nf):
                        first[no_first[x]] = now + t0
                    n_nf = 0
                    need = _new_blocks(kk, ndec, bs, g, phase)
                    need_first = _new_blocks(1, ndec, bs, g, phase) if ndrain else 0
                    free -= need
                    g += kk
                    now = now + span
                    steps += kk
                    tokens_total += kk * nrun
                    busy += span
                    run_int += span * nrun
                    if ndrain:
                        kv_peak = max(kv_peak, num_blocks - free - need + need_first)
                        for d in range(ndrain):
                            free += _cdiv(comp[drain[d]], bs)
                        ndrain = 0
                    kv_peak = max(kv_peak, num_blocks - free)
                    nf = 0
                    while heap and heap[0][0] <= g:
                        ob, sq, i = heapq.heappop(heap)
                        if is_dec[i] and seq[i] == sq and out_base[i] == ob:
                            b = base[i]
                            is_dec[i] = False
                            ndec -= 1
                            base_sum -= b
                            phase[(b - 1) % bs] -= 1
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
                            free += _cdiv(comp[i], bs)
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
                    continue
        # the running requests
        budget = max_tokens
        group = False
        nch = 0
        admitted = 0
        decode_ctx = 0.0
        pairs = 0.0
        pctx = 0.0
        uniform = True
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
                if new <= free:
                    fast = True
                    free -= new
                    budget -= total
                    group = ndec > 0
                    decode_ctx = float(base_sum + ndec * (g + 1))
                    for c in range(nch):
                        nn = ch_n[c]
                        cc = comp[ch_i[c]]
                        pairs += nn * cc + nn * (nn + 1) / 2.0
                        pctx += cc
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
                    pre[r] = i
                npre = nrun
                ndec = 0
                base_sum = 0
                phase[:] = 0
                heap.clear()
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
                if total_new > free:
                    status = 1
                    break
                free -= total_new
                ssum = 0
                dsum = 0
                nd = 0
                for c in range(nch):
                    ssum += ch_n[c]
                    i = ch_i[c]
                    if known[i] - comp[i] == 1:
                        dsum += comp[i] + 1
                        nd += 1
                budget -= ssum
                decode_ctx = float(dsum)
                if nd < nch:
                    for c in range(nch):
                        i = ch_i[c]
                        if known[i] - comp[i] != 1:
                            nn = ch_n[c]
                            cc = comp[i]
                            pairs += nn * cc + nn * (nn + 1) / 2.0
                            pctx += cc
                    uniform = False
        # admissions
        slots = max_seqs - nrun - ndrain
        while budget > 0 and slots > 0:
            if w_head == w_tail:
                break
            i = wait[w_head]
            if caching:
                queries += known[i]
            nn = known[i]
            if thr and nn > thr:
                nn = thr
            if not chunked and nn > budget:
                break
            if nn > budget:
                nn = budget
            if _cdiv(known[i], bs) > free:
                break
            w_head += 1
            comp[i] = 0
            free -= _cdiv(nn, bs)
            pairs += nn * 0 + nn * (nn + 1) / 2.0
            pctx += 0
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
        if group or nch:
            # price, advance, finish
            ntok = max_tokens - budget
            n_group = ndec if group else 0
            pt = _padded(ntok, sizes)
            dt = step_time_nb(_lin(pt, n_group + nch, L), _comm(pt, L), ntok, n_group + nch, nrun, decode_ctx,
                              pairs, pctx, uniform, admitted, k, prof)
            now = now + dt
            last_dt = dt
            steps += 1
            tokens_total += ntok
            busy += dt
            run_int += dt * nrun
            kv_peak = max(kv_peak, num_blocks - free)
            nf = 0
            for c in range(nch):
                i = ch_i[c]
                cc = comp[i] + ch_n[c]
                comp[i] = cc
                if cc == known[i]:
                    known[i] = cc + 1
                    out_left[i] -= 1
                    if first[i] != first[i]:
                        first[i] = now
                    if out_left[i] == 0:
                        fin[nf] = i
                        nf += 1
            for d in range(ndrain):
                free += _cdiv(comp[drain[d]], bs)
            ndrain = 0
            if group:
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
                        free += _cdiv(comp[i], bs)
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
                if first[i] != first[i]:
                    no_first[n_nf] = i
                    n_nf += 1
            else:
                pre[m] = i
                m += 1
        npre = m
        if not group and nch == 0:
            if ndrain:
                for d in range(ndrain):
                    free += _cdiv(comp[drain[d]], bs)
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
        free += _cdiv(comp[drain[d]], bs)
    out_f[0], out_f[1], out_f[2] = busy, run_int, float(kv_peak) / max(num_blocks, 1)
    out_i[0], out_i[1], out_i[2], out_i[3] = steps, tokens_total, queries, status
    return first, finish, known


def run_compiled(cfg: Any, cost: Any, trace: Any, num_gpu_blocks: int) -> tuple[dict[str, Any], list[float], int]:
    """As `loop.run_compiled`, with the incremental decode group; also closed-loop traces (`supported` with
    ``closed=True``)."""
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
    out_f, out_i, prof = np.zeros(3), np.zeros(4, np.int64), np.zeros(7)
    first, finish, known = _loop(
        arrival, order, prompt, out_len, consts_of(cost), int(cfg.block_size), max(num_gpu_blocks - 1, 0),
        int(cfg.max_num_seqs), int(cfg.max_num_batched_tokens), int(cfg.long_prefill_token_threshold or 0),
        bool(cfg.enable_chunked_prefill), bool(cfg.enable_prefix_caching), bool(cfg.async_scheduling),
        linear_consts(cost), np.asarray(cost._sizes, np.int64), closed, float(cost.cal.frontend_s), out_f, out_i, prof)
    res = {"arrival": arrival, "first_token": first, "finish": finish, "generated": known - prompt,
           "num_steps": int(out_i[0]), "tokens_scheduled": int(out_i[1]), "prefix_queries": int(out_i[2]),
           "busy_time": float(out_f[0]), "running_time_integral": float(out_f[1]), "kv_usage_peak": float(out_f[2])}
    return res, prof.tolist(), int(out_i[3])
