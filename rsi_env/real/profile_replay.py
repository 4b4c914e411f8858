"""Profile a measured workload's steps on the real engine: replay it with vLLM's torch profiler on for a few windows.

Profiling slows the steps it records (each op and kernel is logged), so the measurement itself runs without it;
afterwards the driver sends the same workload again (`replay_sample`) and turns vLLM's profiler
(``start_profile``/``stop_profile``; the engine is built with `profiler_config`) on for up to `WINDOWS` windows
of `WINDOW_STEPS` steps spread over the run (the whole replay when it is that short), then cancels what is left
of it. The replay's requests have the measured run's ids, so a scheduling policy's keys order them alike.
vLLM 0.26 creates its worker profiler, and annotates every step from then on, at the first
``start_profile``: the driver replays only after every workload was measured, so no measurement pays for that.
Each window's trace is aggregated by `rsi_env.real.profile_trace.sample_trace`; the replay's own request times
say when it had nothing in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from pathlib import Path
from typing import Any

from rsi_env.engine.profile import Profile
from rsi_env.engine.telemetry import RequestTimings
from rsi_env.engine.workload import Trace
from rsi_env.real.policy_keys import request_id
from rsi_env.real.profile_trace import busy_intervals, merge_samples, profile_of_run, read_trace, sample_trace
from rsi_env.real.schedule import run_schedule
from rsi_env.real.step_trace import StepTrace

__all__ = ["WINDOWS", "WINDOW_STEPS", "profile_run", "profiler_config", "replay_sample", "windows"]

WINDOWS = 4
WINDOW_STEPS = 16
_RANK0 = re.compile(r"(^|[_.])rank0\.")
_POLL_S = 0.002


def profiler_config(trace_dir: str | Path) -> Any:
    """vLLM's ``ProfilerConfig`` for `replay_sample`: torch's profiler, traces in ``trace_dir``, nothing extra recorded
    (no stacks, shapes or memory, no summary tables, no front-end trace), with the fields this vLLM has."""
    from vllm.config import ProfilerConfig

    wanted: dict[str, Any] = {
        "profiler": "torch", "torch_profiler_dir": str(Path(trace_dir).resolve()), "torch_profiler_with_stack": False,
        "torch_profiler_record_shapes": False, "torch_profiler_with_memory": False, "torch_profiler_with_flops": False,
        "torch_profiler_use_gzip": False, "torch_profiler_dump_cuda_time_total": False, "ignore_frontend": True}
    have = set(getattr(ProfilerConfig, "__dataclass_fields__", {})) or set(wanted)
    return ProfilerConfig(**{k: v for k, v in wanted.items() if k in have})


def windows(num_steps: int, count: int = WINDOWS, size: int = WINDOW_STEPS) -> list[tuple[int, int]]:
    """Step ranges ``[start, end)`` to profile in a run of ``num_steps`` steps: all of it when short, else ``count``
    windows of ``size`` steps starting at 0, 1/count, 2/count... of the run."""
    if num_steps <= count * size:
        return [(0, max(num_steps, 1))]
    return [(j * num_steps // count, j * num_steps // count + size) for j in range(count)]


def _rank0(files: list[Path]) -> list[Path]:
    """The traces of rank 0's worker (every worker writes one per window), or all where none is named so."""
    ranked = [f for f in files if _RANK0.search(f.name)]
    return sorted(ranked or files)


async def replay_sample(engine: Any, trace: Trace, vocab: int, tag: str, steps: StepTrace, num_steps: int,
                        trace_dir: str | Path, min_tokens: bool = True,
                        deadline: float = float("inf")) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Replay ``trace`` with the profiler on for the `windows` of a run of ``num_steps`` steps.

    Returns the merged sample (`sample_trace` per window) and what was done (windows, steps and files profiled).
    ``steps`` is the engine's step trace (its length counts the engine's steps as they end); ``min_tokens`` asks
    each request's length as the measurement did; past ``deadline`` (``time.perf_counter()``) no window starts and
    the open one is closed.
    """
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    folder = Path(trace_dir)
    before = set(folder.glob("*.pt.trace.json*"))
    n = len(trace)
    arrival = [float("nan")] * n
    finish = [float("nan")] * n
    epoch0, perf0 = time.time(), time.perf_counter()

    def now() -> float:
        return epoch0 + (time.perf_counter() - perf0)

    async def one(i: int, t0: float) -> None:
        sp = SamplingParams(max_tokens=int(trace.output_len[i]),
                            min_tokens=int(trace.output_len[i]) if min_tokens else 0, ignore_eos=True,
                            temperature=0.0, output_kind=RequestOutputKind.DELTA, detokenize=False)
        task = asyncio.current_task()
        if task is not None:
            sending.add(task)
        arrival[i] = now()
        try:
            async for _ in engine.generate(TokensPrompt(prompt_token_ids=trace.prompt_token_ids(i, vocab)), sp,
                                           request_id(tag, i)):
                pass
        finally:
            finish[i] = now()

    sending: set[asyncio.Task[Any]] = set()
    first = len(steps)
    plan = windows(num_steps)
    replay = asyncio.create_task(run_schedule(trace, one, time.perf_counter()))
    done_windows = []
    try:
        for a, b in plan:
            while len(steps) - first < a and not replay.done() and time.perf_counter() < deadline:
                await asyncio.sleep(_POLL_S)
            if replay.done() or time.perf_counter() >= deadline:
                break
            at = len(steps) - first
            await engine.start_profile()
            while len(steps) - first < b and not replay.done() and time.perf_counter() < deadline:
                await asyncio.sleep(_POLL_S)
            await engine.stop_profile()
            done_windows.append((at, len(steps) - first))
    finally:
        # What is left of the replay is cancelled: vLLM aborts a request whose stream is cancelled.
        pending = [t for t in (replay, *sending) if not t.done()]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    if not replay.cancelled() and replay.exception() is not None:
        raise RuntimeError(f"the profiling replay failed: {replay.exception()!r}")
    t_end = now()
    fin = [f if f == f else t_end for f in finish]  # a cancelled request was in flight until the cancel
    sent = [(a, f) for a, f in zip(arrival, fin, strict=True) if a == a]
    busy = busy_intervals([a for a, _ in sent], [f for _, f in sent])
    idle = [(x[1], y[0]) for x, y in zip(busy, busy[1:], strict=False)]
    files = _rank0(sorted(set(folder.glob("*.pt.trace.json*")) - before))
    sample = merge_samples(sample_trace(read_trace(f), idle) for f in files)
    info = {"windows": done_windows, "trace_files": len(files), "requests_sent": len(sent),
            "sampled_s": {k: round(sum(v), 6) for k, v in sample.items()}}
    for f in files:  # traces are large: kept only until aggregated
        with contextlib.suppress(OSError):
            f.unlink()
    return sample, info


async def profile_run(engine: Any, trace: Trace, vocab: int, tag: str, steps: StepTrace, timings: RequestTimings,
                      step_cols: dict[str, list[float]], trace_dir: str | Path, min_tokens: bool = True,
                      deadline: float = float("inf")) -> tuple[Profile, dict[str, Any]]:
    """The measured run's `Profile` (`profile_of_run`) from a profiled replay of its trace, and what the replay did.

    A replay that fails, or that ``deadline`` (``time.perf_counter()``) leaves no time for, leaves the profile empty
    and says why in ``error``: the measurement stands without it.
    """
    if time.perf_counter() >= deadline:
        return Profile(), {"error": "not profiled: the driver's --profile-deadline-s had passed"}
    try:
        await engine.reset_prefix_cache()
        sample, info = await replay_sample(engine, trace, vocab, tag, steps, len(step_cols.get("t", [])), trace_dir,
                                           min_tokens, deadline)
    except Exception as exc:  # the profile is an extra: its failure must not cost the measurement
        return Profile(), {"error": f"{type(exc).__name__}: {exc}"[:300]}
    if not sample:
        return Profile(), {**info, "error": "the profiler recorded no engine step"}
    prof = profile_of_run(sample, timings.arrival.tolist(), timings.finish.tolist(), step_cols.get("t", []),
                          step_cols.get("prefill_tokens", []))
    return prof, info
