"""`EngineSim.run`'s whole loop compiled with numba, over arrays of per-request state, for a subset of configurations.

The subset: FCFS, no shared prefixes in the trace (prefix caching may be on: its lookups then hit nothing), open-loop
arrivals, no sliding window, and no preemption (the loop stops with status 1 if a step would preempt, 2 if a decode
span would launch outside a CUDA graph, whose parts `StepCost.add_span_parts` sums with numpy's pairwise sum).
Within it, each iteration does the Python engine's arithmetic in the Python engine's order: arrivals, a decode span,
the running requests, admissions, the step's price, advance and finish.

State is arrays instead of objects: per request ``comp``/``known``/``out_left``/``first``/``finish`` and a decoding flag;
the running requests as an array in admission order; the waiting queue as an array with a head index. The decode
group's sums are recomputed by a native loop over the running array (a few hundred members cost well under a
microsecond), so no incremental bookkeeping is needed for speed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from kernels import _combine, consts_of, step_time_nb
from numba import njit

__all__ = ["run_compiled", "supported"]

# `prof` positions (`rsi_env.engine.profile.PARTS`): weights, attention, kv_read, comm, engine_cpu, launch, idle.
_W, _COMM, _KV, _LAUNCH, _IDLE = 0, 3, 2, 5, 6


def supported(cfg: Any, cost: Any, trace: Any, closed: bool = False) -> bool:
    """Whether `run_compiled` covers this configuration and trace (``closed``: `loop_group`'s, with closed loops)."""
    return (cfg.scheduling_policy == "fcfs" and (closed or not trace.closed_concurrency)
            and int(trace.prefix_group.max()) < 0 and cost._window is None and cfg.data_parallel_size == 1
            and not cost.model.is_moe and cost._sizes_sorted)


@njit(cache=True, fastmath=False)
def _cdiv(x: int, bs: int) -> int:
    return -(-x // bs)


# `_lin`'s and `_comm`'s constants, by position (`linear_consts`).
(L_FIXED_W, L_MM_RATE, L_MM_HALF, L_BW, L_SHARP, L_FPT, L_LM_FLOPS, L_LM_BYTES, L_TP, L_PP, L_LAYERS, L_LAT, L_AR,
 L_HIDDEN, L_COMM_RATE) = range(15)


def linear_consts(cost: Any) -> np.ndarray:
    return np.array([cost._fixed_w_bytes, cost._mm_rate, cost._mm_half, cost._bw_rate, cost.cal.roofline_sharpness,
                     cost._flops_per_token, cost._lm_flops_per_row, cost._lm_bytes, cost._tp, cost._pp, cost._layers,
                     cost.hw.interconnect_latency_s, cost.cal.allreduce_s, cost._hidden_bytes, cost._comm_rate],
                    np.float64)


@njit(cache=True, fastmath=False)
def _roof(flops: float, flop_rate: float, nbytes: float, byte_rate: float, sharpness: float) -> float:
    c = flops / flop_rate
    m = nbytes / byte_rate
    return (c**sharpness + m**sharpness) ** (1.0 / sharpness)


@njit(cache=True, fastmath=False)
def _lin(tp_: int, rows: int, L: np.ndarray) -> float:
    """`StepCost._linear` for a dense model."""
    rate = L[1] * tp_ / (tp_ + L[2])
    lm_rate = L[1] * rows / (rows + L[2])
    t = _roof(L[5] * tp_, rate, L[0], L[3], L[4])
    return t + _roof(L[6] * rows, lm_rate, L[7], L[3], L[4])


@njit(cache=True, fastmath=False)
def _comm(tp_: int, L: np.ndarray) -> float:
    """`StepCost._comm`."""
    t = 0.0
    tp = int(L[8])
    pp = int(L[9])
    if tp > 1:
        nbytes = tp_ * L[13]
        ring = 2.0 * (tp - 1) / tp * nbytes / L[14]
        t += 2.0 * L[10] * (L[11] + L[12] + ring)
    if pp > 1:
        t += (pp - 1) * (L[11] + tp_ * L[13] / L[14])
    return t


@njit(cache=True, fastmath=False)
def _padded(t: int, sizes: np.ndarray) -> int:
    if sizes.shape[0] and t <= sizes[-1]:
        return sizes[np.searchsorted(sizes, t)]
    return t


@njit(cache=True, fastmath=False)
def _loop(arrival, order, prompt, out_len, k, bs, num_blocks, max_seqs, max_tokens, thr, chunked, caching, lag,
          L, sizes, out_f, out_i, prof):  # type: ignore[no-untyped-def]
    n = arrival.shape[0]
    comp = np.zeros(n, np.int64)
    known = prompt.copy()
    out_left = out_len.copy()
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    is_dec = np.zeros(n, np.bool_)
    run = np.empty(n, np.int64)  # running requests in admission order
    nrun = 0
    wait = np.empty(n, np.int64)
    w_head = 0
    w_tail = 0
    drain = np.empty(n, np.int64)
    ndrain = 0
    np.empty(n, np.int64)
    ch_i = np.empty(n, np.int64)
    ch_n = np.empty(n, np.int64)
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
        # 1. arrivals
        cutoff = now - last_dt if lag else now
        while next_arr < n and arrival[order[next_arr]] <= cutoff:
            wait[w_tail] = order[next_arr]
            w_tail += 1
            next_arr += 1
        n_wait = w_tail - w_head
        if nrun == 0 and n_wait == 0:
            for d in range(ndrain):
                free += _cdiv(comp[drain[d]], bs)
            ndrain = 0
            if next_arr >= n:
                break
            t_arr = max(now, arrival[order[next_arr]])
            prof[_IDLE] += t_arr - max(now, t_first)
            now = t_arr
            last_dt = 0.0
            continue
        # 2. a decode span nothing can interrupt
        ndec = 0
        for r in range(nrun):
            if is_dec[run[r]]:
                ndec += 1
        if nrun and ndec == nrun and nrun <= max_tokens and not (ndrain and n_wait):
            admit_possible = n_wait > 0 or next_arr < n
            if n_wait and nrun < max_seqs:
                admit_possible = _cdiv(known[wait[w_head]], bs) <= free
            elif nrun >= max_seqs:
                admit_possible = False
            if not (admit_possible and n_wait):
                ks = 1 << 62
                ctx_sum = 0
                for r in range(nrun):
                    i = run[r]
                    if out_left[i] < ks:
                        ks = out_left[i]
                    ctx_sum += comp[i] + 1
                need = 0
                for r in range(nrun):
                    c = comp[run[r]]
                    need += _cdiv(c + ks, bs) - _cdiv(c, bs)
                ok = True
                if need > free:
                    lo, hi = 0, ks
                    while lo < hi:
                        mid = (lo + hi + 1) // 2
                        nb = 0
                        for r in range(nrun):
                            c = comp[run[r]]
                            nb += _cdiv(c + mid, bs) - _cdiv(c, bs)
                        if nb <= free:
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
                    base = lin + comm
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
                    ctx0 = float(ctx_sum)
                    t = 0.0
                    dt = 0.0
                    t0 = 0.0
                    taken = 0
                    for j in range(ks):
                        ctx = ctx0 + nrun * float(j)
                        kern = base + ctx * kv_rate
                        dt = _combine(kern, overhead, dispatch, cpu, combine_mode)
                        t = dt if j == 0 else t + dt
                        if j == 0:
                            t0 = t
                        taken = j + 1
                        if t >= until:
                            break
                    last_dt = dt
                    span = t
                    kk = taken
                    prof[_W] += kk * (lin + overhead - fixed)
                    prof[_COMM] += kk * comm
                    prof[_KV] += (kk * ctx0 + nrun * kk * (kk - 1) / 2.0) * kv_rate
                    prof[_LAUNCH] += kk * fixed
                    for r in range(nrun):
                        i = run[r]
                        if first[i] != first[i]:
                            first[i] = now + t0
                    need = 0
                    for r in range(nrun):
                        c = comp[run[r]]
                        need += _cdiv(c + kk, bs) - _cdiv(c, bs)
                    need_first = 0
                    if ndrain:
                        for r in range(nrun):
                            c = comp[run[r]]
                            need_first += _cdiv(c + 1, bs) - _cdiv(c, bs)
                    free -= need
                    for r in range(nrun):
                        i = run[r]
                        comp[i] += kk
                        known[i] = comp[i] + 1
                        out_left[i] -= kk
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
                    # finish, in admission order
                    m = 0
                    for r in range(nrun):
                        i = run[r]
                        if out_left[i] == 0:
                            finish[i] = now
                            is_dec[i] = False
                            if lag:
                                drain[ndrain] = i
                                ndrain += 1
                            else:
                                free += _cdiv(comp[i], bs)
                            done += 1
                        else:
                            run[m] = i
                            m += 1
                    nrun = m
                    continue
        # 3. the running requests
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
            for r in range(nrun):
                i = run[r]
                if not is_dec[i]:
                    nn = known[i] - comp[i]
                    if thr and nn > thr:
                        nn = thr
                    ch_i[nch] = i
                    ch_n[nch] = nn
                    nch += 1
                    total += nn
            fast = False
            if total <= budget:
                new = 0
                ctx_sum = 0
                for r in range(nrun):
                    i = run[r]
                    if is_dec[i]:
                        new += _cdiv(comp[i] + 1, bs) - _cdiv(comp[i], bs)
                        ctx_sum += comp[i] + 1
                for c in range(nch):
                    new += _cdiv(comp[ch_i[c]] + ch_n[c], bs) - _cdiv(comp[ch_i[c]], bs)
                if new <= free:
                    fast = True
                    free -= new
                    budget -= total
                    group = ndec > 0
                    decode_ctx = float(ctx_sum)
                    for c in range(nch):
                        nn = ch_n[c]
                        cc = comp[ch_i[c]]
                        pairs += nn * cc + nn * (nn + 1) / 2.0
                        pctx += cc
                    if nch:
                        uniform = False
            if not fast:
                for r in range(nrun):
                    is_dec[run[r]] = False
                ndec = 0
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
                    status = 1  # the one-by-one allocation with preemptions: outside this port
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
        # 4. admissions
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
            ch_i[nch] = i
            ch_n[nch] = nn
            nch += 1
            budget -= nn
            slots -= 1
            admitted += 1
        if admitted:
            uniform = False
        # nothing scheduled
        if not group and nch == 0:
            for r in range(nrun):
                i = run[r]
                if known[i] - comp[i] == 1:
                    is_dec[i] = True
            if ndrain:
                for d in range(ndrain):
                    free += _cdiv(comp[drain[d]], bs)
                ndrain = 0
                continue
            if next_arr < n and nrun == 0:
                t_arr = max(now, arrival[order[next_arr]])
                prof[_IDLE] += t_arr - max(now, t_first)
                now = t_arr
                last_dt = 0.0
                continue
            status = 3
            break
        # 5. price, advance, finish
        ntok = max_tokens - budget
        n_group = ndec if group else 0
        pt = _padded(ntok, sizes)
        dt = step_time_nb(_lin(pt, n_group + nch, L), _comm(pt, L), ntok, n_group + nch, nrun, decode_ctx, pairs,
                          pctx, uniform, admitted, k, prof)
        now = now + dt
        last_dt = dt
        steps += 1
        tokens_total += ntok
        busy += dt
        run_int += dt * nrun
        kv_peak = max(kv_peak, num_blocks - free)
        for c in range(nch):
            i = ch_i[c]
            cc = comp[i] + ch_n[c]
            comp[i] = cc
            if cc == known[i]:
                known[i] = cc + 1
                out_left[i] -= 1
                if first[i] != first[i]:
                    first[i] = now
        for d in range(ndrain):
            free += _cdiv(comp[drain[d]], bs)
        ndrain = 0
        if group:
            for r in range(nrun):
                i = run[r]
                if is_dec[i]:
                    if first[i] != first[i]:
                        first[i] = now
                    comp[i] += 1
                    known[i] = comp[i] + 1
                    out_left[i] -= 1
        m = 0
        for r in range(nrun):
            i = run[r]
            if out_left[i] == 0:
                finish[i] = now
                is_dec[i] = False
                if lag:
                    drain[ndrain] = i
                    ndrain += 1
                else:
                    free += _cdiv(comp[i], bs)
                done += 1
            else:
                run[m] = i
                m += 1
                if known[i] - comp[i] == 1:
                    is_dec[i] = True
        nrun = m
    for d in range(ndrain):
        free += _cdiv(comp[drain[d]], bs)
    out_f[0], out_f[1], out_f[2] = busy, run_int, float(kv_peak) / max(num_blocks, 1)
    out_i[0], out_i[1], out_i[2], out_i[3] = steps, tokens_total, queries, status
    return first, finish, known


def run_compiled(cfg: Any, cost: Any, trace: Any, num_gpu_blocks: int) -> tuple[dict[str, Any], list[float], int]:
    """`EngineSim(...).run()`'s results for a supported configuration: the `SimResult` fields it covers, the
    profile parts (before `StepCost.engine_cpu_rest`), and the status (0: done; else where it stopped)."""
    arrival = trace.arrival_s.astype(np.float64)
    order = np.argsort(arrival, kind="stable").astype(np.int64)
    prompt = trace.prompt_len.astype(np.int64)
    out_len = trace.output_len.astype(np.int64)
    out_f, out_i, prof = np.zeros(3), np.zeros(4, np.int64), np.zeros(7)
    first, finish, known = _loop(
        arrival, order, prompt, out_len, consts_of(cost), int(cfg.block_size), max(num_gpu_blocks - 1, 0),
        int(cfg.max_num_seqs), int(cfg.max_num_batched_tokens), int(cfg.long_prefill_token_threshold or 0),
        bool(cfg.enable_chunked_prefill), bool(cfg.enable_prefix_caching), bool(cfg.async_scheduling),
        linear_consts(cost), np.asarray(cost._sizes, np.int64), out_f, out_i, prof)
    res = {"arrival": arrival, "first_token": first, "finish": finish, "generated": known - prompt,
           "num_steps": int(out_i[0]), "tokens_scheduled": int(out_i[1]), "prefix_queries": int(out_i[2]),
           "busy_time": float(out_f[0]), "running_time_integral": float(out_f[1]), "kv_usage_peak": float(out_f[2])}
    return res, prof.tolist(), int(out_i[3])
