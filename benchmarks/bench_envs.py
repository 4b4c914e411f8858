"""Environment speed: flag steps per second with auto-bench, for each RSI/* env on the sim tier, one core.

Two numbers per env, side by side: ``cold`` — every step measures a configuration never seen before
(the cache is cleared before each step), and ``random agent`` — a random flag agent, whose repeated
configurations hit the measurement cache (same config, workload, model, hardware and calibration).
Run: ``python benchmarks/bench_envs.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import rsi_env  # noqa: E402,F401
from rsi_env.envs import list_tasks  # noqa: E402


def rate(env_id: str, steps: int, cold: bool, seed: int = 0, *, time_resets: bool = False) -> float:
    """Steps per second of a seeded random flag agent; ``cold`` clears the measurement cache before each step.

    ``time_resets`` counts the resets after an episode ends (where it is recorded in the store) in the time.
    """
    env = gym.make(env_id).unwrapped
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    n = len(env.flag_names)
    elapsed = 0.0
    for _ in range(steps):
        a = {"kind": 0, "flag": int(rng.integers(n)), "value": np.float32(rng.random())}
        if cold:
            env.tier.cache.clear()
        t0 = time.perf_counter()
        _, _, term, trunc, _ = env.step(a)
        if not time_resets:
            elapsed += time.perf_counter() - t0
        if term or trunc or env.measurements >= env.task.max_measurements:
            env.reset(seed=seed)
        if time_resets:
            elapsed += time.perf_counter() - t0
    env.close()
    return steps / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    print(f"{'env':22s} {'cold steps/s':>13s} {'random agent steps/s':>21s}")
    for t in list_tasks():
        print(f"{t.id:22s} {rate(t.id, args.steps, True):13.1f} {rate(t.id, args.steps, False):21.1f}")


if __name__ == "__main__":
    main()
