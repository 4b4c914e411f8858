"""The cost model's per-iteration pricing (`StepCost.step_time`, `StepCost.decode_span_until`) compiled with numba.

Each function takes the constants `StepCost` precomputes as plain floats and ints, and does the same float operations
in the same order as the Python method, so the results can be compared with ``==``. ``combine_mode`` selects
`StepCost.combine`'s branch: 0 without async scheduling, 1 async on one process, 2 async on several.

numba is not a dependency of rsi_env: this module is imported only by the research benchmark beside it
(``PYTHONPATH`` on a ``pip install --target`` folder).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["decode_span_until_nb", "step_time_nb"]


@njit(cache=True, fastmath=False)
def _combine(kernels: float, overhead: float, dispatch: float, cpu: float, combine_mode: int) -> float:
    if combine_mode == 0:
        return max(kernels, dispatch) + overhead + cpu
    if combine_mode == 1:
        return max(kernels + overhead, dispatch + cpu)
    return max(max(kernels, dispatch) + overhead, cpu)


@njit(cache=True, fastmath=False)
def decode_span_until_nb(base: float, overhead: float, dispatch: float, cpu: float, cap: float, kv_rate: float,
                         ctx0: float, batch: int, steps: int, until: float, combine_mode: int,
                         cum: np.ndarray, kernels: np.ndarray) -> tuple[int, float]:
    """`StepCost.decode_span_until`'s step-by-step loop: fills ``cum`` and ``kernels``; returns (steps taken, last
    step's wall time)."""
    t = 0.0
    dt = 0.0
    n = 0
    for j in range(steps):
        ctx = ctx0 + batch * float(j)
        kern = base + (ctx if ctx <= cap else cap) * kv_rate
        kernels[j] = kern
        dt = _combine(kern, overhead, dispatch, cpu, combine_mode)
        t = dt if j == 0 else t + dt
        cum[j] = t
        n = j + 1
        if t >= until:
            break
    return n, dt


# `step_time_nb`'s constants, by position (`consts_of` fills them from a `StepCost`).
(C_STEP, C_PER_REQ, C_PER_TOKEN, C_QUANT, C_EAGER_AR, C_MAX_GRAPH, C_ATTN_PAIR, C_ATTN_RATE, C_KV_TOKEN, C_KV_RATE,
 C_CPU_STEP, C_CPU_REQ, C_CPU_NEW, C_ASYNC_ONE, C_COMBINE, C_DISPATCH0, C_FIXED0) = range(17)
N_CONSTS = C_DISPATCH0 + 3 * 2  # per graph mode: dispatch at C_DISPATCH0 + 2 * mode, launch's fixed part after it


def consts_of(cost: object) -> np.ndarray:
    """`StepCost`'s constants as `step_time_nb` reads them (per graph mode: dispatch, then launch's fixed part)."""
    c: object = cost
    cal = c.cal  # type: ignore[attr-defined]
    out = np.zeros(N_CONSTS)
    out[C_STEP], out[C_PER_REQ], out[C_PER_TOKEN], out[C_QUANT] = cal.step_s, cal.per_req_s, cal.per_token_s, \
        c._quant_s  # type: ignore[attr-defined]
    out[C_EAGER_AR] = 2.0 * cal.eager_allreduce_s * c._layers if c._tp > 1 else 0.0  # type: ignore[attr-defined]
    out[C_MAX_GRAPH] = c._max_graph  # type: ignore[attr-defined]
    out[C_ATTN_PAIR], out[C_ATTN_RATE] = c._attn_flops_per_pair, c._attn_rate  # type: ignore[attr-defined]
    out[C_KV_TOKEN], out[C_KV_RATE] = c._kv_bytes_per_token, c._kv_rate  # type: ignore[attr-defined]
    out[C_CPU_STEP], out[C_CPU_REQ], out[C_CPU_NEW] = cal.cpu_step_s, cal.cpu_per_req_s, cal.cpu_per_new_req_s
    for mode in range(3):
        out[C_DISPATCH0 + 2 * mode] = c._dispatch(mode)  # type: ignore[attr-defined]
        out[C_DISPATCH0 + 2 * mode + 1] = c._launch_fixed[mode]  # type: ignore[attr-defined]
    out[C_ASYNC_ONE] = float(c._async_one)  # type: ignore[attr-defined]
    out[C_COMBINE] = 0.0 if not c.cfg.async_scheduling else (1.0 if c._one_process else 2.0)  # type: ignore[attr-defined]
    return out


@njit(cache=True, fastmath=False)
def step_time_nb(lin: float, comm: float, num_tokens: int, num_reqs: int, num_running: int, decode_ctx: float,
                 prefill_pairs: float, prefill_ctx: float, uniform: bool, num_new: int, k: np.ndarray,
                 parts: np.ndarray) -> float:
    """`StepCost.step_time` after its memoised lookup of the linear layers and collectives (``lin``, ``comm``:
    `StepCost._batch`): the wall time, with the parts added to ``parts``. ``k``: `consts_of`."""
    attn = prefill_pairs * k[6] / k[7]
    kv = (decode_ctx + prefill_ctx) * k[8] / k[9]
    kernels = lin + comm + attn + kv
    mode = 0 if num_tokens > k[5] else 2 if uniform else 1
    overhead = k[0] + k[1] * num_reqs + k[2] * num_tokens + k[3]
    if mode == 0 and k[4] != 0.0:
        overhead += k[4]
    dispatch = k[15 + 2 * mode]
    fixed = k[16 + 2 * mode]
    cpu = k[10] + k[11] * num_running + k[12] * num_new
    wall = _combine(kernels, overhead, dispatch, cpu, int(k[14]))
    parts[0] += lin + overhead - fixed
    parts[1] += attn
    parts[2] += kv
    parts[3] += comm
    parts[5] += fixed
    if dispatch:
        parts[5] += max(dispatch - kernels - (overhead if k[13] != 0.0 else 0.0), 0.0)
    return wall
