"""Start the workspace's vLLM engine on a job of token-id requests and report what it did, as JSON.

``python run_engine.py JOB.json OUT.json`` (the workspace's copy of this file) serves the whole job and
writes its report. The hidden checks and the bench run this same text in a fresh sandbox as the engine's
process of a trusted supervisor (`rsi_env.tasks.vllm_bugfix.supervisor`): ``python run_engine.py
--serve`` serves one request at a time (`serve`), and the supervisor, outside its process tree, times
each repetition itself; whatever this process says about time is not read there. It imports nothing of
rsi-env, only vLLM, PyYAML and the standard library, so that it runs wherever the installed vLLM does.
The engine is vLLM's own ``LLM`` in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), built from the
job's model (a ``config.json`` with ``load_format="dummy"``: the architecture's real speed, no weights)
and the workspace's ``engine_args.yaml`` (the deployment's engine arguments, vLLM's ``EngineArgs``
names). Where the sandbox shadows vLLM's modules with the workspace's copies, those are what runs.

A job is ``{"model_config": {...}, "phases": [{"name", "max_steps", "deadline_s", "reps"}, ...]}``, each
repetition of a phase a list of requests ``[prompt token ids, max_tokens]``. A repetition adds its
requests at once (greedy, exactly ``max_tokens`` tokens each) and steps the engine until every request
finished, at most ``max_steps`` steps and ``deadline_s`` seconds (a stalled engine is reported, never
waited for), after clearing the prefix cache. It reports each request's output tokens, first-token and
finish times, the engine steps it took, its wall and CPU seconds (in all and per step, by this process's
clocks), and what vLLM's own metrics counted meanwhile (preemptions, prefix-cache queries and hits). After
the last phase the report gives the KV-cache blocks free in vLLM's block pool. Whatever fails (the engine
refuses its arguments, runs out of memory, raises mid-phase) is reported with its traceback's tail as
``error``, with what ran before it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

__all__ = ["blocks", "main", "run", "serve", "serve_rep", "start", "summary"]

ENGINE_ARGS = "engine_args.yaml"
# Engine arguments the harness sets itself: the model, its dummy weights, the seed, the statistics it reads.
FIXED = {"model", "load_format", "skip_tokenizer_init", "seed", "generation_config", "disable_log_stats",
         "tokenizer", "hf_overrides", "revision"}
# One engine thread, unbound: on a shared host, OpenMP threads pinned to busy cores spin (a step took 10x longer).
_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "WARNING", "TOKENIZERS_PARALLELISM": "false",
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def _error(stage: str, exc: BaseException) -> dict[str, str]:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8))
    return {"stage": stage, "type": type(exc).__name__, "message": str(exc)[:1500], "traceback": tb[-4000:]}


def _engine_args() -> dict[str, Any]:
    import yaml

    raw = yaml.safe_load(Path(ENGINE_ARGS).read_text())
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        raise ValueError(f"{ENGINE_ARGS} must be a mapping of engine argument: value")
    fixed = sorted(set(raw) & FIXED)
    if fixed:
        raise ValueError(f"{ENGINE_ARGS} may not set {fixed}: the harness sets the model and its statistics")
    return raw


def _counters() -> dict[str, float]:
    """vLLM's own counters, summed over label sets: preemptions, prefix-cache queries and hits."""
    from vllm.v1.metrics.reader import Counter, get_metrics_snapshot

    names = {"vllm:num_preemptions": "preemptions", "vllm:prefix_cache_queries": "prefix_queries",
             "vllm:prefix_cache_hits": "prefix_hits"}
    out = dict.fromkeys(names.values(), 0.0)
    for m in get_metrics_snapshot():
        if isinstance(m, Counter) and m.name in names:
            out[names[m.name]] += float(m.value)
    return out


def _block_pool(llm: Any) -> Any:
    """vLLM's KV block pool of the in-process engine core (None where this vLLM keeps it elsewhere)."""
    core = getattr(llm.llm_engine.engine_core, "engine_core", None)
    manager = getattr(getattr(core, "scheduler", None), "kv_cache_manager", None)
    return getattr(manager, "block_pool", None)


def _resolved(llm: Any) -> dict[str, Any]:
    """The configuration the engine resolved (what a deployment's behaviour follows from)."""
    cfg = llm.llm_engine.vllm_config
    sc, cc, mc = cfg.scheduler_config, cfg.cache_config, cfg.model_config
    out: dict[str, Any] = {}
    for name, obj, attr in (
            ("max_num_seqs", sc, "max_num_seqs"), ("max_num_batched_tokens", sc, "max_num_batched_tokens"),
            ("max_num_scheduled_tokens", sc, "max_num_scheduled_tokens"),
            ("enable_chunked_prefill", sc, "enable_chunked_prefill"),
            ("long_prefill_token_threshold", sc, "long_prefill_token_threshold"), ("policy", sc, "policy"),
            ("block_size", cc, "block_size"), ("num_gpu_blocks", cc, "num_gpu_blocks"),
            ("enable_prefix_caching", cc, "enable_prefix_caching"), ("cache_dtype", cc, "cache_dtype"),
            ("kv_cache_memory_bytes", cc, "kv_cache_memory_bytes"), ("max_model_len", mc, "max_model_len"),
            ("dtype", mc, "dtype"), ("enforce_eager", mc, "enforce_eager")):
        v = getattr(obj, attr, None)
        out[name] = v if v is None or isinstance(v, (bool, int, float, str)) else str(v)
    return out


def _run_phase(llm: Any, phase: dict[str, Any], rep: int, requests: list[list[Any]]) -> dict[str, Any]:
    from vllm import SamplingParams

    engine = llm.llm_engine
    n = len(requests)
    tokens: list[list[int]] = [[] for _ in range(n)]
    first: list[float | None] = [None] * n
    finish: list[float | None] = [None] * n
    ids = {f"{phase['name']}-{rep}-{i}": i for i in range(n)}
    before = _counters()
    t0, c0 = time.perf_counter(), time.process_time()
    for rid, i in ids.items():
        prompt, max_tokens = requests[i]
        sp = SamplingParams(max_tokens=int(max_tokens), min_tokens=int(max_tokens), ignore_eos=True,
                            temperature=0.0, detokenize=False)
        engine.add_request(rid, {"prompt_token_ids": [int(t) for t in prompt]}, sp)
    steps, stalled = 0, ""
    step_cpu: list[float] = []
    step_wall: list[float] = []
    deadline = t0 + float(phase.get("deadline_s", 120.0))
    while engine.has_unfinished_requests():
        if steps >= int(phase["max_steps"]):
            stalled = f"{sum(f is None for f in finish)} of {n} requests unfinished after {steps} engine steps"
            break
        if time.perf_counter() > deadline:
            stalled = (f"{sum(f is None for f in finish)} of {n} requests unfinished after "
                       f"{phase.get('deadline_s', 120.0)} s ({steps} engine steps)")
            break
        s0, w0 = time.process_time(), time.perf_counter()
        outs = engine.step()
        step_cpu.append(time.process_time() - s0)
        step_wall.append(time.perf_counter() - w0)
        steps += 1
        now = time.perf_counter() - t0
        for o in outs:
            k = ids.get(o.request_id)
            if k is None:
                continue
            i = k
            got = list(o.outputs[0].token_ids) if o.outputs else []
            if got and first[i] is None:
                first[i] = now
            tokens[i] = [int(t) for t in got]
            if o.finished:
                finish[i] = now
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if stalled:
        engine.abort_request(list(ids))
    after = _counters()
    return {"steps": steps, "wall_s": wall, "cpu_s": cpu, "stalled": stalled, "tokens": tokens, "first": first,
            "finish": finish, "step_cpu": step_cpu, "step_wall": step_wall, **{k: after[k] - before[k] for k in after}}


def start(job: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """A new engine for ``job``: the report's head (vLLM's version, the device, the start-up time, the resolved
    configuration, or the ``error`` that stopped it) and the engine (None where it did not start)."""
    for k, v in _ENV.items():
        os.environ.setdefault(k, v)
    out: dict[str, Any] = {}
    try:
        args = _engine_args()
    except Exception as exc:  # the deployment's arguments cannot be read
        out["error"] = _error("engine_args", exc)
        return out, None
    model = Path(tempfile.mkdtemp(prefix="rsi-model-"))
    (model / "config.json").write_text(json.dumps(job["model_config"]))
    t0 = time.perf_counter()
    try:
        import vllm
        from vllm import LLM

        out["vllm_version"] = vllm.__version__
        from vllm.platforms import current_platform

        out["device"] = str(current_platform.device_type)
        llm = LLM(model=str(model), load_format="dummy", skip_tokenizer_init=True, seed=0, generation_config="vllm",
                  disable_log_stats=False, **args)
    except BaseException as exc:  # a refusal, an out-of-memory, the workspace's module failing to import
        out["error"] = _error("start", exc)
        return out, None
    out["startup_s"] = time.perf_counter() - t0
    try:
        out["resolved"] = _resolved(llm)
    except Exception as exc:
        out["error"] = _error("resolved", exc)
        return out, None
    return out, llm


def serve_rep(llm: Any, phase: dict[str, Any], rep: int) -> dict[str, Any]:
    """Repetition ``rep`` of ``phase`` on an empty prefix cache: its report (raises what the engine raises)."""
    llm.reset_prefix_cache()
    return _run_phase(llm, phase, rep, phase["reps"][rep])


def blocks(llm: Any) -> dict[str, int]:
    """The KV-cache blocks free in vLLM's block pool, and their number (nothing where this vLLM keeps it elsewhere)."""
    pool = _block_pool(llm)
    return {} if pool is None else {"free_blocks": int(pool.get_num_free_blocks()), "num_blocks": int(pool.num_gpu_blocks)}


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Every phase of ``job`` on a new engine; what failed is reported, never raised."""
    head, llm = start(job)
    out: dict[str, Any] = {**head, "phases": {}}
    if llm is None:
        return out
    for phase in job["phases"]:
        reps = []
        for rep in range(len(phase["reps"])):
            try:
                reps.append(serve_rep(llm, phase, rep))
            except BaseException as exc:
                out["phases"][phase["name"]] = reps
                out["error"] = _error(f"phase {phase['name']}", exc)
                return out
            if reps[-1]["stalled"]:
                break
        out["phases"][phase["name"]] = reps
    return {**out, **blocks(llm)}


def serve() -> int:
    """The engine's process under the hidden checks' supervisor: one JSON request per line on stdin, one reply each.

    Requests (each carries its ``turn``, which the reply repeats): ``start`` (``job``: start the engine; the
    reply is the report's head), ``phase`` (``phase``, ``rep``: serve that repetition; the reply's ``rep`` is
    its report, or ``error``), ``finish`` (the reply holds the KV blocks free). Replies go to a copy of the
    original stdout; whatever else prints goes to stderr.
    """
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    llm: Any = None
    phases: dict[str, dict[str, Any]] = {}
    while line := sys.stdin.readline():
        req = json.loads(line)
        reply: dict[str, Any]
        if req["cmd"] == "start":
            phases = {p["name"]: p for p in req["job"]["phases"]}
            reply, llm = start(req["job"])
        elif req["cmd"] == "phase":
            try:
                reply = {"rep": serve_rep(llm, phases[req["phase"]], int(req["rep"]))}
            except BaseException as exc:
                reply = {"error": _error(f"phase {req['phase']}", exc)}
        else:
            reply = blocks(llm)
        replies.write(json.dumps({"turn": req["turn"], **reply}) + "\n")
    return 0


def summary(out: dict[str, Any]) -> str:
    """What an engineer reads of a report: the configuration, each phase's counters and rate, the KV blocks."""
    lines = [f"vLLM {out.get('vllm_version', '?')}, started in {out.get('startup_s', 0.0):.1f} s"]
    if "resolved" in out:
        lines.append("resolved: " + ", ".join(f"{k}={v}" for k, v in out["resolved"].items()))
    for name, reps in out.get("phases", {}).items():
        for k, r in enumerate(reps):
            made = sum(len(t) for t in r["tokens"])
            lines.append(f"{name}[{k}]: {len(r['tokens'])} requests, {made} tokens in {r['steps']} steps, "
                         f"{r['wall_s']:.3f} s ({made / max(r['wall_s'], 1e-9):.0f} tok/s), preemptions "
                         f"{r['preemptions']:.0f}, prefix-cache hits {r['prefix_hits']:.0f} of "
                         f"{r['prefix_queries']:.0f} queried tokens" + (f"; STALLED: {r['stalled']}" if r["stalled"]
                                                                        else ""))
    if "free_blocks" in out:
        lines.append(f"KV blocks free at the end: {out['free_blocks']} of {out['num_blocks']}")
    if "error" in out:
        e = out["error"]
        lines.append(f"ERROR during {e['stage']}: {e['type']}: {e['message']}\n{e['traceback']}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[1:] == ["--serve"]:
        return serve()
    if len(argv) < 2:
        print(f"usage: python {Path(argv[0]).name} JOB.json [OUT.json]", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[1]).read_text())
    out = run(job)
    if len(argv) > 2:
        Path(argv[2]).write_text(json.dumps(out))
    print(summary(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
