"""Endpoint mode: measure an OpenAI-compatible server that is already running (vLLM's or SGLang's).

This is how users measure their own deployments: the workload's exact token ids go to
``/v1/completions`` as streamed requests on the workload's arrival schedule, TTFT and TPOT are
timed from the stream, and the server's Prometheus ``/metrics`` are read before and after (and
sampled during the run) for preemptions, prefix-cache queries and hits, KV-cache usage and running
requests. The server's engine configuration is its own: this tier takes none.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec, load_hardware
from rsi_env.engine.model import ModelSpec, load_model
from rsi_env.engine.telemetry import RequestTimings, Telemetry, summarize
from rsi_env.engine.workload import Workload, load_workload
from rsi_env.errors import RsiEnvError
from rsi_env.real.schedule import run_schedule

__all__ = ["EndpointTier", "parse_prometheus"]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfaINFNa]+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum of each metric's samples over its label sets, from the Prometheus text format."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _SAMPLE.match(line.strip())
        if m:
            try:
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
            except ValueError:
                continue
    return out


def _first(metrics: dict[str, float], *names: str) -> float:
    for n in names:
        if n in metrics:
            return metrics[n]
    return 0.0


class EndpointTier:
    """A running server at ``base_url`` (e.g. ``http://127.0.0.1:8000``), measured like ``vllm bench serve``."""

    name = "endpoint"

    def __init__(self, base_url: str, *, served_model: str | None = None, timeout_s: float = 600.0,
                 sample_every_s: float = 0.1, engine_version: str = "endpoint") -> None:
        self.base_url = base_url.rstrip("/")
        self.served_model = served_model
        self.timeout_s = timeout_s
        self.sample_every_s = sample_every_s
        self.engine_version = engine_version  # the vLLM release the server is said to run (unknown: "endpoint")

    def measure(self, engine_config: EngineConfig | dict[str, Any] | None, model: ModelSpec | str | Path,
                hardware: HardwareSpec | str, workload: Workload | str | Path) -> Telemetry:
        cfg = engine_config if isinstance(engine_config, EngineConfig) else EngineConfig.from_dict(engine_config)
        return self.measure_all(cfg, load_model(model), load_hardware(hardware), [load_workload(workload)])[0]

    def measure_all(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                    workloads: Sequence[Workload]) -> list[Telemetry]:
        """Each workload in turn; `RsiEnvError` for a configuration that sets a flag (the server has its own)."""
        if cfg.to_dict(only_set=True):
            raise RsiEnvError("an endpoint runs with its own engine flags: pass engine_config=None, "
                              f"not {cfg.to_dict(only_set=True)}")
        return [self._measure_one(model, hw, w) for w in workloads]

    def _measure_one(self, spec: ModelSpec, hw: HardwareSpec, w: Workload) -> Telemetry:
        try:
            return asyncio.run(asyncio.wait_for(self._measure(spec, hw, w), self.timeout_s))
        except TimeoutError:
            return Telemetry.failed(f"timeout: the endpoint did not finish in {self.timeout_s:.0f}s", tier="endpoint")
        except Exception as exc:  # the server is down, refused, or broke the stream: a result, not a crash
            return Telemetry.failed(f"crash: {type(exc).__name__}: {exc}"[:400], tier="endpoint")

    def record_fields(self, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, workloads: Sequence[Workload],
                      tels: Sequence[Telemetry]) -> dict[str, Any]:
        """Which server each row measured."""
        return {"extras": [{"url": self.base_url}] * len(workloads)}

    async def _measure(self, spec: ModelSpec, hw: HardwareSpec, w: Workload) -> Telemetry:
        import aiohttp

        trace = w.trace()
        n = len(trace)
        arrival, first, finish = np.zeros(n), np.zeros(n), np.zeros(n)
        produced = np.zeros(n, dtype=np.int64)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
            model_name = self.served_model or await self._served_model(http)
            before = await self._metrics(http)
            samples: list[tuple[float, float]] = []
            done = asyncio.Event()

            async def sampler() -> None:
                while not done.is_set():
                    m = await self._metrics(http)
                    samples.append((_first(m, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                                           "sglang:token_usage"),
                                    _first(m, "vllm:num_requests_running", "sglang:num_running_reqs")))
                    await asyncio.sleep(self.sample_every_s)

            async def one(i: int, t0: float) -> None:
                body = {"model": model_name, "prompt": trace.prompt_token_ids(i, spec.vocab_size),
                        "max_tokens": int(trace.output_len[i]), "min_tokens": int(trace.output_len[i]),
                        "ignore_eos": True, "temperature": 0.0, "stream": True,
                        "stream_options": {"include_usage": True}}
                arrival[i] = time.perf_counter() - t0
                async with http.post(f"{self.base_url}/v1/completions", json=body) as resp:
                    if resp.status != 200:
                        raise RsiEnvError(f"HTTP {resp.status} from the endpoint: {(await resp.text())[:200]}")
                    async for raw in resp.content:
                        line = raw.decode(errors="replace").strip()
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            break
                        chunk = json.loads(data)
                        if chunk.get("choices") and chunk["choices"][0].get("text") is not None and not first[i]:
                            first[i] = time.perf_counter() - t0
                        if chunk.get("usage"):
                            produced[i] = int(chunk["usage"].get("completion_tokens") or 0)
                finish[i] = time.perf_counter() - t0

            sampler_task = asyncio.create_task(sampler())
            t0 = time.perf_counter()
            await run_schedule(trace, one, t0)
            done.set()
            await sampler_task
            after = await self._metrics(http)
        diff = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        short = int(np.sum(produced != trace.output_len))
        if short:
            return Telemetry.failed(f"crash: {short} requests returned a different number of tokens than asked "
                                    "(does the server honour ignore_eos/min_tokens?)", tier="endpoint")
        queries = _first(diff, "vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")
        hits = _first(diff, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits")
        busy = [r for _, r in samples if r > 0]
        return summarize(
            RequestTimings(arrival, first, finish, trace.prompt_len, trace.output_len), slo=w.slo,
            price_per_hour=hw.price_per_hour, num_gpus=1,
            num_preemptions=int(round(_first(diff, "vllm:num_preemptions_total", "vllm:num_preemptions"))),
            prefix_cache_hit_rate=hits / queries if queries else 0.0,
            kv_cache_usage_peak=max((u for u, _ in samples), default=0.0),
            mean_batch_size=float(np.mean(busy)) if busy else 0.0, tier="endpoint")

    async def _served_model(self, http: Any) -> str:
        async with http.get(f"{self.base_url}/v1/models") as resp:
            data = await resp.json()
        models = [m["id"] for m in data.get("data", [])]
        if not models:
            raise RsiEnvError(f"{self.base_url}/v1/models lists no model")
        return str(models[0])

    async def _metrics(self, http: Any) -> dict[str, float]:
        try:
            async with http.get(f"{self.base_url}/metrics") as resp:
                return parse_prometheus(await resp.text()) if resp.status == 200 else {}
        except Exception:  # a server without /metrics still gives latencies
            return {}

