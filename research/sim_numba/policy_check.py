"""A scheduling policy's keys (`rsi_env.sim.policy_hook.PolicyEngineSim`) through the compiled loop: random static
keys, ties included, on golden traces and configurations that queue and preempt; every `SimResult` field and the
step trace compared with the Python engine's (``==``, NaN equal to NaN); then `simulate_policy` (with invariant
checks) with `PortPolicyEngine` standing in for `PolicyEngineSim`, its telemetry's ``to_json`` compared.

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


class PortPolicyEngine:
    """`PolicyEngineSim`'s stand-in in `simulate_policy`: the compiled loop given the policy's keys (the Python
    `PolicyEngineSim` where the loop stops)."""

    def __init__(self, cfg: Any, cost: Any, trace: Any, blocks: int, check: bool = False, *, keys: Any) -> None:
        self.a = (cfg, cost, trace, blocks, check)
        self.keys = keys

    def run(self) -> Any:
        from rsi_env.engine.profile import Profile
        from rsi_env.sim.engine import SimResult
        from rsi_env.sim.policy_hook import PolicyEngineSim

        cfg, cost, trace, blocks, check = self.a
        res, prof, status = loop_full.run_compiled(dataclasses.replace(cfg, scheduling_policy="priority"), cost,
                                                   trace, blocks, record=True, keys=self.keys, check=check)
        if status:
            return PolicyEngineSim(cfg, cost, trace, blocks, check, keys=self.keys).run()
        cost.engine_cpu_rest(prof, res["busy_time"])
        return SimResult(
            arrival=res["arrival"], first_token=res["first_token"], finish=res["finish"],
            prompt_len=trace.prompt_len.astype(np.int64), output_len=trace.output_len.astype(np.int64),
            generated=res["generated"], num_steps=res["num_steps"], num_preemptions=res["num_preemptions"],
            prefix_queries=res["prefix_queries"], prefix_hits=res["prefix_hits"], kv_usage_peak=res["kv_usage_peak"],
            busy_time=res["busy_time"], running_time_integral=res["running_time_integral"],
            tokens_scheduled=res["tokens_scheduled"], steps=res["steps"],
            preempted_prefix_hits=res["preempted_prefix_hits"], profile=Profile(*prof))


def via_simulate_policy(model: str, wl: str, flags: list[str], seed: int) -> bool | None:
    """`simulate_policy`'s telemetry (``to_json``) with `PolicyEngineSim` and with `PortPolicyEngine`: equal?"""
    import rsi_env.sim.policy_hook as hook
    from rsi_env.cli import _parse_sets
    from rsi_env.engine.config import EngineConfig
    from rsi_env.engine.workload import load_workload

    w = load_workload(wl)
    keys = _keys(w.trace(), seed)
    cfg = EngineConfig.from_dict(_parse_sets(flags))
    if cfg.data_parallel_size not in (None, 1):
        return None
    orig = hook.PolicyEngineSim
    try:
        ref, _ = hook.simulate_policy(cfg, model, "h200", w, keys, check_invariants=True)
        hook.PolicyEngineSim = PortPolicyEngine  # type: ignore[misc]
        got, _ = hook.simulate_policy(cfg, model, "h200", w, keys, check_invariants=True)
    finally:
        hook.PolicyEngineSim = orig  # type: ignore[misc]
    return bool(ref.to_json() == got.to_json())


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
    same = total = none = tele = 0
    for model, wl, cname in cases:
        for seed in range(args.seeds):
            SEED[0] = seed
            OUT.clear()
            simulate_detailed(_parse_sets(outputs.TRACE_CONFIGS[cname]), model, "h200", wl, engine_cls=Both)
            total += bool(OUT)
            none += not OUT
            same += all(o.startswith("same") for o in OUT) and bool(OUT)
            via = via_simulate_policy(model, wl, outputs.TRACE_CONFIGS[cname], seed)
            tele += bool(via)
            print(f"{model}/{Path(wl).stem}/{cname} keys {seed}: {'; '.join(OUT) or 'no engine run'}; "
                  f"simulate_policy --json == with PortPolicyEngine: {via}", flush=True)
    print(f"\n{same} of {total} cases identical ({none} more: the configuration fails before any engine run); "
          f"simulate_policy telemetry identical with the port standing in: {tele} of {same + none}")


if __name__ == "__main__":
    main()
