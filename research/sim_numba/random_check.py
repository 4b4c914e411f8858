"""Random traces and pools through the Python `EngineSim` and the compiled loop (`loop_full`), every `SimResult`
field and the step trace compared (``==``, NaN equal to NaN): a differential test beyond the golden set.

Each configuration's `ResolvedConfig` and `StepCost` come from `simulate_detailed` (models: dense, sliding-window,
MoE; vLLM's defaults, small batches, fp8 without prefix caching, a long-prefill threshold, priority + sync + eager
+ no chunked prefill, and capture sizes in an unsorted order built directly); each trace draws Poisson or burst or
closed-loop arrivals, prompt and output lengths, shared-prefix groups, and a KV pool from a handful of blocks to the
plan's, so that preemption, eviction of parked and group chains, and deadlocks all occur. Both sides check the
pool's invariants after every step (``check_invariants=True``, ``check=True``). A run the Python engine refuses
(`RuntimeError`, or `AssertionError` from `BlockPool.check`) must be one the port stops (status 3, 4 or 5).

    PYTHONPATH=/tmp/numba_site nice -n 10 python3 research/sim_numba/random_check.py [--traces 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parents[1]))

import loop_full  # noqa: E402
from steps_check import _same  # noqa: E402

CONFIGS = {"defaults": [], "small_batches": ["max_num_seqs=32", "max_num_batched_tokens=2048"],
           "fp8_kv_no_prefix": ["kv_cache_dtype=fp8", "enable_prefix_caching=false", "block_size=32"],
           "threshold": ["long_prefill_token_threshold=256", "max_num_batched_tokens=1024"],
           "sync_priority_eager": ["scheduling_policy=priority", "async_scheduling=false",
                                   "enable_chunked_prefill=false", "enforce_eager=true"],
           "priority_async": ["scheduling_policy=priority", "max_num_seqs=48"]}
MODELS = ("llama-3.1-8b", "mistral-7b", "qwen3-30b-a3b")
MIXED = [False]  # prefix lengths drawn per request within a group (--mixed-prefix)


def _setup(model: str, flags: list[str]) -> tuple[Any, Any, int]:
    from rsi_env.cli import _parse_sets
    from rsi_env.sim import simulate_detailed

    got: list[Any] = []

    class Capture:
        def __init__(self, cfg: Any, cost: Any, trace: Any, blocks: int, *a: Any, **kw: Any) -> None:
            got.append((cfg, cost, blocks))

        def run(self) -> Any:
            raise RuntimeError("captured")

    simulate_detailed(_parse_sets(flags), model, "h200", "short_long", engine_cls=Capture, record_steps=False)
    return got[0]


def _trace(rng: np.random.Generator, max_len: int) -> Any:
    from rsi_env.engine.workload import Trace

    n = int(rng.integers(1, 300))
    kind = rng.integers(3)
    if kind == 0:
        arrival = np.cumsum(rng.exponential(1.0 / rng.uniform(2, 80), n))
    else:
        arrival = np.sort(np.round(rng.uniform(0, rng.uniform(0.01, 5), n), int(rng.integers(1, 4))))
    closed = int(rng.integers(1, 64)) if kind == 2 else 0
    if closed:
        arrival = np.full(n, np.nan)
    prompt = np.minimum(np.exp(rng.normal(rng.uniform(3, 7.5), 1.0, n)).astype(np.int64) + 1, max_len // 2)
    out = np.minimum(np.exp(rng.normal(rng.uniform(1, 5.5), 1.0, n)).astype(np.int64) + 1, max_len // 2)
    groups = int(rng.integers(0, 6))
    group = rng.integers(-1, groups, n) if groups else np.full(n, -1)
    # one prefix length per group (as the workloads have it), the prompt at least that long; ``MIXED``: per request
    glen = rng.integers(0, 3000, max(groups, 1))
    plen = np.where(group >= 0, rng.integers(0, 3000, n) if MIXED[0] else glen[np.maximum(group, 0)], 0)
    prompt = np.maximum(prompt, plen + 1) if not MIXED[0] else prompt
    plen = np.minimum(plen, prompt)
    return Trace(arrival.astype(np.float64), prompt.astype(np.int64), out.astype(np.int64), group.astype(np.int64),
                 plen.astype(np.int64), closed, 0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", type=int, default=40, help="per model and configuration")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mixed-prefix", action="store_true", help="prefix lengths per request, not per group")
    args = p.parse_args()
    MIXED[0] = args.mixed_prefix
    from rsi_env.sim.cost import StepCost
    from rsi_env.sim.engine import EngineSim

    rng = np.random.default_rng(args.seed)
    counts: collections.Counter[str] = collections.Counter()
    pre = 0
    for model in MODELS:
        for cname, flags in CONFIGS.items():
            cfg, cost, plan_blocks = _setup(model, flags)
            variants = [("", cfg, cost)]
            if cfg.cudagraph_capture_sizes:
                sizes = list(cfg.cudagraph_capture_sizes)
                rng.shuffle(sizes)
                cfg_u = dataclasses.replace(cfg, cudagraph_capture_sizes=tuple(sizes))
                variants.append(("/unsorted_sizes", cfg_u, StepCost(cost.model, cost.hw, cfg_u, cost.cal)))
            for tag, c, co in variants:
                bad = 0
                for _ in range(args.traces):
                    trace = _trace(rng, int(c.max_model_len))
                    need = int(-(-(trace.prompt_len + trace.output_len).max() // c.block_size)) + 1
                    blocks = int(rng.choice([plan_blocks, need + rng.integers(0, 50), int(need * rng.uniform(1, 6)),
                                             rng.integers(2, 40)]))
                    try:
                        ref = EngineSim(c, co, trace, blocks, check_invariants=True).run()
                    except (RuntimeError, AssertionError):
                        ref = None
                    res, prof, status = loop_full.run_compiled(c, co, trace, blocks, record=True, check=True)
                    if ref is None or status:
                        verdict = "both refuse" if (ref is None and status in (3, 4, 5)) else \
                            f"MISMATCH (python {'raises' if ref is None else 'runs'}, status {status})"
                    else:
                        from rsi_env.engine.profile import Profile

                        co.engine_cpu_rest(prof, res["busy_time"])
                        got = {**res, "profile": Profile(*prof), "prompt_len": ref.prompt_len,
                               "output_len": ref.output_len}
                        diff = [f.name for f in dataclasses.fields(ref) if not _same(getattr(ref, f.name),
                                                                                   got[f.name])]
                        verdict = ("MISMATCH " + ", ".join(diff)) if diff else "same"
                        pre += ref.num_preemptions
                    counts[verdict.split(" (")[0] if verdict.startswith("MISMATCH (") else verdict] += 1
                    if verdict.startswith("MISMATCH"):
                        bad += 1
                        print(f"  {model}/{cname}{tag} n={len(trace)} blocks={blocks}: {verdict}", flush=True)
                print(f"{model}/{cname}{tag}: {args.traces - bad} of {args.traces} agree", flush=True)
    print(f"\n{sum(counts.values())} runs: " + ", ".join(f"{k} {v}" for k, v in counts.most_common())
          + f"; {pre} preemptions in the runs compared")


if __name__ == "__main__":
    main()
