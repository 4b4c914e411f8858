"""Simulator speed: wall time and simulated requests per second for each frozen workload, on one core.

Prints, per workload, the median wall time of ``simulate`` (after a warm-up), the simulated
requests per wall second, and — side by side, from the H200 measurements in ``data/`` — what
measuring the same workload on the real engine cost: the workload's own wall time, and that plus
its share of the engine start (one start serves the five workloads of a calibration run).
Run: ``python benchmarks/bench_sim.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from rsi_env.engine import list_workloads, load_workload  # noqa: E402
from rsi_env.sim import simulate  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements" / "h200-vllm0.26"


def real_costs(model: str) -> dict[str, tuple[float, float]]:
    """Workload -> (wall seconds of the measurement, wall + share of the engine start), default flags."""
    out: dict[str, tuple[float, float]] = {}
    for f in sorted(DATA.glob("*.jsonl")):
        rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        rows = [r for r in rows if r["model"] == model and not r["flags"]]
        for r in rows:
            out[r["workload"]] = (r["wall_s"], r["wall_s"] + r["startup_s"] / max(len(rows), 1))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-3.1-8b")
    p.add_argument("--hardware", default="h200")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    real = real_costs(args.model) if args.hardware == "h200" else {}
    print(f"{'workload':20s} {'requests':>8s} {'sim ms':>8s} {'sim req/s':>10s} {'GPU run s':>10s} "
          f"{'x cheaper':>10s} {'GPU+start s':>12s} {'x cheaper':>10s}")
    for name in list_workloads():
        w = load_workload(name)
        simulate({}, args.model, args.hardware, w)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            simulate({}, args.model, args.hardware, w)
            times.append(time.perf_counter() - t0)
        wall = statistics.median(times)
        run_s, full_s = real.get(name, (float("nan"), float("nan")))
        print(f"{name:20s} {w.requests:8d} {wall * 1e3:8.1f} {w.requests / wall:10.0f} {run_s:10.1f} "
              f"{run_s / wall:10.0f} {full_s:12.1f} {full_s / wall:10.0f}")


if __name__ == "__main__":
    main()
