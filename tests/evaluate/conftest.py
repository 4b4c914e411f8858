"""A stand-in for the real tier: the simulator's telemetry scaled down, recorded greedy tokens, and who ran where.

It has `RealTier`'s interface (``measure_all``, ``last_rows``, ``last_pgid``, ``engine_version``), so
the promote stage and ``promote_on_submit`` run their real code around it without vLLM.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from rsi_env.engine import EngineConfig, load_hardware, load_model, load_workload
from rsi_env.engine.telemetry import Telemetry
from rsi_env.real.gc_pauses import gc_mode
from rsi_env.sim import simulate

_RATES = ("req_per_s", "out_tok_per_s", "total_tok_per_s", "goodput_req_per_s")


class FakeRealTier:
    """Real = sim x ``scale`` on every rate; tokens differ from the defaults' only where kv_cache_dtype is fp8."""

    name = "real"
    scale = 0.8
    sleep_s = 0.3
    lock = threading.Lock()
    running = 0
    max_running = 0
    calls: list[dict[str, Any]] = []
    scheduled_keys: list[dict[str, Any]] = []
    refuse: dict[str, Any] | None = None  # flags a configuration must set to be refused (as vLLM would)

    def __init__(self, *, timeout_s: float = 900.0, record_tokens: int = 0, env: dict[str, str] | None = None,
                 gc: str | None = None, engine: str = "vllm", **_: Any) -> None:
        self.timeout_s, self.record_tokens, self.env = timeout_s, record_tokens, dict(env or {})
        self.gc = gc_mode(engine, gc)
        self.engine_version = "fake-0.26"
        self.last_rows: list[dict[str, Any]] = []
        self.last_pgid: int | None = None

    def record_fields(self, *_: Any) -> None:
        return None  # a stand-in: nothing of it goes to the experience store

    @classmethod
    def reset(cls) -> None:
        cls.running = cls.max_running = 0
        cls.calls = []
        cls.scheduled_keys = []
        cls.refuse = None

    def scheduled(self, policy_keys: Any) -> Any:
        """As `RealTier.scheduled`: the same stand-in, each call recording the policy's keys it ran with."""
        tier = self

        class Scheduled:
            name, engine_version = "real", tier.engine_version

            def measure_all(self, *args: Any) -> list[Telemetry]:
                with FakeRealTier.lock:
                    FakeRealTier.scheduled_keys.append(dict(policy_keys))
                return tier.measure_all(*args)

        return Scheduled()

    def measure_all(self, engine_config: Any, model: Any, hardware: Any, workloads: Any) -> list[Telemetry]:
        cfg = engine_config if isinstance(engine_config, EngineConfig) else EngineConfig.from_dict(engine_config)
        with FakeRealTier.lock:
            FakeRealTier.running += 1
            FakeRealTier.max_running = max(FakeRealTier.max_running, FakeRealTier.running)
            FakeRealTier.calls.append({"flags": cfg.to_dict(only_set=True), "env": dict(self.env),
                                       "timeout_s": self.timeout_s, "hardware": load_hardware(hardware).name,
                                       "gc": self.gc})
        try:
            time.sleep(self.sleep_s)
            flags = cfg.to_dict(only_set=True)
            if self.refuse is not None and all(flags.get(k) == v for k, v in self.refuse.items()):
                self.last_rows = []
                return [Telemetry.failed("invalid_config: refused by the stand-in", tier="real") for _ in workloads]
            tels, rows = [], []
            for w in (load_workload(x) for x in workloads):
                t = simulate(cfg, load_model(model), load_hardware(hardware), w, engine_version="0.26")
                t = replace(t, tier="real", calibration=None, **{k: getattr(t, k) * self.scale for k in _RATES})
                shift = 1 if cfg.kv_cache_dtype == "fp8" else 0
                toks = {str(i): [(i * 7 + k + shift) % 50 for k in range(6)] for i in range(self.record_tokens)}
                tels.append(t)
                rows.append({"workload": w.name, "startup_s": 1.5, "host": {"cpu": "stand-in", "cpu_probe_ms": 12.0},
                             "counters": {"output_token_ids": toks, "cpu_probe_ms": 12.5},
                             "steps": {"t": [0.01, 0.02], "tokens": [len(toks), 1]}})
            self.last_rows = rows
            return tels
        finally:
            with FakeRealTier.lock:
                FakeRealTier.running -= 1


@pytest.fixture
def fake_real_tier() -> type[FakeRealTier]:
    """The `FakeRealTier` class, its counters reset."""
    FakeRealTier.reset()
    return FakeRealTier
