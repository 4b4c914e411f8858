"""What a cold env step costs outside the simulator: the env's own work (configuration, keys, serving.yaml, store
rows, observation), with the simulator's results replayed.

    python benchmarks/env_overhead.py [--env RSI/Batching-v0] [--steps 60] [--profile 30]

A first pass over a fixed sequence of random flag actions (the measurement cache cleared before each step, as a
cold step is) records every `simulate_detailed` result; a second pass over the same actions replays them in order,
so its CPU time is the env's alone. Prints both per step, then (``--profile N``) the N largest cumulative entries
of a cProfile of the replayed pass. Compare trees by running it in each (issue 30, docs/sim-speed.md).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from typing import Any

import gymnasium as gym
import numpy as np

import rsi_env  # noqa: F401  (registers the ids)
import rsi_env.sim as sim


def _actions(env: Any, n: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    k = len(env.flag_names)
    return [{"kind": 0, "flag": int(rng.integers(k)), "value": np.float32(rng.random())} for _ in range(n)]


def _run(env: Any, actions: list[dict[str, Any]], prof: cProfile.Profile | None = None) -> float:
    """CPU seconds of the steps (resets excluded), each after the measurement cache is cleared."""
    env.reset(seed=0)
    spent = 0.0
    for a in actions:
        env.tier.cache.clear()
        t0 = time.process_time()
        if prof is not None:
            prof.enable()
        _, _, term, trunc, _ = env.step(a)
        if prof is not None:
            prof.disable()
        spent += time.process_time() - t0
        if term or trunc or env.measurements >= env.task.max_measurements:
            env.reset(seed=0)
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="RSI/Batching-v0")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--profile", type=int, default=0, help="print this many cProfile entries of the replayed pass")
    args = ap.parse_args()
    env = gym.make(args.env).unwrapped
    actions = _actions(env, args.steps)
    real = sim.simulate_detailed
    tape: list[Any] = []

    def recording(*a: Any, **k: Any) -> Any:
        tape.append(real(*a, **k))
        return tape[-1]

    pos = [0]

    def replaying(*a: Any, **k: Any) -> Any:
        pos[0] += 1
        return tape[pos[0] - 1]

    try:
        sim.simulate_detailed = recording
        whole = _run(env, actions)
        sim.simulate_detailed = replaying
        own = _run(env, actions)
        if args.profile:
            pos[0] = 0
            prof = cProfile.Profile()
            _run(env, actions, prof)
    finally:
        sim.simulate_detailed = real
        env.close()
    print(f"{args.env}: cold step {1e3 * whole / args.steps:.2f} ms CPU, outside the simulator "
          f"{1e3 * own / args.steps:.2f} ms ({len(tape)} simulations over {args.steps} steps)")
    if args.profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)


if __name__ == "__main__":
    main()
