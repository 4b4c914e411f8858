"""RSI/BugFix-v0's tier: the workspace's engine modules run in a fresh sandbox, judged against the clean engine."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.tier import LRU
from rsi_env.engine.workload import Workload
from rsi_env.tasks.bugfix.checks import BenchResult, bench

__all__ = ["WorkspaceTier", "files_hash"]


def files_hash(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


class WorkspaceTier:
    """The sim tier for a workspace's engine code: the workspace's modules run in a fresh sandbox.

    ``source()`` gives the engine files to measure; ``last`` keeps the last bench (its symptoms
    go to the observation) and ``last_hash`` which files it measured. The report comes from a process
    that ran the agent's code, so the telemetry it gives is `BenchResult.trusted`: the clean engine's
    (simulated here) on a workload the engine served exactly as the clean engine does, else the report
    with its output rate below the throughput floor — a rate the agent's code could have written
    never pays what a real fix earns. Benches are remembered by file text and configuration, except
    while ``fresh`` (a submission's, run from a clean start).
    """

    name = "sim"

    def __init__(self, engine_version: str, source: Callable[[], dict[str, str]], backend: str,
                 capacity: int = 256) -> None:
        self.engine_version = engine_version
        self.source = source
        self.backend = backend
        self.last: BenchResult | None = None
        self.last_hash: str | None = None
        self.fresh = False
        self.cache: LRU[str, BenchResult] = LRU(capacity)

    def measure_all(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]:
        files = self.source()
        self.last_hash = files_hash(files)
        key = json.dumps([self.last_hash, self.backend, self.engine_version, model.name, hw.name, cfg.to_dict(),
                          [w.content_hash for w in workloads]], sort_keys=True, default=str)
        hit = None if self.fresh else self.cache.get(key)
        if hit is None:
            hit = bench(files, cfg, model.name, hw.name, workloads, self.backend, self.engine_version)
            if not hit.timed_out:
                self.cache.put(key, hit)
        self.last = hit
        return self.last.trusted()
