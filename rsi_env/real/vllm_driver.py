"""Measure the real vLLM engine on workloads: one engine start, one config, several workloads.

Run as its own process (``python -m rsi_env.real.vllm_driver``): vLLM spawns workers and holds
the accelerator, so every configuration gets a fresh process that exits with its memory. It
writes the model's ``config.json`` to a temporary folder, starts vLLM's ``AsyncLLM`` with
``load_format="dummy"`` (the real architecture's speed, no weights; ``--weights`` loads a
checkpoint instead), warms it up (`rsi_env.real.warmup`: every step size up to the token budget, so no
kernel compiles mid-measurement), sends each workload's exact token ids on its arrival schedule, streams the
outputs to time TTFT/TPOT/latency per request, and reads vLLM's own Prometheus counters
(preemptions, prefix-cache queries and hits, KV-cache usage, tokens per step) and its own process's
garbage-collector pauses (``driver_gc``: `rsi_env.real.gc_pauses`; the output processor runs here; ``--gc frozen``
freezes this process's heap after the warm-up). One JSON line per
workload goes to ``--out``, with every request's arrival, first-token and finish times (``requests``)
and the engine's per-step trace (``steps``: `rsi_env.real.step_trace`). The telemetry's ``profile`` comes from a
replay of each workload with vLLM's torch profiler on, after every workload was measured
(`rsi_env.real.profile_replay`; the row's ``profile`` says what was sampled; ``--no-profile`` skips it).

``--policy-keys FILE`` runs a scheduling policy (``RSI/Scheduler-v0``): vLLM's ``priority`` policy
with `rsi_env.real.policy_scheduler.PolicyScheduler` as ``scheduler_cls``, which orders and preempts
requests by the precomputed keys in FILE (`rsi_env.real.policy_keys`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.telemetry import RequestTimings, summarize
from rsi_env.engine.workload import SLO, Trace, Workload
from rsi_env.real.driver_inputs import model_folder, parse_assignments
from rsi_env.real.gc_pauses import GcPauses, add_gc_option, freeze_heap
from rsi_env.real.host import CpuShares, cpu_probe_ms, gpu_names, host_info, wrong_hardware
from rsi_env.real.policy_keys import ASYNC_SCHEDULER_CLS, KEYS_ENV, SCHEDULER_CLS, read_policy_keys, request_id
from rsi_env.real.profile_replay import profile_run, profiler_config
from rsi_env.real.schedule import run_schedule
from rsi_env.real.step_trace import StepTrace, stat_logger_factory
from rsi_env.real.warmup import warmup_workloads

__all__ = ["main"]

# EngineConfig flags that are fields of vLLM's EngineArgs under the same name.
_PASS_THROUGH = (
    "max_num_seqs", "max_num_batched_tokens", "block_size", "gpu_memory_utilization",
    "enable_prefix_caching", "enable_chunked_prefill", "kv_cache_dtype", "enforce_eager",
    "cudagraph_capture_sizes", "long_prefill_token_threshold", "max_num_partial_prefills",
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "quantization",
    "max_model_len", "scheduling_policy", "async_scheduling", "dtype",
    "num_gpu_blocks_override",  # not an EngineConfig flag: a fixed KV-cache size, for tests that force preemption
)


def _metric_values() -> dict[str, float]:
    """Sum of each vllm:* counter/gauge and (count, sum) of histograms, over all label sets."""
    from vllm.v1.metrics.reader import Counter, Gauge, Histogram, get_metrics_snapshot

    out: dict[str, float] = {}
    for m in get_metrics_snapshot():
        if isinstance(m, (Counter, Gauge)):
            out[m.name] = out.get(m.name, 0.0) + float(m.value)
        elif isinstance(m, Histogram):
            out[m.name + ":count"] = out.get(m.name + ":count", 0.0) + float(m.count)
            out[m.name + ":sum"] = out.get(m.name + ":sum", 0.0) + float(m.sum)
    return out


async def _run_trace(engine: Any, trace: Trace, vocab: int, tag: str, record: int = 0,
                     steps: StepTrace | None = None, min_tokens: bool = True) -> tuple[RequestTimings, dict[str, Any]]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    n = len(trace)
    prompts = [trace.prompt_token_ids(i, vocab) for i in range(n)]
    arrival = np.zeros(n)
    first = np.zeros(n)
    finish = np.zeros(n)
    produced = np.zeros(n, dtype=np.int64)
    tokens: dict[int, list[int]] = {i: [] for i in range(min(record, n))}  # greedy outputs, for the output guard
    samples: list[tuple[float, float]] = []
    done = asyncio.Event()

    async def one(i: int, t0: float) -> None:
        # ignore_eos alone gives every request exactly max_tokens; min_tokens adds vLLM's min-tokens logits
        # processor, which a request joining the batch updates (``--no-min-tokens`` leaves it out).
        sp = SamplingParams(max_tokens=int(trace.output_len[i]), min_tokens=int(trace.output_len[i]) if min_tokens else 0,
                            ignore_eos=True, temperature=0.0, output_kind=RequestOutputKind.DELTA,
                            detokenize=False)
        arrival[i] = time.perf_counter() - t0
        async for out in engine.generate(TokensPrompt(prompt_token_ids=prompts[i]), sp, request_id(tag, i)):
            k = len(out.outputs[0].token_ids)
            if i in tokens:
                tokens[i].extend(int(t) for t in out.outputs[0].token_ids)
            if k and produced[i] == 0:
                first[i] = time.perf_counter() - t0
            produced[i] += k
            if out.finished:
                finish[i] = time.perf_counter() - t0

    async def sampler() -> None:
        from vllm.v1.metrics.reader import Gauge, get_metrics_snapshot

        while not done.is_set():
            usage = running = 0.0
            for m in get_metrics_snapshot():
                if isinstance(m, Gauge) and m.name == "vllm:kv_cache_usage_perc":
                    usage = max(usage, float(m.value))
                elif isinstance(m, Gauge) and m.name == "vllm:num_requests_running":
                    running += float(m.value)
            samples.append((usage, running))
            shares.sample(time.perf_counter() - t0)
            await asyncio.sleep(0.05)

    before = _metric_values()
    first_step = len(steps) if steps is not None else 0
    t0 = time.perf_counter()
    shares = CpuShares()  # the host's CPU time through the workload, on the requests' and steps' clock
    sampler_task = asyncio.create_task(sampler())
    with GcPauses() as pauses:  # vLLM's output processor runs in this process: its collections stall the stream
        await run_schedule(trace, one, t0)
    done.set()
    await sampler_task
    shares.sample(time.perf_counter() - t0)
    after = _metric_values()
    diff = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    if not np.array_equal(produced, trace.output_len):
        bad = int(np.sum(produced != trace.output_len))
        raise RuntimeError(f"{bad} requests produced a different number of tokens than asked")
    busy = [r for _, r in samples if r > 0]
    counters = {
        "num_preemptions": int(round(diff.get("vllm:num_preemptions", 0.0))),
        "prefix_cache_queries": diff.get("vllm:prefix_cache_queries", 0.0),
        "prefix_cache_hits": diff.get("vllm:prefix_cache_hits", 0.0),
        "kv_cache_usage_peak": max((u for u, _ in samples), default=0.0),
        "mean_running": float(np.mean(busy)) if busy else 0.0,
        "num_steps": diff.get("vllm:iteration_tokens_total:count", 0.0),
        "step_tokens": diff.get("vllm:iteration_tokens_total:sum", 0.0),
        "output_token_ids": {str(i): t for i, t in tokens.items()},
        "host_cpu": shares.summary(),
        "driver_gc": pauses.summary(t0),
    }
    if steps is not None:  # times from the workload's start, as the requests' times
        counters["steps"] = steps.since(first_step, t_origin=t0 - steps.t0)
    return RequestTimings(arrival, first, finish, trace.prompt_len, trace.output_len), counters


def _resolved(vllm_config: Any) -> dict[str, Any]:
    sc, cc, mc = vllm_config.scheduler_config, vllm_config.cache_config, vllm_config.model_config
    comp = vllm_config.compilation_config
    return {
        "max_num_seqs": sc.max_num_seqs,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "enable_chunked_prefill": getattr(sc, "enable_chunked_prefill", None),
        "long_prefill_token_threshold": getattr(sc, "long_prefill_token_threshold", None),
        "async_scheduling": getattr(sc, "async_scheduling", None),
        "block_size": cc.block_size,
        "num_gpu_blocks": cc.num_gpu_blocks,
        "gpu_memory_utilization": cc.gpu_memory_utilization,
        "enable_prefix_caching": cc.enable_prefix_caching,
        "kv_cache_dtype": cc.cache_dtype,
        "max_model_len": mc.max_model_len,
        "enforce_eager": mc.enforce_eager,
        "cudagraph_capture_sizes": list(getattr(comp, "cudagraph_capture_sizes", None) or []),
        "cudagraph_mode": str(getattr(comp, "cudagraph_mode", "")),
        "tensor_parallel_size": vllm_config.parallel_config.tensor_parallel_size,
        "pipeline_parallel_size": vllm_config.parallel_config.pipeline_parallel_size,
    }


async def _main_async(args: argparse.Namespace) -> int:
    t_driver = time.perf_counter()
    import vllm
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    wrong = wrong_hardware(args.hardware, gpu_names())
    if wrong:  # before any engine starts: the card that came is not the one the rows would be filed under
        print(f"rsi-env-error: {wrong}", file=sys.stderr)
        return 2
    spec = load_model(args.model)
    flags = parse_assignments(args.set)
    unknown = [k for k in flags if k not in _PASS_THROUGH]
    if unknown:
        print(f"rsi-env-error: invalid_config: unknown engine flags {unknown}; known: {list(_PASS_THROUGH)}",
              file=sys.stderr)
        return 2
    workloads = [Workload.from_yaml(p) for p in args.workload]
    if args.policy_keys:
        problem = _policy_problem(args.policy_keys, flags, workloads)
        if problem:
            print(f"rsi-env-error: {problem}", file=sys.stderr)
            return 2
        os.environ[KEYS_ENV] = str(Path(args.policy_keys).resolve())  # inherited by the engine-core process
        flags["scheduling_policy"] = "priority"
    have = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    missing = [k for k in flags if k not in have]
    if missing:
        print(f"rsi-env-error: invalid_config: vLLM {vllm.__version__} has no engine flag {missing[0]!r} "
              f"(installed vLLM lacks {missing})", file=sys.stderr)
        return 2
    hw = load_hardware(args.hardware)
    num_gpus = int(flags.get("tensor_parallel_size", 1)) * int(flags.get("pipeline_parallel_size", 1)) * int(
        flags.get("data_parallel_size", 1))
    tmp, load_format = model_folder(spec, args.weights)  # real weights: to compare outputs with a reference
    ctx = UsageContext.OPENAI_API_SERVER if args.usage_context == "server" else UsageContext.LLM_CLASS
    extra: dict[str, Any] = {}
    if "cudagraph_metrics" in have:  # each step's token count, padded size and CUDA-graph mode, for the step trace
        extra["cudagraph_metrics"] = True
    if "enable_logging_iteration_details" in have:  # what each step scheduled (prompt and decode requests)
        extra["enable_logging_iteration_details"] = True
        # vLLM's own logging stat logger would print a line per step; the step trace keeps the numbers.
        logging.getLogger("vllm.v1.metrics.loggers").setLevel(logging.WARNING)
    profile_dir = None
    if args.profile and "profiler_config" in have:  # vLLM's torch-profiler hooks, used only by the replays
        profile_dir = tempfile.mkdtemp(prefix="rsi-profile-")
        extra["profiler_config"] = profiler_config(profile_dir)
    eargs = AsyncEngineArgs(model=str(tmp), load_format=load_format, skip_tokenizer_init=True,
                            generation_config="vllm", disable_log_stats=False, seed=0, **extra, **flags)
    # The CPU probe before the engine starts: taken after start-up, with the engine's processes and threads running
    # beside it, an H200 host's probe read 18-23 ms against 14 ms on the same machine idle.
    probe = cpu_probe_ms()
    t_start = time.perf_counter()
    vllm_config = eargs.create_engine_config(usage_context=ctx)
    if args.policy_keys:  # the scheduler class that matches the engine's own choice of async scheduling
        sc = vllm_config.scheduler_config
        sc.scheduler_cls = ASYNC_SCHEDULER_CLS if getattr(sc, "async_scheduling", False) else SCHEDULER_CLS
    steps = StepTrace()
    engine = AsyncLLM.from_vllm_config(vllm_config, usage_context=ctx, disable_log_stats=False,
                                       stat_loggers=[stat_logger_factory(steps)])
    startup = time.perf_counter() - t_start
    resolved = _resolved(engine.vllm_config)
    host = host_info(cpu_probe=probe)
    print(json.dumps({"startup_s": startup, "resolved": resolved}), flush=True)
    try:
        # Warm-up: first-use effects (kernel JIT per batch shape) stay out of the measurement.
        for warm in warmup_workloads(int(resolved["max_num_batched_tokens"]), int(resolved["max_num_seqs"]),
                                     int(resolved["max_model_len"])):
            await _run_trace(engine, warm.trace(), spec.vocab_size, warm.name, min_tokens=args.min_tokens)
        if args.gc == "frozen":  # the front end's heap; vLLM's engine core froze its own after starting
            freeze_heap()
        measured = []
        for w in workloads:
            await engine.reset_prefix_cache()
            trace = w.trace()
            # The probe again with the engine started and idle, right before this workload: the CPU's state moves
            # within one engine's life as well as between starts.
            probe_w = cpu_probe_ms()
            t_w = time.perf_counter()
            timings, c = await _run_trace(engine, trace, spec.vocab_size, w.name, args.record_tokens, steps,
                                          args.min_tokens)
            c["cpu_probe_ms"] = probe_w
            step_cols = c.pop("steps")
            q = c["prefix_cache_queries"]
            tel = summarize(
                timings, slo=w.slo if args.slo_from_workload else SLO(), price_per_hour=hw.price_per_hour,
                num_gpus=num_gpus,
                num_preemptions=c["num_preemptions"],
                prefix_cache_hit_rate=c["prefix_cache_hits"] / q if q else 0.0,
                kv_cache_usage_peak=c["kv_cache_usage_peak"], num_gpu_blocks=resolved["num_gpu_blocks"] or 0,
                mean_batch_size=c["mean_running"], tier="real", calibration=None,
            )
            row = {
                "model": args.model, "flags": flags, "usage_context": args.usage_context,
                "resolved": resolved, "workload": w.name, "workload_hash": w.content_hash,
                "workload_spec": w.to_dict(), "vllm_version": vllm.__version__, "gc": args.gc,
                "startup_s": startup,
                "wall_s": time.perf_counter() - t_w, "counters": c, "telemetry": tel.to_dict(),
                "hardware": args.hardware, "host": host, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "requests": {"arrival_s": timings.arrival.round(6).tolist(),
                             "first_token_s": timings.first_token.round(6).tolist(),
                             "finish_s": timings.finish.round(6).tolist()},
                "policy_keys": bool(args.policy_keys), "min_tokens": args.min_tokens,
                "steps": step_cols,
            }
            measured.append((w, trace, timings, step_cols, tel, row))
            print(json.dumps({"workload": w.name, "out_tok_per_s": tel.out_tok_per_s,
                              "tpot_p50": tel.tpot_p50, "ttft_p50": tel.ttft_p50,
                              "preempt": tel.num_preemptions, "steps": c["num_steps"]}), flush=True)
        # The profiles, once every workload is measured (`rsi_env.real.profile_replay`), then the rows.
        deadline = t_driver + args.profile_deadline_s if args.profile_deadline_s else float("inf")
        for w, trace, timings, step_cols, tel, row in measured:
            if profile_dir is not None:
                t_p = time.perf_counter()
                tel.profile, row["profile"] = await profile_run(engine, trace, spec.vocab_size, w.name, steps, timings,
                                                                step_cols, profile_dir, args.min_tokens, deadline)
                row["profile"]["wall_s"] = round(time.perf_counter() - t_p, 3)
                row["telemetry"] = tel.to_dict()
                print(json.dumps({"workload": w.name, "profile": tel.profile.summary(), **row["profile"]}), flush=True)
            else:
                row["profile"] = {"error": "not profiled: --no-profile" if not args.profile else
                                  f"vLLM {vllm.__version__} has no profiler_config"}
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
    finally:
        engine.shutdown()
        if profile_dir is not None:
            shutil.rmtree(profile_dir, ignore_errors=True)
    return 0


def _policy_problem(path: str, flags: dict[str, Any], workloads: list[Workload]) -> str | None:
    """Why a policy cannot run with these flags and keys (None when it can)."""
    if flags.get("scheduling_policy", "priority") != "priority":
        return ("invalid_config: a scheduling policy runs as vLLM's priority policy; "
                f"drop scheduling_policy={flags['scheduling_policy']!r}")
    try:
        keys = read_policy_keys(path)
    except ValueError as exc:
        return f"crash: {exc}"
    missing = [request_id(w.name, i) for w in workloads for i in range(w.requests)
               if request_id(w.name, i) not in keys]
    if missing:
        return f"crash: the policy keys file has no keys for {len(missing)} requests (first: {missing[0]})"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="catalog id or path to a config.json")
    p.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE", help="an EngineArgs flag")
    p.add_argument("--workload", action="append", required=True, help="workload YAML (repeatable)")
    p.add_argument("--out", required=True, help="JSON-lines file to append results to")
    p.add_argument("--hardware", default="h200")
    p.add_argument("--usage-context", choices=("server", "llm"), default="server")
    p.add_argument("--slo-from-workload", action="store_true")
    p.add_argument("--weights", help="a folder of *.safetensors to load instead of dummy weights")
    p.add_argument("--record-tokens", type=int, default=0, help="keep the output token ids of the first N requests")
    p.add_argument("--policy-keys", default=None, metavar="FILE",
                   help="run a scheduling policy: {request id: [waiting_key, victim_key]} (rsi_env.real.policy_keys)")
    p.add_argument("--no-profile", dest="profile", action="store_false",
                   help="skip the profiled replay of each workload (the telemetry's profile stays empty)")
    p.add_argument("--profile-deadline-s", type=float, default=None, metavar="S",
                   help="no profiling replay starts, and an open one stops, S seconds after the driver started")
    add_gc_option(p, "vllm")
    p.add_argument("--no-min-tokens", dest="min_tokens", action="store_false",
                   help="ask each request's exact length with ignore_eos and max_tokens only, not min_tokens too")
    args = p.parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    return asyncio.run(_main_async(args))


if __name__ == "__main__":
    sys.exit(main())
