"""Price: a step's or a decode span's time and its profile parts, as `rsi_env.sim.cost.StepCost` prices them.

`StepCost` (Python) is the cost model: it computes its constants once per configuration, and SGLang's loop
(`rsi_env.sim.sglang`) and BugFix-v0's engine price their steps through its methods. The compiled loop takes the
same constants as arrays (`step_consts`, `linear_consts`, `moe_consts`) and does the same float operations in the
same order, so that every time and part is the Python method's to the last bit: `step_time` is
`StepCost.step_time` after its lookup of the linear layers and collectives (`linear`, `comm`), `price_span` is
`StepCost.decode_span_until` and `StepCost.add_span_parts` together. Sums numpy computes pairwise (``ndarray.sum``)
are summed here as numpy does (`pairwise_sum`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rsi_env.sim.vllm.jit import njit

__all__ = ["linear_consts", "moe_consts", "step_consts"]

# Profile parts (`rsi_env.engine.profile.PARTS` order): weights and the rest of the step, ..., launch, idle.
P_WEIGHTS, P_ATTN, P_KV, P_COMM, P_LAUNCH, P_IDLE = 0, 1, 2, 3, 5, 6

# `step_consts`'s fields, by position; per CUDA-graph mode (0 none, 1 piecewise, 2 full) the dispatch time at
# C_DISPATCH0 + 2 * mode and the launch's fixed part after it.
(C_STEP, C_PER_REQ, C_PER_TOKEN, C_QUANT, C_EAGER_AR, C_MAX_GRAPH, C_ATTN_PAIR, C_ATTN_RATE, C_KV_TOKEN, C_KV_RATE,
 C_CPU_STEP, C_CPU_REQ, C_CPU_NEW, C_ASYNC_ONE, C_COMBINE, C_DISPATCH0, C_FIXED0) = range(17)
N_CONSTS = C_DISPATCH0 + 3 * 2

# `linear_consts`'s fields, by position.
(L_FIXED_W, L_MM_RATE, L_MM_HALF, L_BW, L_SHARP, L_FPT, L_LM_FLOPS, L_LM_BYTES, L_TP, L_PP, L_LAYERS, L_LAT, L_AR,
 L_HIDDEN, L_COMM_RATE) = range(15)

# `moe_consts`'s fields: is MoE (1.0/0.0), experts, experts per token, MoE layers, bytes per expert.
M_IS_MOE, M_EXPERTS, M_PER_TOK, M_LAYERS, M_EXPERT_BYTES = range(5)


def step_consts(cost: Any) -> np.ndarray:
    """`StepCost`'s per-step constants as `step_time` reads them."""
    cal = cost.cal
    out = np.zeros(N_CONSTS)
    out[C_STEP], out[C_PER_REQ], out[C_PER_TOKEN], out[C_QUANT] = (cal.step_s, cal.per_req_s, cal.per_token_s,
                                                                   cost._quant_s)
    out[C_EAGER_AR] = 2.0 * cal.eager_allreduce_s * cost._layers if cost._tp > 1 else 0.0
    out[C_MAX_GRAPH] = cost._max_graph
    out[C_ATTN_PAIR], out[C_ATTN_RATE] = cost._attn_flops_per_pair, cost._attn_rate
    out[C_KV_TOKEN], out[C_KV_RATE] = cost._kv_bytes_per_token, cost._kv_rate
    out[C_CPU_STEP], out[C_CPU_REQ], out[C_CPU_NEW] = cal.cpu_step_s, cal.cpu_per_req_s, cal.cpu_per_new_req_s
    for mode in range(3):
        out[C_DISPATCH0 + 2 * mode] = cost._dispatch(mode)
        out[C_DISPATCH0 + 2 * mode + 1] = cost._launch_fixed[mode]
    out[C_ASYNC_ONE] = float(cost._async_one)
    out[C_COMBINE] = 0.0 if not cost.cfg.async_scheduling else (1.0 if cost._one_process else 2.0)
    return out


def linear_consts(cost: Any) -> np.ndarray:
    """`StepCost`'s constants of the linear layers and collectives, as `linear` and `comm` read them."""
    return np.array([cost._fixed_w_bytes, cost._mm_rate, cost._mm_half, cost._bw_rate, cost.cal.roofline_sharpness,
                     cost._flops_per_token, cost._lm_flops_per_row, cost._lm_bytes, cost._tp, cost._pp, cost._layers,
                     cost.hw.interconnect_latency_s, cost.cal.allreduce_s, cost._hidden_bytes, cost._comm_rate],
                    np.float64)


def moe_consts(cost: Any) -> np.ndarray:
    """The model's mixture-of-experts constants, as `linear` reads them (zeros for a dense model)."""
    m = cost.model
    return np.array([1.0 if m.is_moe else 0.0, m.num_experts or 0, m.num_experts_per_tok or 0, m.num_moe_layers,
                     cost._expert_bytes], np.float64)


@njit
def combine(kernels, overhead, dispatch, cpu, mode):
    """`StepCost.combine`: the step's wall time from the GPU's kernels, its overhead, the launches and the CPU's part.
    ``mode``: 0 without async scheduling, 1 async in one process, 2 async over several."""
    if mode == 0:
        return max(kernels, dispatch) + overhead + cpu
    if mode == 1:
        return max(kernels + overhead, dispatch + cpu)
    return max(max(kernels, dispatch) + overhead, cpu)


@njit
def roof(flops, flop_rate, nbytes, byte_rate, sharpness):
    """The roofline, softened: compute and memory time combined by a p-norm."""
    c = flops / flop_rate
    m = nbytes / byte_rate
    return (c**sharpness + m**sharpness) ** (1.0 / sharpness)


@njit
def linear(tp_, rows, L, moe):
    """`StepCost._linear`: the linear layers (the experts a batch of ``tp_`` tokens activates) and the LM head."""
    w_bytes = L[L_FIXED_W]
    if moe[M_IS_MOE] != 0.0:
        e = moe[M_EXPERTS]
        active = e * (1.0 - (1.0 - moe[M_PER_TOK] / e) ** float(tp_))  # a float power: libm's pow, as CPython's
        w_bytes += moe[M_LAYERS] * active * moe[M_EXPERT_BYTES]
    rate = L[L_MM_RATE] * tp_ / (tp_ + L[L_MM_HALF])
    lm_rate = L[L_MM_RATE] * rows / (rows + L[L_MM_HALF])
    t = roof(L[L_FPT] * tp_, rate, w_bytes, L[L_BW], L[L_SHARP])
    return t + roof(L[L_LM_FLOPS] * rows, lm_rate, L[L_LM_BYTES], L[L_BW], L[L_SHARP])


@njit
def comm(tp_, L):
    """`StepCost._comm`: tensor-parallel all-reduces and pipeline-parallel hops of ``tp_`` tokens."""
    t = 0.0
    tp = int(L[L_TP])
    pp = int(L[L_PP])
    if tp > 1:
        nbytes = tp_ * L[L_HIDDEN]
        ring = 2.0 * (tp - 1) / tp * nbytes / L[L_COMM_RATE]
        t += 2.0 * L[L_LAYERS] * (L[L_LAT] + L[L_AR] + ring)
    if pp > 1:
        t += (pp - 1) * (L[L_LAT] + tp_ * L[L_HIDDEN] / L[L_COMM_RATE])
    return t


@njit
def padded(t, sizes):
    """`StepCost.padded`: the CUDA-graph size a batch of ``t`` tokens runs at (numpy's left binary search, as
    ``np.searchsorted`` runs it, also on sizes in the user's order); ``t`` beyond the largest."""
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


@njit
def _pairwise_leaf(a, lo, n):
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


@njit
def pairwise_sum(a, lo, n):
    """``a[lo:lo + n].sum()`` as numpy adds it (`pairwise_sum_DOUBLE`, numpy/_core/src/umath/loops_utils.h.src):
    halves (the first a multiple of 8) summed apart and added, down to blocks of 128. The recursion is walked with an
    explicit stack: numba's cache does not reload a recursive function."""
    if n <= 128:
        return _pairwise_leaf(a, lo, n)
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
            ret = _pairwise_leaf(a, f_lo[sp], f_n[sp])
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


@njit
def step_time(lin, com, num_tokens, num_reqs, num_running, decode_ctx, prefill_pairs, prefill_ctx, uniform, num_new,
              k, parts):
    """`StepCost.step_time` given its linear layers' and collectives' time (``lin``, ``com``): the step's wall time,
    its parts added to ``parts``. ``k``: `step_consts`."""
    attn = prefill_pairs * k[C_ATTN_PAIR] / k[C_ATTN_RATE]
    kv = (decode_ctx + prefill_ctx) * k[C_KV_TOKEN] / k[C_KV_RATE]
    kernels = lin + com + attn + kv
    mode = 0 if num_tokens > k[C_MAX_GRAPH] else 2 if uniform else 1
    overhead = k[C_STEP] + k[C_PER_REQ] * num_reqs + k[C_PER_TOKEN] * num_tokens + k[C_QUANT]
    if mode == 0 and k[C_EAGER_AR] != 0.0:
        overhead += k[C_EAGER_AR]
    dispatch = k[C_DISPATCH0 + 2 * mode]
    fixed = k[C_FIXED0 + 2 * mode]
    cpu = k[C_CPU_STEP] + k[C_CPU_REQ] * num_running + k[C_CPU_NEW] * num_new
    wall = combine(kernels, overhead, dispatch, cpu, int(k[C_COMBINE]))
    parts[P_WEIGHTS] += lin + overhead - fixed
    parts[P_ATTN] += attn
    parts[P_KV] += kv
    parts[P_COMM] += com
    parts[P_LAUNCH] += fixed
    if dispatch:
        parts[P_LAUNCH] += max(dispatch - kernels - (overhead if k[C_ASYNC_ONE] != 0.0 else 0.0), 0.0)
    return wall


@njit
def price_span(nrun, steps, until, ctx0, window, sizes, L, moe, k, kern, cum, parts):
    """A span of up to ``steps`` pure-decode steps of ``nrun`` requests reading ``ctx0`` tokens of context in its first
    step, stopped after the first step that ends at or after ``until`` (`StepCost.decode_span_until`), its parts added
    to ``parts`` (`StepCost.add_span_parts`). Fills ``kern`` (the kernels' time per step) and ``cum`` (the span's
    cumulative time per step, when it is longer than one element). ``window``: the sliding window (0: none).

    Returns (steps taken, the span's time, its first step's end, its last step's time)."""
    pb = padded(nrun, sizes)
    lin = linear(pb, nrun, L, moe)
    com = comm(pb, L)
    bterm = lin + com
    mode = 0 if nrun > k[C_MAX_GRAPH] else 2
    overhead = k[C_STEP] + k[C_PER_REQ] * nrun + k[C_PER_TOKEN] * nrun + k[C_QUANT]
    if mode == 0 and k[C_EAGER_AR] != 0.0:
        overhead += k[C_EAGER_AR]
    dispatch = k[C_DISPATCH0 + 2 * mode]
    fixed = k[C_FIXED0 + 2 * mode]
    cpu = k[C_CPU_STEP] + k[C_CPU_REQ] * nrun + k[C_CPU_NEW] * 0
    kv_rate = k[C_KV_TOKEN] / k[C_KV_RATE]
    combine_mode = int(k[C_COMBINE])
    cap = nrun * float(window) if window else np.inf
    record = cum.shape[0] > 1
    t = 0.0
    dt = 0.0
    t0 = 0.0
    kk = 0
    for j in range(steps):
        ctx = ctx0 + nrun * float(j)
        kn = bterm + (ctx if ctx <= cap else cap) * kv_rate
        kern[j] = kn
        dt = combine(kn, overhead, dispatch, cpu, combine_mode)
        t = dt if j == 0 else t + dt
        if record:
            cum[j] = t
        if j == 0:
            t0 = t
        kk = j + 1
        if t >= until:
            break
    parts[P_WEIGHTS] += kk * (lin + overhead - fixed)
    parts[P_COMM] += kk * com
    if window:  # the context stops growing at the window: the kernels' sum (numpy's pairwise) less the rest
        parts[P_KV] += pairwise_sum(kern, 0, kk) - kk * (lin + com)
    else:
        parts[P_KV] += (kk * ctx0 + nrun * kk * (kk - 1) / 2.0) * kv_rate
    parts[P_LAUNCH] += kk * fixed
    if dispatch != 0.0:  # np.maximum(dispatch - kernels - overlapped, 0).sum()
        ov = overhead if k[C_ASYNC_ONE] != 0.0 else 0.0
        for j in range(kk):
            kern[j] = max(dispatch - kern[j] - ov, 0.0)
        parts[P_LAUNCH] += pairwise_sum(kern, 0, kk)
    return kk, t, t0, dt
