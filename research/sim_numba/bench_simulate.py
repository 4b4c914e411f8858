"""`simulate` and cold RSI/Batching-v0 / RSI/KVCache-v0 steps with the engine loop compiled (`loop_group.py`), side
by side with the Python engine in one process.

`PortEngine` stands in for `EngineSim` where `simulate_detailed` builds the engine: the compiled loop where the
configuration is in its subset and it completes, the Python `EngineSim` otherwise (a run the port stops is run again
in Python, its time counted). `simulate` outputs are compared by their ``--json`` text (`Telemetry.to_json`, ``==``);
env steps are timed as `benchmarks/bench_envs.py`'s ``rate`` does (the measurement cache cleared before each step),
the same seeded action sequence through each engine twice, alternating, with the share of engine runs the port
covered.

    PYTHONPATH=/tmp/numba_site python3 research/sim_numba/bench_simulate.py [--steps 60]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the repo root: tests.golden's configurations

__all__ = ["PortEngine", "main"]

COUNTS = {"port": 0, "fallback": 0}
LOOP = {"name": "loop_full"}  # the compiled loop: loop_full (default) or loop_group (the study's subset)


class PortEngine:
    """`EngineSim`'s constructor and ``run``, on the compiled loop where it covers the run."""

    def __init__(self, cfg: Any, cost: Any, trace: Any, num_gpu_blocks: int, check_invariants: bool = False,
                 record_steps: bool = True) -> None:
        self.args = (cfg, cost, trace, num_gpu_blocks, check_invariants)
        self.record_steps = record_steps

    def run(self) -> Any:
        import loop
        import loop_group

        from rsi_env.engine.profile import Profile
        from rsi_env.sim.engine import EngineSim, SimResult

        cfg, cost, trace, blocks, check = self.args
        if LOOP["name"] == "loop_full":
            import loop_full

            ok = not check and loop_full.reason(cfg, cost, trace) is None
            run = (lambda: loop_full.run_compiled(cfg, cost, trace, blocks, record=self.record_steps))  # noqa: E731
        else:
            ok = not self.record_steps and not check and loop.supported(cfg, cost, trace, closed=True)
            run = (lambda: loop_group.run_compiled(cfg, cost, trace, blocks))  # noqa: E731
        if ok:
            res, prof, status = run()
            if not status:
                COUNTS["port"] += 1
                cost.engine_cpu_rest(prof, res["busy_time"])
                return SimResult(
                    arrival=res["arrival"], first_token=res["first_token"], finish=res["finish"],
                    prompt_len=trace.prompt_len.astype(np.int64), output_len=trace.output_len.astype(np.int64),
                    generated=res["generated"], num_steps=res["num_steps"],
                    num_preemptions=res.get("num_preemptions", 0), prefix_queries=res["prefix_queries"],
                    prefix_hits=res.get("prefix_hits", 0), kv_usage_peak=res["kv_usage_peak"],
                    busy_time=res["busy_time"], running_time_integral=res["running_time_integral"],
                    tokens_scheduled=res["tokens_scheduled"], steps=res.get("steps"),
                    preempted_prefix_hits=res.get("preempted_prefix_hits", 0),
                    profile=Profile(*prof))
        COUNTS["fallback"] += 1
        return EngineSim(cfg, cost, trace, blocks, check, record_steps=self.record_steps).run()


def _use(engine: Any) -> None:
    import rsi_env.sim as sim

    sim.simulate_detailed.__kwdefaults__["engine_cls"] = engine


def bench_simulate(repeat: int) -> None:
    import rsi_env.sim as sim
    from rsi_env.sim.engine import EngineSim
    from tests.golden import outputs

    print(f"{'simulate (CPU ms, best of ' + str(repeat) + ')':62s} {'python':>8s} {'port':>8s} {'ratio':>6s}  "
          "telemetry ==  engine")
    cases = [("llama-3.1-8b", "tests/golden/traces/poisson_1000.yaml", c) for c in outputs.TRACE_CONFIGS]
    cases += [("llama-3.1-8b", w, "defaults") for w in ("short_long", "rag_chat", "many_small", "long_context")]
    cases += [("llama-3.1-8b", "tests/golden/traces/closed_1000.yaml", c) for c in ("defaults", "small_batches")]
    cases += [("mistral-7b", "short_long", "defaults"), ("qwen3-30b-a3b", "short_long", "defaults")]
    from rsi_env.cli import _parse_sets

    for model, wl, cname in cases:
        flags = _parse_sets(outputs.TRACE_CONFIGS[cname])
        times, tels = [], []
        for engine in (EngineSim, PortEngine):
            _use(engine)
            sim.simulate(flags, model, "h200", wl)
            before = dict(COUNTS)
            best = float("inf")
            for _ in range(repeat):
                t0 = time.process_time()
                tel = sim.simulate(flags, model, "h200", wl)
                best = min(best, time.process_time() - t0)
            times.append(best)
            tels.append(tel.to_json())
        used = "port" if COUNTS["port"] > before["port"] else "python fallback"
        _use(EngineSim)
        print(f"{model + '/' + Path(wl).stem + '/' + cname:62s} {times[0] * 1e3:8.2f} {times[1] * 1e3:8.2f} "
              f"{times[0] / times[1]:5.1f}x  {str(tels[0] == tels[1]):12s}  {used}")


def bench_env(env_id: str, steps: int, blocks: int) -> None:
    """``blocks`` passes per engine of ``steps`` cold steps each."""
    import gymnasium as gym

    import rsi_env  # noqa: F401
    from rsi_env.sim.engine import EngineSim

    env = gym.make(env_id).unwrapped
    nflags = len(env.flag_names)
    spent = {"python": 0.0, "port": 0.0}
    done = {"python": 0, "port": 0}
    COUNTS["port"] = COUNTS["fallback"] = 0
    for b in range(2 * blocks):
        which = "python" if b % 2 == 0 else "port"
        _use(EngineSim if which == "python" else PortEngine)
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        for _ in range(steps):
            a = {"kind": 0, "flag": int(rng.integers(nflags)), "value": np.float32(rng.random())}
            env.tier.cache.clear()
            t0 = time.process_time()
            _, _, term, trunc, _ = env.step(a)
            spent[which] += time.process_time() - t0
            done[which] += 1
            if term or trunc or env.measurements >= env.task.max_measurements:
                env.reset(seed=0)
    _use(EngineSim)
    env.close()
    py, port = spent["python"] / done["python"], spent["port"] / done["port"]
    cover = COUNTS["port"] / max(COUNTS["port"] + COUNTS["fallback"], 1)
    print(f"{env_id:20s} cold step CPU: python {py * 1e3:6.2f} ms, port {port * 1e3:6.2f} ms, {py / port:4.2f}x "
          f"({done['port']} steps each, the same configurations; port ran {100 * cover:.0f} % of the "
          f"engine runs of its steps)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--loop", default="loop_full", choices=("loop_full", "loop_group"))
    p.add_argument("--envs-only", action="store_true", help="only the cold env steps")
    args = p.parse_args()
    LOOP["name"] = args.loop
    import loop_full  # noqa: F401  (numba's cache load, before any timing)
    import loop_group  # noqa: F401

    import rsi_env.sim as sim

    _use(PortEngine)  # the compiled loop's first call (numba's cache load), before any timing
    sim.simulate({}, "llama-3.1-8b", "h200", "short_long")
    _use(sim.engine.EngineSim)
    if not args.envs_only:
        bench_simulate(args.repeat)
    for env_id in ("RSI/Batching-v0", "RSI/KVCache-v0"):
        bench_env(env_id, args.steps, 2)


if __name__ == "__main__":
    main()
