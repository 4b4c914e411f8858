"""The real engine's `Profile`: a profiler trace of sampled steps, aggregated by kernel and op name, scaled to the run.

vLLM's profiler hooks (``profiler_config``, ``start_profile``/``stop_profile``) run ``torch.profiler`` in the
worker and write a Chrome trace. In it each model execution is a ``user_annotation`` named after what the step
scheduled (``execute_context_N(T)_generation_M(G)``), and the device's work is its kernels (``kernel``,
``gpu_memcpy``, ``gpu_memset`` events) — or, on the CPU build, the worker thread's top-level ops. `sample_trace`
walks the trace's timeline from the first step to the last:

- the device's busy time goes to a part by the kernel's or op's name (`part_of`): collectives ``comm``, KV-cache
  writes ``kv_read``, attention ``attention`` (``kv_read`` in a decode-only step, which reads the cache and
  computes no prompt), everything else ``weights`` (GEMMs and the kernels around them);
- where the device is idle, it waits for the host: inside a model execution for launches (``launch``: CPU time
  not covered by device work), outside it for the engine core's own work (``engine_cpu``), and while no request
  was in flight for arrivals (``idle``, from the replay's request times mapped onto the trace's clock).

Each slice of time is counted for the kind of step it belongs to (``prefill``: the step scheduled prompt tokens,
``decode``: it did not). `profile_of_run` scales the sample to a measured run: the run's busy time (a request in
flight) is split between the kinds by its own step trace, each kind's share into parts by that kind's sampled
fractions, and the run's idle time is ``idle``.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rsi_env.engine.profile import PARTS, Profile

__all__ = ["KINDS", "busy_intervals", "part_of", "profile_of_run", "read_trace", "sample_trace"]

KINDS = ("prefill", "decode")
_IDX = {p: k for k, p in enumerate(PARTS)}
_STEP = re.compile(r"^execute_.*?context_(\d+)")
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# Name fragments, in the order they are tried (lower case): the first match decides.
_RULES = (
    ("comm", ("nccl", "all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "cross_device",
              "all_to_all", "alltoall", "one_shot", "two_shot")),
    ("kv_read", ("reshape_and_cache", "kv_cache_update", "concat_and_cache", "copy_blocks", "swap_blocks",
                 "cache_kernel")),
    ("attention", ("attention", "attn", "flash_fwd", "flashattn", "fmha", "flashinfer", "batchprefill",
                   "batchdecode", "paged_", "mla_", "sdpa", "softmax_lse")),
)


def part_of(name: str) -> str:
    """The profile part a kernel's or op's time belongs to, by its name (``weights`` when nothing else matches)."""
    low = name.lower()
    for part, keys in _RULES:
        if any(k in low for k in keys):
            return part
    return "weights"


def read_trace(path: str | Path) -> dict[str, Any]:
    """A Chrome trace as ``torch.profiler`` writes it (``.json`` or ``.json.gz``)."""
    p = Path(path)
    text = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
    out: dict[str, Any] = json.loads(text)
    return out


def trace_epoch_s(trace: dict[str, Any]) -> float:
    """Seconds since the epoch of the trace's time 0 (its ``ts`` are microseconds after it)."""
    return float(trace.get("baseTimeNanoseconds", 0)) / 1e9


def busy_intervals(arrival: Sequence[float], finish: Sequence[float]) -> list[tuple[float, float]]:
    """The union of the requests' ``[arrival, finish]``: when at least one request was in flight, sorted."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(zip(arrival, finish, strict=True)):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((float(a), float(b)))
    return out


def _in(intervals: list[tuple[float, float]], starts: list[float], t: float) -> bool:
    k = bisect.bisect_right(starts, t) - 1
    return k >= 0 and t < intervals[k][1]


def _device_events(events: list[dict[str, Any]], threads: set[Any]) -> list[tuple[float, float, str]]:
    """(start, end, name) of the device's work: kernels and copies, or on a CPU build the worker's top-level ops."""
    dev = [e for e in events if e.get("cat") in _DEVICE_CATS and e.get("ph") == "X"]
    if not dev:  # no accelerator in the trace: the ops run on the worker's own thread
        ops = sorted((e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"
                      and (e.get("pid"), e.get("tid")) in threads), key=lambda e: (e["ts"], -e.get("dur", 0)))
        top, end = [], -np.inf
        for e in ops:
            if e["ts"] >= end:  # not nested in the previous top-level op
                top.append(e)
                end = e["ts"] + e.get("dur", 0)
        dev = top
    return sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), str(e.get("name", ""))) for e in dev)


def sample_trace(trace: dict[str, Any], idle_epoch: Iterable[tuple[float, float]] = ()) -> dict[str, list[float]]:
    """Seconds per part (`PARTS` order) of a trace's steps, by kind of step (`KINDS`; a kind with no step absent).

    ``idle_epoch``: the intervals (seconds since the epoch) in which no request was in flight; device idle time in
    them is ``idle``. The timeline runs from the first step's start to the end of its last step's device work.
    """
    events = trace.get("traceEvents", [])
    steps = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), int(m.group(1)) > 0, e.get("pid"),
                    e.get("tid")) for e in events
                   if e.get("ph") == "X" and e.get("cat") == "user_annotation" and (m := _STEP.match(str(e.get("name")))))
    if not steps:
        return {}
    threads = {(s[3], s[4]) for s in steps}
    starts = [s[0] for s in steps]
    windows = [(s[0], s[1]) for s in steps]
    prefill = [s[2] for s in steps]
    t0 = starts[0]
    dev = [d for d in _device_events(events, threads) if d[1] > t0]
    t_end = max([windows[-1][1]] + [d[1] for d in dev if d[0] >= starts[-1]])
    base = trace_epoch_s(trace)
    idle = sorted(((a - base) * 1e6, (b - base) * 1e6) for a, b in idle_epoch if b > a)
    idle_starts = [a for a, _ in idle]
    # Where a wait may change part or kind: a step starts, a model execution ends, an idle interval starts or ends.
    cuts_all = sorted({*starts, *(w[1] for w in windows), *(x for iv in idle for x in iv)})
    out = {k: [0.0] * len(PARTS) for k in KINDS}

    def kind(t: float) -> str:
        k = max(bisect.bisect_right(starts, t) - 1, 0)
        return "prefill" if prefill[k] else "decode"

    def wait(a: float, b: float) -> None:
        """The device idle in [a, b): split where a step, a model execution or an idle interval starts or ends."""
        cuts = [a, *cuts_all[bisect.bisect_right(cuts_all, a):bisect.bisect_left(cuts_all, b)], b]
        for x, y in zip(cuts, cuts[1:], strict=False):
            mid = 0.5 * (x + y)
            if idle and _in(idle, idle_starts, mid):
                part = "idle"
            elif _in(windows, starts, mid):
                part = "launch"
            else:
                part = "engine_cpu"
            out[kind(mid)][_IDX[part]] += (y - x) / 1e6

    cursor = t0
    for s, e, name in dev:
        if s >= t_end:
            break
        a, b = max(s, cursor), min(e, t_end)
        if a > cursor:
            wait(cursor, a)
        if b > a:
            k = kind(a)
            part = part_of(name)
            if part == "attention" and k == "decode":
                part = "kv_read"  # a decode-only step's attention reads the KV cache
            out[k][_IDX[part]] += (b - a) / 1e6
            cursor = b
    if t_end > cursor:
        wait(cursor, t_end)
    sampled = {"prefill" if p else "decode" for p in prefill}
    return {k: v for k, v in out.items() if k in sampled}


def merge_samples(samples: Iterable[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Several traces' samples (a workload's profiled windows), part by part and kind by kind."""
    out: dict[str, list[float]] = {}
    for s in samples:
        for k, v in s.items():
            acc = out.setdefault(k, [0.0] * len(PARTS))
            for i, x in enumerate(v):
                acc[i] += x
    return out


def _fractions(seconds: Sequence[float]) -> list[float] | None:
    busy = [0.0 if p == "idle" else x for p, x in zip(PARTS, seconds, strict=True)]
    total = sum(busy)
    return [x / total for x in busy] if total > 0 else None


def profile_of_run(sample: dict[str, list[float]], arrival: Sequence[float], finish: Sequence[float],
                   step_t: Sequence[float] = (), step_prefill_tokens: Sequence[float] = ()) -> Profile:
    """A measured run's `Profile` from a sample of its steps (`sample_trace`), its requests' times and its step trace.

    The run's busy time (a request in flight) is split between prefill and decode steps by the step trace
    (``step_t``: each step's end, on the requests' clock; ``step_prefill_tokens``: its prompt tokens, -1 if
    unknown), each kind's share into parts by the kind's sampled fractions (the pooled sample's where a kind was not
    sampled); the rest of the run, from its first arrival to its last finish, is ``idle``. An empty sample gives
    the empty profile.
    """
    total_sample = [sum(v[i] for v in sample.values()) for i in range(len(PARTS))]
    pooled = _fractions(total_sample)
    if pooled is None or not len(arrival):
        return Profile()
    busy_iv = busy_intervals(arrival, finish)
    busy = sum(b - a for a, b in busy_iv)
    span = max(finish) - min(arrival)
    share = _kind_shares(busy_iv, step_t, step_prefill_tokens)
    seconds = [0.0] * len(PARTS)
    for k, frac_k in share.items():
        frac = _fractions(sample[k]) if k in sample else None
        for i, f in enumerate(frac or pooled):
            seconds[i] += busy * frac_k * f
    seconds[_IDX["idle"]] = max(span - busy, 0.0)
    return Profile.from_seconds(seconds)


def _kind_shares(busy_iv: list[tuple[float, float]], step_t: Sequence[float],
                 step_prefill_tokens: Sequence[float]) -> dict[str, float]:
    """Shares of the busy time in prefill and decode steps: each step's time since the previous step's end (or since
    its busy interval began), by whether it scheduled prompt tokens. Without a usable step trace: all pooled."""
    if not len(step_t) or len(step_t) != len(step_prefill_tokens) or min(step_prefill_tokens) < 0:
        return {"pooled": 1.0}
    starts = [a for a, _ in busy_iv]
    time_by = {k: 0.0 for k in KINDS}
    prev = -np.inf
    for t, pt in zip(step_t, step_prefill_tokens, strict=True):
        k = bisect.bisect_right(starts, t) - 1
        begin = max(prev, starts[k]) if k >= 0 else prev
        if np.isfinite(begin) and t > begin:
            time_by["prefill" if pt > 0 else "decode"] += t - begin
        prev = t
    total = sum(time_by.values())
    return {k: v / total for k, v in time_by.items() if v > 0} if total > 0 else {"pooled": 1.0}
