"""A scheduling policy's keys (`rsi_env.sim.policy_hook.PolicyEngineSim`) through the compiled loop: random static
keys, ties included, on golden traces and configurations that queue and preempt; every `SimResult` field and the
step trace compared with the Python engine's (``==``, NaN equal to NaN).

    PYTHONPATH=/tmp/numba_site nice -n 10 python3 research/sim_numba/policy_check.py [--seeds 3]
"""

from __future__ import annotations

import argparse
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

OUT: list[str] = []


def _keys(trace: Any, seed: int) -> Any:
    from rsi_env.engine.policy import PolicyKeys

    rng = np.random.default_rng(seed)
    n = len(trace)
    arr = trace.arrival_s.astype(np.float64)
    kind = seed % 3
    if kind == 0:  # shortest prompt first, victims the longest prompts: many ties broken by id
        w = trace.prompt_len.astype(np.float64) // 256
        v = trace.prompt_len.astype(np.float64)
    elif kind == 1:  # aging: arrival plus a bounded prompt penalty
        w = arr + np.minimum(trace.prompt_len / 4096.0, 2.0)
        v = -arr
    else:  # random, rounded (ties)
        w = np.round(rng.random(n) * 10.0)
        v = np.round(rng.random(n) * 10.0)
    return PolicyKeys(waiting=w, victim=v)


class Both:
    def __init__(self, cfg: Any, cost: Any, trace: Any, blocks: int, check: bool = False,
                 record_steps: bool = True) -> None:
        self.a = (cfg, cost, trace, blocks)

    def run(self) -> Any:
        from rsi_env.engine.profile import Profile
        from rsi_env.sim.policy_hook import PolicyEngineSim

        cfg, cost, trace, blocks = self.a
        keys = _keys(trace, SEED[0])
        ref = PolicyEngineSim(cfg, cost, trace, blocks, keys=keys).run()
        res, prof, status = loop_full.run_compiled(dataclasses.replace(cfg, scheduling_policy="priority"), cost,
                                                   trace, blocks, record=True, keys=keys)
        if status:
            OUT.append(f"status {status}")
            return ref
        cost.engine_cpu_rest(prof, res["busy_time"])
        got = {**res, "profile": Profile(*prof), "prompt_len": ref.prompt_len, "output_len": ref.output_len}
        bad = [f.name for f in dataclasses.fields(ref) if not _same(getattr(ref, f.name), got[f.name])]
        OUT.append(("MISMATCH " + ", ".join(bad)) if bad else f"same ({ref.num_preemptions} preemptions)")
        return ref


SEED = [0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    from rsi_env.cli import _parse_sets
    from rsi_env.sim import simulate_detailed
    from tests.golden import outputs

    cases = [(m, str(outputs.TRACES / f"{t}.yaml"), c) for m in ("llama-3.1-8b", "mistral-7b", "qwen3-30b-a3b")
             for t in ("poisson_1000", "burst_1000", "prefix_poisson_1000") for c in ("defaults", "tight_kv")]
    cases += [("llama-3.1-8b", w, "small_batches") for w in ("shared_prefix_many", "rag_chat", "short_long")]
    same = total = none = 0
    for model, wl, cname in cases:
        for seed in range(args.seeds):
            SEED[0] = seed
            OUT.clear()
            simulate_detailed(_parse_sets(outputs.TRACE_CONFIGS[cname]), model, "h200", wl, engine_cls=Both)
            total += bool(OUT)
            none += not OUT
            same += all(o.startswith("same") for o in OUT) and bool(OUT)
            print(f"{model}/{Path(wl).stem}/{cname} keys {seed}: {'; '.join(OUT) or 'no engine run'}", flush=True)
    print(f"\n{same} of {total} cases identical ({none} more: the configuration fails before any engine run)")


if __name__ == "__main__":
    main()
