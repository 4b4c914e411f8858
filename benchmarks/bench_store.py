"""The experience store's cost: env steps per second with recording on and off, side by side, one core.

Each env runs the same seeded random flag agent twice per round — with ``RSI_ENV_STORE=off`` and with
a fresh SQLite store — in alternating rounds, so drift in the machine's speed hits both alike. ``cold``
clears the measurement cache before every step (every step simulates and writes a trial: the worst
case for the store); ``agent`` keeps it (repeats are cache hits and write nothing). Episodes are
recorded when they end. Run: ``python benchmarks/bench_store.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import bench_envs  # noqa: E402  (this folder: run as a script)
import numpy as np  # noqa: E402

from rsi_env.store import ExperienceStore  # noqa: E402


def rate(env_id: str, steps: int, cold: bool, store_url: str, seed: int = 0) -> float:
    """`bench_envs.rate` with the store at ``store_url``, the resets (which record episodes) timed too."""
    os.environ["RSI_ENV_STORE"] = store_url
    return bench_envs.rate(env_id, steps, cold, seed, time_resets=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--envs", default="RSI/KVCache-v0,RSI/Batching-v0,RSI/PrefixCache-v0")
    args = p.parse_args()
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    tmp = tempfile.mkdtemp(prefix="rsi-bench-store-")
    print(f"{'env':20s} {'mode':5s} {'off steps/s':>12s} {'on steps/s':>11s} {'on/off':>7s}")
    for env_id in args.envs.split(","):
        for cold in (True, False):
            off, on = [], []
            for r in range(args.rounds):
                url = f"sqlite:///{tmp}/{env_id.replace('/', '_')}-{cold}-{r}.sqlite"
                off.append(rate(env_id, args.steps, cold, "off"))
                on.append(rate(env_id, args.steps, cold, url))
            a, b = float(np.median(off)), float(np.median(on))
            print(f"{env_id:20s} {'cold' if cold else 'agent':5s} {a:12.1f} {b:11.1f} {b / a:7.3f}", flush=True)
    # The write itself, without the simulator around it: one trial (two workloads) per transaction.
    from rsi_env.engine import load_hardware, load_model, load_workload
    from rsi_env.engine.config import EngineConfig
    from rsi_env.sim import simulate
    from rsi_env.store.record import record_measurements

    os.environ["RSI_ENV_STORE"] = f"sqlite:///{tmp}/writes.sqlite"
    model, hw = load_model("llama-3.1-8b"), load_hardware("h200")
    wls = [load_workload("short_long"), load_workload("many_small")]
    sim_ms = math.inf
    for _ in range(3):  # the fastest of three: warm caches, as in an episode
        t0 = time.perf_counter()
        tels = [simulate({}, model, hw, w) for w in wls]
        sim_ms = min(sim_ms, (time.perf_counter() - t0) * 1e3)
    n = 300
    t0 = time.perf_counter()
    for _ in range(n):
        record_measurements("sim", "0.26", EngineConfig(), model, hw, wls, tels)
    rec_ms = (time.perf_counter() - t0) * 1e3 / n
    print(f"one trial of two workloads: simulated in {sim_ms:.1f} ms, recorded in {rec_ms:.2f} ms "
          f"({rec_ms / sim_ms:.1%} of simulating it)")
    total = sum(ExperienceStore(f"sqlite:///{tmp}/{f}").stats()["measurements"]
                for f in os.listdir(tmp) if f.endswith(".sqlite"))
    print(f"(median of {args.rounds} rounds of {args.steps} steps; {total} measurements written in all)")


if __name__ == "__main__":
    main()
