"""Real engine steps grouped by what they ran, and priced by the simulator's cost model.

A real row's step trace (`rsi_env.real.step_trace`) says, since the seventh lease, what every step scheduled: its
prompt requests and tokens and its decode requests (vLLM's iteration details). Grouped by how vLLM ran them —
one full CUDA graph (decode only, within the largest captured size), piecewise graphs (prompt tokens within it)
or none (past it) — and by decode requests, their median time checks the cost model with no queueing in
between: `price` prices a group's mean composition with `StepCost`, and ``benchmarks/step_cost.py`` sets the two
side by side per model. (Tried as targets of the timing fit beside the end-to-end numbers: no better on unseen
measurements, so the fit does not use them.)

The trace does not carry each decode request's context: it is taken as the workload's mean prompt plus half its
mean output. Workloads whose contexts that would misstate (long prompts, prefill chunks, shared prefixes) give no
groups (`WORKLOADS`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from rsi_env.engine.workload import Workload
from rsi_env.sim.cost import GRAPH_MODES, StepCost

__all__ = ["DECODE_BINS", "StepGroup", "decode_bin", "price", "step_groups"]

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
    decode_ctx: float  # context tokens each decode request reads (the workload's mean, see the module)
    real_s: float  # median time between a step's output and the previous one's
    n: int


def decode_bin(decode_reqs: float) -> int:
    """The lower edge of the `DECODE_BINS` bin that holds ``decode_reqs`` (a group's mean stays in its bin)."""
    return next(a for a, b in DECODE_BINS if a <= decode_reqs < b)


def step_groups(row: dict[str, Any]) -> tuple[StepGroup, ...]:
    """The groups of a real row's step trace; none where the trace has no compositions or the workload is not
    one of `WORKLOADS`."""
    steps = row.get("steps") or {}
    if row.get("workload") not in WORKLOADS or max(steps.get("decode_reqs") or [-1]) < 0:
        return ()
    resolved = row.get("resolved") or {}
    sizes = resolved.get("cudagraph_capture_sizes") or []
    max_graph = 0 if resolved.get("enforce_eager") else max(sizes, default=0)
    trace = Workload.from_dict(row["workload_spec"]).trace()
    ctx = float(np.mean(trace.prompt_len) + np.mean(trace.output_len) / 2)
    t = np.asarray(steps["t"], dtype=float)
    cols = {c: np.asarray(steps[c], dtype=float) for c in ("tokens", "decode_reqs", "prefill_reqs",
                                                            "prefill_tokens", "running")}
    members: dict[tuple[int, int], list[int]] = defaultdict(list)
    for k in range(1, len(t)):
        tokens, dec = cols["tokens"][k], cols["decode_reqs"][k]
        if tokens <= 0 or dec < 0 or t[k] - t[k - 1] > MAX_GAP_S:
            continue
        if tokens > max_graph:
            mode = GRAPH_MODES["NONE"]
        else:
            mode = GRAPH_MODES["FULL"] if cols["prefill_reqs"][k] == 0 else GRAPH_MODES["PIECEWISE"]
        members[(mode, decode_bin(dec))].append(k)
    out = []
    for (mode, _), idx in sorted(members.items()):
        if len(idx) < MIN_STEPS:
            continue
        ix = np.asarray(idx)
        mean = {c: float(v[ix].mean()) for c, v in cols.items()}
        out.append(StepGroup(mode, mean["tokens"], mean["decode_reqs"], mean["prefill_reqs"], mean["prefill_tokens"],
                             mean["running"], ctx, float(np.median(t[ix] - t[ix - 1])), len(idx)))
    return tuple(out)


def price(cost: StepCost, g: StepGroup) -> float:
    """The cost model's time for a step of the group's mean composition."""
    pairs = g.prefill_reqs * cost.chunk_pairs(g.prefill_tokens / g.prefill_reqs, 0) if g.prefill_reqs else 0.0
    tokens = max(1, round(g.tokens))
    return cost.step_time(tokens, max(1, round(g.decode_reqs + g.prefill_reqs)), round(g.running),
                          g.decode_reqs * g.decode_ctx, pairs, 0.0, g.mode == GRAPH_MODES["FULL"],
                          round(g.prefill_reqs))
