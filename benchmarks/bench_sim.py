"""Simulator speed: wall time and simulated requests per second for each frozen workload, on one core.

Prints, per workload, the median wall time of ``simulate`` (after a warm-up), the simulated
requests per wall second, and how many times cheaper the simulation is than the run it stands for
(simulated engine seconds / wall seconds). Run: ``python benchmarks/bench_sim.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from rsi_env.engine import list_workloads, load_workload  # noqa: E402
from rsi_env.sim import simulate  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-3.1-8b")
    p.add_argument("--hardware", default="h200")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    print(f"{'workload':20s} {'requests':>8s} {'wall ms':>9s} {'sim req/s':>10s} {'engine s':>9s} {'x cheaper':>10s}")
    for name in list_workloads():
        w = load_workload(name)
        tel = simulate({}, args.model, args.hardware, w)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            simulate({}, args.model, args.hardware, w)
            times.append(time.perf_counter() - t0)
        wall = statistics.median(times)
        print(f"{name:20s} {w.requests:8d} {wall * 1e3:9.1f} {w.requests / wall:10.0f} {tel.duration_s:9.2f} "
              f"{tel.duration_s / wall:10.0f}")


if __name__ == "__main__":
    main()
