"""Per-step trace of the real engine: what each engine step scheduled, how it ran, and when it ended.

End-to-end numbers (throughput, TTFT, TPOT) mix every cost the engine has; the simulator's step cost is
calibrated better from what each step did. vLLM hands its stat loggers, once per engine step, the
scheduler's stats (running and waiting requests, KV-cache use, and with ``cudagraph_metrics`` on the
step's token count, its padded size and whether it ran a full CUDA graph, a piecewise one or none; with
``enable_logging_iteration_details`` on, what the step scheduled: its prompt (context) requests and tokens and
its decode requests) and the frontend's iteration stats (tokens generated, requests preempted). vLLM 0.26 runs
dense models on its V2 model runner, which reports no CUDA-graph stats: there the step's token count comes
from the iteration details (prompt tokens plus decode requests), and its CUDA-graph mode stays unknown (-1).
`StepTrace` keeps those, stamped with the time the frontend received the step's outputs: while the engine is
busy, the gaps between stamps are its step times (as Vidur profiles operators, here the unit is the whole step).
Beside that stamp, ``engine_itl`` is the median inter-token latency of the step's decode requests as the engine
core timed them (vLLM stamps each step's outputs in the engine-core process; `IterationStats` takes the
differences): where it differs from the frontend's gap, the frontend, not the engine, set the pace.

A trace is kept in columns (lists of numbers), sliced per workload by `StepTrace.since`, and written in
the driver's JSON row as ``steps``. The logger is built through `stat_logger_factory`, which imports vLLM
only when called; the interfaces it reads are not stable in vLLM, so every field is read defensively
and a missing one is recorded as -1.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from rsi_env.engine.telemetry import GRAPH_MODES

__all__ = ["COLUMNS", "StepTrace", "stat_logger_factory"]

COLUMNS = ("t", "tokens", "padded", "mode", "gen", "running", "waiting", "kv", "preempted", "prefill_reqs",
           "prefill_tokens", "decode_reqs", "engine_itl")


class StepTrace:
    """Columns of per-step numbers (see `COLUMNS`), appended by the stat logger."""

    def __init__(self) -> None:
        self.cols: dict[str, list[float]] = {c: [] for c in COLUMNS}
        self.t0 = time.perf_counter()

    def __len__(self) -> int:
        return len(self.cols["t"])

    def add(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        cg = getattr(scheduler_stats, "cudagraph_stats", None)
        mode = str(getattr(cg, "runtime_mode", "")).rsplit(".", 1)[-1] if cg is not None else ""
        it = getattr(scheduler_stats, "iteration_details", None)
        ctx_reqs = int(getattr(it, "num_ctx_requests", -1)) if it is not None else -1
        ctx_tokens = int(getattr(it, "num_ctx_tokens", -1)) if it is not None else -1
        dec_reqs = int(getattr(it, "num_generation_requests", -1)) if it is not None else -1
        dec_tokens = int(getattr(it, "num_generation_tokens", -1)) if it is not None else -1
        tokens = getattr(cg, "num_unpadded_tokens", -1) if cg is not None else -1
        if tokens == -1 and ctx_tokens >= 0 and dec_tokens >= 0:
            tokens = ctx_tokens + dec_tokens
        itls = list(getattr(iteration_stats, "inter_token_latencies_iter", None) or [])
        row = {
            "t": round(time.perf_counter() - self.t0, 6),
            "tokens": tokens,
            "padded": getattr(cg, "num_padded_tokens", -1) if cg is not None else -1,
            "mode": GRAPH_MODES.get(mode, -1),
            "gen": getattr(iteration_stats, "num_generation_tokens", 0) if iteration_stats is not None else 0,
            "running": getattr(scheduler_stats, "num_running_reqs", -1) if scheduler_stats is not None else -1,
            "waiting": getattr(scheduler_stats, "num_waiting_reqs", -1) if scheduler_stats is not None else -1,
            "kv": round(float(getattr(scheduler_stats, "kv_cache_usage", -1.0)), 5)
            if scheduler_stats is not None else -1,
            "preempted": getattr(iteration_stats, "num_preempted_reqs", 0) if iteration_stats is not None else 0,
            "prefill_reqs": ctx_reqs, "prefill_tokens": ctx_tokens, "decode_reqs": dec_reqs,
            "engine_itl": round(float(statistics.median(itls)), 6) if itls else -1,
        }
        for c in COLUMNS:
            self.cols[c].append(row[c])

    def since(self, start: int, t_origin: float = 0.0) -> dict[str, list[float]]:
        """The columns from step ``start`` on, times shifted to ``t_origin`` (seconds since the trace began)."""
        out = {c: v[start:] for c, v in self.cols.items()}
        out["t"] = [round(t - t_origin, 6) for t in out["t"]]
        return out


def stat_logger_factory(trace: StepTrace) -> Any:
    """A vLLM stat-logger factory (``AsyncLLM.from_vllm_config(stat_loggers=[...])``) that feeds ``trace``."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _StepLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
                   engine_idx: int = 0) -> None:
            if scheduler_stats is not None or iteration_stats is not None:
                trace.add(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            pass

    return _StepLogger
