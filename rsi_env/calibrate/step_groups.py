"""Real engine steps grouped by what they ran, and priced by the simulator's cost model.

A real row's step trace (`rsi_env.real.step_trace`) says what every step scheduled: its
prompt requests and tokens and its decode requests (vLLM's iteration details). Grouped by how vLLM ran them —
one full CUDA graph (decode only, within the largest captured size), piecewise graphs (prompt tokens within it)
or none (past it) — and by decode requests, their median time checks the cost model with no queueing in
between: `price` prices a group's mean composition with `StepCost`, and ``benchmarks/step_cost.py`` sets the two
side by side per model. (Tried as targets of the timing fit beside the end-to-end numbers: no better on unseen
measurements, so the fit does not use them.)

With async scheduling (vLLM's default) the engine core schedules and launches step k+1 while the GPU runs step k,
and only then emits step k's output: the CPU launches of a step outside a full CUDA graph show in the gap *before*
its output (on an H200, Llama-3.1-8B: a decode step followed by a piecewise one 15.0 ms then 6.0,
decode steps alone 6.2 ms; the engine core's own inter-token latencies agree). So a group is keyed by the next
step's mode as well, and `price` sets the next step's launches beside the group's kernels (its own without async
scheduling).

The trace does not carry each decode request's context: it is taken as the workload's mean prompt plus half its
mean output. Workloads whose contexts that would misstate (long prompts, prefill chunks, shared prefixes) give no
groups (`WORKLOADS`).

Traces from before vLLM's iteration details were recorded (the first leases) say only how many requests ran and how
many sampled a token each step; there, a step is taken as a decode of all the running requests where it and its two
neighbours ran and sampled the same number (`steady_decodes`: on traces that have the compositions the rule picks
decode-only steps 95-100 % of the time), and only such steps are grouped.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from rsi_env.engine.telemetry import GRAPH_MODES
from rsi_env.engine.workload import Workload
from rsi_env.sim.cost import StepCost

__all__ = ["DECODE_BINS", "StepGroup", "decode_bin", "price", "price_gap", "steady_decodes", "step_groups",
           "weighted_median"]

DECODE_BINS = ((0, 32), (32, 64), (64, 128), (128, 192), (192, 256), (256, 384), (384, 1 << 20))
# Short prompts, no shared prefix: a decode request's context is close to the workload's mean.
WORKLOADS = frozenset({"burst_256", "short_long", "many_small", "closed_short_long", "closed_many_small"})
MAX_GAP_S = 0.3  # a longer gap between two steps' outputs is the engine idle (or compiling), not a step
MIN_STEPS = 8


@dataclass(frozen=True)
class StepGroup:
    """Steps of one real run that ran alike (same CUDA-graph mode, decode requests in one bin): their mean
    composition and their median time."""

    mode: int  # a `GRAPH_MODES` code, as the real engine ran them (by its own largest captured size)
    tokens: float
    decode_reqs: float
    prefill_reqs: float
    prefill_tokens: float
    running: float
    next_mode: int  # how the next step ran (-1: none followed before the engine idled)
    next_tokens: float  # the next step's mean tokens (0 where none followed)
    decode_ctx: float  # context tokens each decode request reads (the workload's mean, see the module)
    real_s: float  # median time between a step's output and the previous one's
    n: int


def decode_bin(decode_reqs: float) -> int:
    """The lower edge of the `DECODE_BINS` bin that holds ``decode_reqs`` (a group's mean stays in its bin)."""
    return next(a for a, b in DECODE_BINS if a <= decode_reqs < b)


def steady_decodes(steps: dict[str, Any]) -> np.ndarray:
    """Which steps of a trace without compositions were decodes of every running request: those that ran and sampled
    the same number of requests as the steps on either side of them (no request joined, left or was chunked)."""
    gen = np.asarray(steps["gen"], dtype=float)
    run = np.asarray(steps["running"], dtype=float)
    out = np.zeros(gen.size, dtype=bool)
    if gen.size > 2:
        mid = gen[1:-1]
        out[1:-1] = ((mid > 0) & (mid == run[1:-1]) & (run[1:-1] == run[:-2]) & (run[1:-1] == run[2:])
                     & (gen[:-2] == mid) & (gen[2:] == mid))
    return out


def _compositions(steps: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """Each step's tokens, decode and prompt requests, prompt tokens and running requests: the trace's own, or for a
    trace without them its steady decode steps' (`steady_decodes`; the other steps marked as not read, -1)."""
    names = ("tokens", "decode_reqs", "prefill_reqs", "prefill_tokens", "running")
    if max(steps.get("decode_reqs") or [-1]) >= 0:
        return {c: np.asarray(steps[c], dtype=float) for c in names}
    if "gen" not in steps or "running" not in steps:
        return None
    steady = steady_decodes(steps)
    gen = np.asarray(steps["gen"], dtype=float)
    dec = np.where(steady, gen, -1.0)
    zero = np.where(steady, 0.0, -1.0)
    return {"tokens": np.where(steady, gen, 0.0), "decode_reqs": dec, "prefill_reqs": zero, "prefill_tokens": zero,
            "running": np.asarray(steps["running"], dtype=float)}


def step_groups(row: dict[str, Any]) -> tuple[StepGroup, ...]:
    """The groups of a real row's step trace; none where the workload is not one of `WORKLOADS` or the trace
    says nothing of what its steps ran (`_compositions`)."""
    steps = row.get("steps") or {}
    cols = _compositions(steps) if row.get("workload") in WORKLOADS else None
    if cols is None:
        return ()
    resolved = row.get("resolved") or {}
    sizes = resolved.get("cudagraph_capture_sizes") or []
    max_graph = 0 if resolved.get("enforce_eager") else max(sizes, default=0)
    trace = Workload.from_dict(row["workload_spec"]).trace()
    ctx = float(np.mean(trace.prompt_len) + np.mean(trace.output_len) / 2)
    t = np.asarray(steps["t"], dtype=float)
    def mode(k: int) -> int:
        if cols["tokens"][k] > max_graph:
            return GRAPH_MODES["NONE"]
        return GRAPH_MODES["FULL"] if cols["prefill_reqs"][k] == 0 else GRAPH_MODES["PIECEWISE"]

    def follows(k: int) -> bool:  # step k ran, right after the step before it (not after the engine idled)
        return cols["tokens"][k] > 0 and cols["decode_reqs"][k] >= 0 and t[k] - t[k - 1] <= MAX_GAP_S

    members: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for k in range(1, len(t)):
        if follows(k):
            nxt = mode(k + 1) if k + 1 < len(t) and follows(k + 1) else -1
            members[(mode(k), decode_bin(cols["decode_reqs"][k]), nxt)].append(k)
    out = []
    for (m, _, nxt), idx in sorted(members.items()):
        if len(idx) < MIN_STEPS:
            continue
        ix = np.asarray(idx)
        mean = {c: float(v[ix].mean()) for c, v in cols.items()}
        next_tokens = float(cols["tokens"][ix + 1].mean()) if nxt >= 0 else 0.0
        out.append(StepGroup(m, mean["tokens"], mean["decode_reqs"], mean["prefill_reqs"], mean["prefill_tokens"],
                             mean["running"], nxt, next_tokens, ctx, float(np.median(t[ix] - t[ix - 1])), len(idx)))
    return tuple(out)


def price(cost: StepCost, g: StepGroup) -> float:
    """The cost model's time for the gap before the output of a step of the group's mean composition (`price_gap`;
    its prompt chunks taken as first chunks, no context before them)."""
    pairs = g.prefill_reqs * cost.chunk_pairs(g.prefill_tokens / g.prefill_reqs, 0) if g.prefill_reqs else 0.0
    return price_gap(cost, max(1, round(g.tokens)), max(1, round(g.decode_reqs + g.prefill_reqs)),
                     g.decode_reqs * g.decode_ctx, pairs, 0.0, g.mode == GRAPH_MODES["FULL"],
                     (round(g.next_tokens), g.next_mode == GRAPH_MODES["FULL"]) if g.next_mode >= 0 else None,
                     round(g.running), round(g.prefill_reqs))


def price_gap(cost: StepCost, tokens: int, reqs: int, decode_ctx_tokens: float, prefill_pairs: float,
              prefill_ctx_tokens: float, full: bool, nxt: tuple[int, bool] | None, running: int, new: int) -> float:
    """The cost model's time for the gap before one step's output: its kernels and the engine core's CPU work beside
    the launches of the next step (``nxt``: its tokens and whether one full CUDA graph runs it; None where none
    followed) under async scheduling, or beside its own launches without it."""
    if not cost.cfg.async_scheduling:
        launches = cost.dispatch(tokens, full)
    else:
        launches = cost.dispatch(*nxt) if nxt is not None else 0.0
    kernels = cost.kernels(tokens, reqs, decode_ctx_tokens, prefill_pairs, prefill_ctx_tokens)
    return float(cost.combine(kernels, cost.overhead(tokens, reqs, full), launches, cost.cpu_time(running, new)))


def weighted_median(x: np.ndarray, weights: np.ndarray) -> float:
    """The value of ``x`` at half the total weight (groups of steps weighted by their steps)."""
    order = np.argsort(x)
    cum = np.cumsum(weights[order])
    return float(x[order][np.searchsorted(cum, cum[-1] / 2.0)])
