"""RSI/VLLMBugFix-v0's tier: the workspace's vLLM serves the episode's workloads in a fresh sandbox.

`EngineWorkspaceTier.measure_all` runs the harness on the workspace's ``engine_args.yaml`` and its copies
of the instance's vLLM modules (`rsi_env.tasks.vllm_bugfix.runs.run_engine`), one phase per workload,
and turns each phase into a `Telemetry` (`phase_telemetry`): latencies from the requests' own times,
rates per engine-second (the supervisor's own times of a phase's repetitions,
`rsi_env.tasks.vllm_bugfix.runs.phase_seconds`), preemptions and prefix-cache hits from vLLM's
counters. The same job on the clean vLLM (`rsi_env.tasks.vllm_bugfix.runs.clean_run`) is measured
beside it, and the rest of the report, which a process running the agent's code wrote, is held to it:
a workload counts at most the clean engine's rate, and at most `UNVERIFIED_RATE` of it unless it was
served exactly as the clean engine serves it (the same tokens, steps, preemptions and prefix-cache
counters). Benches are remembered by file text (the instance's own starting files on disk, per vLLM
version), except while ``fresh`` (a submission's).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.telemetry import RequestTimings, Telemetry, summarize
from rsi_env.engine.tier import LRU
from rsi_env.engine.workload import SLO, Workload
from rsi_env.errors import RsiEnvError
from rsi_env.tasks.vllm_bugfix.checks import clean_deployment, served
from rsi_env.tasks.vllm_bugfix.harness import summary
from rsi_env.tasks.vllm_bugfix.runs import (
    TIMEOUT_S,
    EngineRun,
    cache_dir,
    clean_run,
    engine_seconds,
    harness_text,
    job_for,
    phase_seconds,
    run_engine,
)

__all__ = ["UNVERIFIED_RATE", "BenchResult", "EngineWorkspaceTier", "Source", "files_hash", "judge_bench",
           "phase_telemetry"]

UNVERIFIED_RATE = 0.97  # a workload not served as the clean engine serves it counts at most this share of its rate
_SAME = ("tokens", "steps", "preemptions", "prefix_hits", "prefix_queries")
_OOM = ("out of memory", "can't allocate memory", "cannot allocate memory", "MemoryError", "OutOfMemory")

# The workspace's engine: its files (``engine_args.yaml`` and the module copies) and the modules they shadow.
Source = Callable[[], tuple[dict[str, str], tuple[str, ...]]]


def files_hash(files: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(files), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class BenchResult:
    """A bench: the telemetry the reward reads, the clean engine's on the same job, and what an engineer sees."""

    telemetry: list[Telemetry]
    clean: list[Telemetry]
    report: str
    verified: list[bool] = field(default_factory=list)
    timed_out: bool = False


def _error_kind(run: EngineRun) -> str:
    """``Telemetry.error`` for a run that did not serve: ``oom``, ``invalid_config: ...``, ``timeout`` or ``crash: ...``."""
    if run.timed_out:
        return "timeout"
    why = served(run) or "the engine did not serve the job"
    if any(s in why for s in _OOM):
        return "oom"
    raw = run.out.get("error")
    err: dict[str, Any] = raw if isinstance(raw, dict) else {}
    head = f"{err.get('type', '')}: {str(err.get('message', ''))[:200]}" if err else why.splitlines()[0][:200]
    if err.get("stage") in ("start", "engine_args") and err.get("type") in ("ValueError", "TypeError",
                                                                             "ValidationError"):
        return f"invalid_config: {head}"
    return f"crash: {head}"


def phase_telemetry(reps: Sequence[Mapping[str, Any]], measured: Sequence[Mapping[str, Any]], w: Workload,
                    device: str | None, resolved: Mapping[str, Any], hw: HardwareSpec) -> Telemetry:
    """One workload's telemetry from its phase's repetitions and the supervisor's times of each (``measured``):
    rates from the fastest one's engine time, latencies and counters from its report; `ValueError`, `KeyError`,
    `TypeError` where the report does not describe the workload's requests."""
    stalled = [r["stalled"] for r in reps if r.get("stalled")]
    if stalled or not reps:
        return Telemetry.failed(f"crash: stalled: {str(stalled[0])[:200]}" if stalled else "crash: not served")
    if len(measured) != len(reps):
        raise ValueError(f"{w.name}: {len(measured)} repetitions timed, {len(reps)} reported")
    best = reps[min(range(len(reps)), key=lambda k: engine_seconds(measured[k], device))]
    trace = w.trace()
    first = np.array([math.nan if t is None else float(t) for t in best["first"]])
    finish = np.array([math.nan if t is None else float(t) for t in best["finish"]])
    if len(first) != len(trace) or len(finish) != len(trace):
        raise ValueError(f"{w.name}: the report's times are not one per request")
    if not (np.all(np.isfinite(first)) and np.all(np.isfinite(finish))):
        return Telemetry.failed("crash: a request never finished")
    q = float(best["prefix_queries"])
    tel = summarize(RequestTimings(np.zeros(len(trace)), first, finish, trace.prompt_len, trace.output_len),
                    slo=SLO(), price_per_hour=hw.price_per_hour, num_gpus=1,
                    num_preemptions=int(round(float(best["preemptions"]))),
                    prefix_cache_hit_rate=float(best["prefix_hits"]) / q if q else 0.0,
                    num_gpu_blocks=int(resolved.get("num_gpu_blocks") or 0),
                    mean_batch_size=float(np.sum(trace.output_len)) / max(int(best["steps"]), 1), tier="real")
    secs = max(phase_seconds(measured, device), 1e-9)
    n, out_tok = len(trace), float(np.sum(trace.output_len))
    return replace(tel, req_per_s=n / secs, goodput_req_per_s=n / secs, out_tok_per_s=out_tok / secs,
                   total_tok_per_s=(out_tok + float(np.sum(trace.prompt_len))) / secs)


def _same(got: Sequence[Mapping[str, Any]], clean: Sequence[Mapping[str, Any]]) -> bool:
    return len(got) == len(clean) and all(g.get(k) == c.get(k) for g, c in zip(got, clean, strict=True) for k in _SAME)


def judge_bench(got: EngineRun, clean_out: Mapping[str, Any], workloads: Sequence[Workload],
                hw: HardwareSpec) -> BenchResult:
    """A bench's telemetry from the workspace's report, held to the clean engine's report on the same job.

    The report comes from a process that ran the agent's code: whatever it holds (a key missing, a list of the
    wrong length, a string for a number), a workload it does not describe is a failed one, never an exception.
    """
    device = clean_out.get("device")
    clean = [phase_telemetry(clean_out["phases"][w.name], clean_out["measured"][w.name], w, device,
                             clean_out["resolved"], hw) for w in workloads]
    why = served(got)
    report = _summary(got.out)
    if why is not None and not got.out.get("phases"):
        return BenchResult([Telemetry.failed(_error_kind(got))] * len(workloads), clean, (report + "\n" + why).strip(),
                           [False] * len(workloads), got.timed_out)
    tels, verified = [], []
    raw, timed = got.out.get("phases"), got.out.get("measured")
    phases: dict[str, Any] = raw if isinstance(raw, dict) else {}
    times: dict[str, Any] = timed if isinstance(timed, dict) else {}
    resolved = got.out.get("resolved")
    for w, c in zip(workloads, clean, strict=True):
        got_reps = phases.get(w.name)
        reps: list[Any] = got_reps if isinstance(got_reps, list) else []
        try:
            t = phase_telemetry(reps, times.get(w.name) or [], w, device, resolved if isinstance(resolved, dict) else {},
                                hw)
            same = _same(reps, clean_out["phases"][w.name])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            t, same = Telemetry.failed("crash: the engine's report of this workload is malformed"), False
        if t.ok and c.ok:
            cap = c.out_tok_per_s * (1.0 if same else UNVERIFIED_RATE)
            t = replace(t, out_tok_per_s=min(t.out_tok_per_s, cap))
        tels.append(t)
        verified.append(same)
    if why is not None:  # it failed after serving some phases: the rest failed with it
        tels = [t if t.ok else Telemetry.failed(_error_kind(got)) for t in tels]
        report += "\n" + why
    return BenchResult(tels, clean, report.strip(), verified, got.timed_out)


def _summary(out: Mapping[str, Any]) -> str:
    """The harness's summary of a report (what the agent's own run_engine.py prints), or why it cannot be read."""
    if not out:
        return ""
    try:
        return summary(dict(out))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return "the engine's report cannot be summarised (malformed)"


class EngineWorkspaceTier:
    """The real tier for a workspace's vLLM: the installed vLLM with the workspace's modules, in a fresh sandbox.

    ``source()`` gives the files to measure and the modules they shadow; ``starting`` the instance's own
    starting files (trusted: their benches are remembered on disk); ``last`` the last bench.
    """

    name = "real"

    def __init__(self, engine_version: str, source: Source, backend: str, reps: Mapping[str, int] | None = None,
                 timeout_s: float = TIMEOUT_S, capacity: int = 64) -> None:
        self.engine_version = engine_version
        self.source = source
        self.backend = backend
        self.reps = dict(reps or {})
        self.timeout_s = timeout_s
        self.starting: dict[str, str] = {}
        self.fresh = False
        self.last: BenchResult | None = None
        self.cache: LRU[str, BenchResult] = LRU(capacity)

    def measure_all(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]:
        files, shadowed = self.source()
        job = job_for(workloads, self.reps)
        key = files_hash({"files": json.dumps(files, sort_keys=True), "shadowed": ",".join(shadowed),
                          "job": json.dumps(job), "backend": self.backend, "harness": harness_text()})
        hit = None if self.fresh else self.cache.get(key)
        disk = cache_dir() / f"bench-{key[:32]}.json" if files == self.starting else None
        if hit is None and disk is not None and disk.is_file():
            hit = self._judge(EngineRun(json.loads(disk.read_text())), job, workloads, hw)
        if hit is None:
            got = run_engine(files, job, shadowed, self.backend, self.timeout_s)
            hit = self._judge(got, job, workloads, hw)
            if disk is not None and got.error is None:
                disk.parent.mkdir(parents=True, exist_ok=True)
                disk.write_text(json.dumps(got.out))
            if not hit.timed_out:
                self.cache.put(key, hit)
        self.last = hit
        return list(hit.telemetry)

    def _judge(self, got: EngineRun, job: Mapping[str, Any], workloads: Sequence[Workload],
               hw: HardwareSpec) -> BenchResult:
        return judge_bench(got, self._clean(job), workloads, hw)

    def _clean(self, job: Mapping[str, Any]) -> dict[str, Any]:
        run = clean_run(job, clean_deployment(), self.backend)
        why = served(run)
        if why is not None:
            raise RsiEnvError(f"the clean vLLM cannot serve the bench's workloads on this machine: {why[:800]}")
        return run.out
