"""Measure the real SGLang engine on workloads: one engine start, one config, several workloads.

Run as its own process (``python -m rsi_env.real.sglang_driver``), as `rsi_env.real.vllm_driver` is for vLLM, with the
same command line and the same one JSON line per workload in ``--out``, so `rsi_env.real.RealTier` reads both. It
writes the model's ``config.json`` to a temporary folder (`rsi_env.real.driver_inputs`), starts SGLang's ``Engine``
with ``load_format="dummy"``, ``skip_tokenizer_init=True``, the `SglangConfig` flags (``--set``) and any other
``ServerArgs`` passed through (``--server-arg``, e.g. ``attention_backend=triton``), warms it up
(`rsi_env.real.warmup`) and, with ``--gc frozen``, freezes the garbage collectors' heaps of its processes (SGLang's
``Engine.freeze_gc``, this process's first: `rsi_env.real.gc_pauses`), then sends each workload's exact token ids on
its arrival schedule (`rsi_env.real.schedule`) with greedy sampling and exactly the trace's output length
(``max_new_tokens`` with ``ignore_eos``: SGLang refuses ``min_new_tokens`` without a tokenizer, "min_new_tokens=N is
unavailable when skip_tokenizer_init=True (requires tokenizer for eos_token_id)"; every request's count is checked),
streaming to time arrival, first token and finish per request. Between workloads SGLang's cache is flushed (its radix
tree emptied), as the vLLM driver resets its prefix cache.

SGLang's own counters: per request, the final stream chunk's ``meta_info`` (``cached_tokens``, ``prompt_tokens``,
``num_retractions``) gives the prefix-cache hit rate and the retractions (SGLang's preemptions), and its time stamps
(`ENGINE_STAMPS`, sent with ``enable_metrics``) where each request's first token went: received by the tokenizer
manager, received by the scheduler, put in a prefill batch, that batch's result processed; its Prometheus gauges
(`rsi_env.real.sglang_metrics`: running and queued requests, KV pool use), sampled through the workload, give the mean
batch and the KV peak; its counters are read before and after. ``driver_gc``: every collection of this process's
garbage collector during the workload (SGLang's tokenizer manager runs in it, so a long one starves the scheduler).
The row records what the engine resolved (``resolved``: `rsi_env.real.sglang_args.resolved_flags`; ``server_args``:
every field), SGLang's version and ``gc`` (frozen or live). Each row's ``passes`` are SGLang's logged passes during
the workload (`rsi_env.real.sglang_passes`: every prefill pass, every ``decode_log_interval``-th decode pass, with
running and queued requests), logged only where a ``decode_log_interval`` is passed (that brings SGLang's
``log_level`` to info, `rsi_env.real.sglang_args`; at its default level, error, ``lines`` stays empty). Left out, and
named in the row's ``unavailable``: a per-step trace of every pass and the profiled replay the vLLM driver adds (no
SGLang counterpart is wired here), so the telemetry's ``profile`` is empty.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.sglang_config import SglangConfig
from rsi_env.engine.telemetry import RequestTimings, summarize
from rsi_env.engine.workload import SLO, Trace, Workload
from rsi_env.errors import InvalidConfigError
from rsi_env.real.driver_inputs import model_folder, parse_assignments
from rsi_env.real.gc_pauses import GcPauses, add_gc_option, freeze_heap
from rsi_env.real.host import CpuShares, cpu_probe_ms, gpu_names, host_info, wrong_hardware
from rsi_env.real.schedule import run_schedule
from rsi_env.real.sglang_args import engine_kwargs, resolved_flags
from rsi_env.real.sglang_metrics import gauge_summary, read_metrics
from rsi_env.real.sglang_passes import LoggedPasses
from rsi_env.real.warmup import warmup_workloads

__all__ = ["UNAVAILABLE", "main", "run_trace"]

UNAVAILABLE = {
    "steps": "no per-step trace: SGLang's scheduler keeps no per-step record the driver can read; its logged passes "
             "(every prefill, one decode pass in decode_log_interval) are in the row's passes where a "
             "decode_log_interval was passed",
    "profile": "not profiled: the SGLang driver runs no profiled replay",
}
SAMPLE_EVERY_S = 0.05
# The row's ``requests`` columns from SGLang's own per-request time stamps (``meta_info`` of the final chunk, wall
# clock; ``queue_time`` is a duration): the tokenizer manager's receipt, the scheduler's (its waiting queue's entry),
# the prefill batch's formation and that batch's result processed. On the driver's clock, like ``arrival_s``.
ENGINE_STAMPS = ("received_s", "queued_s", "scheduled_s", "prefilled_s")


def engine_stamps(meta: Mapping[str, Any], wall_t0: float) -> tuple[float, float, float, float]:
    """`ENGINE_STAMPS` of one request from its final chunk's ``meta_info``, in seconds since the wall-clock time
    ``wall_t0`` (the driver's ``t0``); NaN for each stamp SGLang did not send."""
    def at(key: str) -> float:
        v = meta.get(key)
        return float(v) - wall_t0 if isinstance(v, int | float) and v > 0 else math.nan

    scheduled = at("forward_entry_time")
    queue = meta.get("queue_time")
    queued = scheduled - float(queue) if isinstance(queue, int | float) else math.nan
    return at("request_received_ts"), queued, scheduled, at("prefill_finished_time")


def _counter_sums(metrics: Mapping[str, list[float]]) -> dict[str, float]:
    return {k: float(sum(v)) for k, v in metrics.items()}


async def run_trace(engine: Any, trace: Trace, vocab: int, tag: str, *, record: int = 0,
                    incremental: bool = False,
                    metrics: Callable[[], Mapping[str, list[float]]] | None = None,
                    ) -> tuple[RequestTimings, dict[str, Any]]:
    """Send ``trace`` to ``engine`` (SGLang's ``Engine``: ``async_generate(..., stream=True)``) on its schedule.

    Returns the requests' timings and SGLang's counters for it. ``incremental``: the engine streams each chunk's
    new token ids only (``incremental_streaming_output``), else all of them so far. ``metrics`` reads SGLang's
    Prometheus samples (default `read_metrics`). Raises `RuntimeError` when a request was aborted or produced
    another number of tokens than asked.
    """
    read = metrics or read_metrics
    n = len(trace)
    prompts = [trace.prompt_token_ids(i, vocab) for i in range(n)]
    arrival, first, finish = np.zeros(n), np.zeros(n), np.zeros(n)
    produced = np.zeros(n, dtype=np.int64)
    stamps = np.full((len(ENGINE_STAMPS), n), np.nan)
    wall_minus_clock = time.time() - time.perf_counter()  # the driver's clock to the wall clock SGLang stamps with
    cached = np.zeros(n, dtype=np.int64)
    prompt_seen = np.zeros(n, dtype=np.int64)
    retractions = np.zeros(n, dtype=np.int64)
    tokens: dict[int, list[int]] = {i: [] for i in range(min(record, n))}  # greedy outputs, for the output guard
    samples: list[tuple[float, float, float]] = []
    done = asyncio.Event()

    async def one(i: int, t0: float) -> None:
        out_len = int(trace.output_len[i])
        sp = {"max_new_tokens": out_len, "ignore_eos": True, "temperature": 0.0}
        arrival[i] = time.perf_counter() - t0
        stream = await engine.async_generate(input_ids=prompts[i], sampling_params=sp, stream=True, rid=f"{tag}-{i}")
        async for chunk in stream:
            meta = chunk.get("meta_info") or {}
            k = int(meta.get("completion_tokens") or 0)  # cumulative in both streaming modes
            if k and produced[i] == 0:
                first[i] = time.perf_counter() - t0
            produced[i] = k
            if i in tokens and incremental:
                tokens[i].extend(int(t) for t in chunk.get("output_ids") or [])
            reason = meta.get("finish_reason")
            if reason is None:
                continue
            finish[i] = time.perf_counter() - t0
            if isinstance(reason, Mapping) and reason.get("type") == "abort":
                raise RuntimeError(f"SGLang aborted request {tag}-{i}: {reason.get('message')}")
            cached[i] = int(meta.get("cached_tokens") or 0)
            prompt_seen[i] = int(meta.get("prompt_tokens") or 0)
            retractions[i] = int(meta.get("num_retractions") or 0)
            stamps[:, i] = engine_stamps(meta, wall_minus_clock + t0)
            if i in tokens and not incremental:
                tokens[i] = [int(t) for t in chunk.get("output_ids") or []]

    async def sampler() -> None:
        while not done.is_set():
            samples.append(gauge_summary(await asyncio.to_thread(read)))
            shares.sample(time.perf_counter() - t0)
            await asyncio.sleep(SAMPLE_EVERY_S)

    before = _counter_sums(read())
    t0 = time.perf_counter()
    shares = CpuShares()  # the host's CPU time through the workload, on the requests' clock
    sampler_task = asyncio.create_task(sampler())
    try:
        with GcPauses() as pauses:  # the front end's process is this one: its collections stall the engine
            await run_schedule(trace, one, t0)
    finally:
        done.set()
        await sampler_task
    shares.sample(time.perf_counter() - t0)
    after = _counter_sums(read())
    if not np.array_equal(produced, trace.output_len):
        bad = int(np.sum(produced != trace.output_len))
        raise RuntimeError(f"{bad} requests produced a different number of tokens than asked")
    busy = [(r, q) for _, r, q in samples if r > 0]
    counters = {
        "num_preemptions": int(retractions.sum()),
        "prefix_cache_queries": float(prompt_seen.sum()),
        "prefix_cache_hits": float(cached.sum()),
        "kv_cache_usage_peak": max((u for u, _, _ in samples), default=0.0),
        "mean_running": float(np.mean([r for r, _ in busy])) if busy else 0.0,
        "mean_queued": float(np.mean([q for _, q in busy])) if busy else 0.0,
        "gauge_samples": len(samples),
        "sglang_counters": {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)},
        "output_token_ids": {str(i): t for i, t in tokens.items()},
        "host_cpu": shares.summary(),
        "driver_gc": pauses.summary(t0),
        "engine_stamps": {k: [None if math.isnan(x) else round(float(x), 6) for x in col]
                          for k, col in zip(ENGINE_STAMPS, stamps, strict=True)},
    }
    return RequestTimings(arrival, first, finish, trace.prompt_len, trace.output_len), counters


def _flush(engine: Any, tries: int = 100) -> None:
    """Empty SGLang's cache (its radix tree and KV pool); it refuses while a request is still pending, so retry."""
    for _ in range(tries):
        if getattr(engine.flush_cache(), "success", True):
            return
        time.sleep(0.05)
    raise RuntimeError("SGLang did not flush its cache: requests were still pending after the workload")


def _measure(args: argparse.Namespace, engine: Any, cfg: SglangConfig, info: dict[str, Any], startup: float,
             host: dict[str, Any], version: str, log: LoggedPasses) -> None:
    """Warm up, then measure every workload and append its row to ``args.out``."""
    spec, hw = load_model(args.model), load_hardware(args.hardware)
    resolved = resolved_flags(info)
    incremental = bool(resolved.get("incremental_streaming_output"))
    run = engine.loop.run_until_complete
    chunk = int(resolved.get("chunked_prefill_size") or -1)
    budget = chunk if chunk > 0 else int(resolved.get("max_prefill_tokens") or 16384)
    context = int(resolved.get("context_length") or spec.max_position_embeddings)
    # Warm-up: first-use effects (kernel JIT per batch shape) stay out of the measurement.
    for warm in warmup_workloads(budget, int(resolved.get("max_running_requests") or 256), context):
        run(run_trace(engine, warm.trace(), spec.vocab_size, warm.name, incremental=incremental))
    if args.gc == "frozen":  # as SGLang's Engine.freeze_gc advises after a warm-up: this process, scheduler, detokenizer
        freeze_heap()
        engine.freeze_gc()
    page = int(resolved.get("page_size") or 1)
    for w in (Workload.from_yaml(p) for p in args.workload):
        _flush(engine)
        trace = w.trace()
        start = log.mark(settle_s=0.2)  # the warm-up's and the last workload's lines are read by now
        probe_w = cpu_probe_ms()  # the CPU's state right before this workload, engine started and idle
        t_w = time.perf_counter()
        timings, c = run(run_trace(engine, trace, spec.vocab_size, w.name, record=args.record_tokens,
                                   incremental=incremental))
        passes = LoggedPasses.columns(log.since(start))
        c["cpu_probe_ms"] = probe_w
        q = c["prefix_cache_queries"]
        stamps = c.pop("engine_stamps")  # per request, beside the driver's own times
        tel = summarize(
            timings, slo=w.slo if args.slo_from_workload else SLO(), price_per_hour=hw.price_per_hour,
            num_gpus=cfg.num_gpus, num_preemptions=c["num_preemptions"],
            prefix_cache_hit_rate=c["prefix_cache_hits"] / q if q else 0.0,
            kv_cache_usage_peak=c["kv_cache_usage_peak"],
            num_gpu_blocks=int(resolved.get("max_total_num_tokens") or 0) // page,  # pages of the KV pool
            mean_batch_size=c["mean_running"], tier="real", calibration=None,
        )
        row = {
            "engine": "sglang", "model": args.model, "flags": cfg.to_dict(only_set=True),
            "server_arg_overrides": parse_assignments(args.server_arg), "usage_context": None,
            "resolved": resolved, "server_args": {k: v for k, v in info.items() if k != "internal_states"},
            "workload": w.name, "workload_hash": w.content_hash, "workload_spec": w.to_dict(),
            "sglang_version": version, "gc": args.gc, "startup_s": startup, "wall_s": time.perf_counter() - t_w,
            "counters": c,
            "telemetry": tel.to_dict(), "hardware": args.hardware, "host": host,
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "requests": {"arrival_s": timings.arrival.round(6).tolist(),
                         "first_token_s": timings.first_token.round(6).tolist(),
                         "finish_s": timings.finish.round(6).tolist(), **stamps},
            "min_tokens": False, "steps": None, "profile": {"error": UNAVAILABLE["profile"]},
            "passes": {"decode_log_interval": resolved.get("decode_log_interval"), "lines": passes},
            "unavailable": UNAVAILABLE,
        }
        with open(args.out, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        print(json.dumps({"workload": w.name, "out_tok_per_s": tel.out_tok_per_s, "tpot_p50": tel.tpot_p50,
                          "ttft_p50": tel.ttft_p50, "retractions": tel.num_preemptions,
                          "prefix_cache_hit_rate": tel.prefix_cache_hit_rate}), flush=True)


def _start(args: argparse.Namespace) -> int:
    wrong = wrong_hardware(args.hardware, gpu_names())
    if wrong:  # before any engine starts: the card that came is not the one the rows would be filed under
        print(f"rsi-env-error: {wrong}", file=sys.stderr)
        return 2
    try:
        cfg = SglangConfig.from_dict(parse_assignments(args.set))
    except InvalidConfigError as exc:
        print(f"rsi-env-error: invalid_config: {exc}", file=sys.stderr)
        return 2
    import sglang
    from sglang.srt.entrypoints.engine import Engine
    from sglang.srt.server_args import ServerArgs

    have = {f.name for f in dataclasses.fields(ServerArgs)}
    folder, load_format = model_folder(load_model(args.model), args.weights)
    try:
        try:
            kwargs = engine_kwargs(cfg, parse_assignments(args.server_arg), have, model_path=str(folder),
                                   load_format=load_format)
        except InvalidConfigError as exc:
            print(f"rsi-env-error: invalid_config: {exc}", file=sys.stderr)
            return 2
        probe = cpu_probe_ms()  # before the engine's processes start beside it (see vllm_driver)
        with LoggedPasses() as log:  # SGLang's processes inherit its stderr: their pass lines are read there
            t_start = time.perf_counter()
            engine = Engine(**kwargs)
            try:
                startup = time.perf_counter() - t_start
                info = engine.get_server_info()
                print(json.dumps({"startup_s": startup, "resolved": resolved_flags(info)}, default=str), flush=True)
                _measure(args, engine, cfg, info, startup, host_info(cpu_probe=probe), sglang.__version__, log)
            finally:
                engine.shutdown()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="catalog id or path to a config.json")
    p.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE", help="an SglangConfig flag")
    p.add_argument("--server-arg", action="append", default=[], metavar="FIELD=VALUE",
                   help="any other ServerArgs field, passed through (e.g. attention_backend=triton)")
    p.add_argument("--workload", action="append", required=True, help="workload YAML (repeatable)")
    p.add_argument("--out", required=True, help="JSON-lines file to append results to")
    p.add_argument("--hardware", default="h200")
    p.add_argument("--slo-from-workload", action="store_true")
    p.add_argument("--weights", help="a folder of *.safetensors to load instead of dummy weights")
    p.add_argument("--record-tokens", type=int, default=0, help="keep the output token ids of the first N requests")
    add_gc_option(p, "sglang")
    return _start(p.parse_args(argv))


if __name__ == "__main__":  # SGLang spawns its scheduler and detokenizer, which import this module again
    sys.exit(main())
