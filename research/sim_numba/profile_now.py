"""Where a simulation's time goes: the golden poisson_1000 case through `simulate`, and cold RSI/Batching-v0 steps.

Each is run under cProfile; the self time is summed by the layer its function lives in (the engine loop:
``sim/engine.py``, ``scheduler.py``, ``decoders.py``, ``kv_cache.py``; the cost model: ``sim/cost.py``; the workload:
``engine/workload.py``; numpy's and CPython's builtins apart), and the cumulative time of the calls that bound the
parts (``EngineSim.run``, ``Workload.trace``, ``summarize``, ``simulate_detailed`` inside an env step) is printed
next to the whole. cProfile inflates short Python calls, so the shares matter, not the absolute times; the plain
(unprofiled) CPU time is printed first.

    python3 research/sim_numba/profile_now.py [--steps 40]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections import defaultdict
from typing import Any

__all__ = ["main"]

MODEL, HW, TRACE = "llama-3.1-8b", "h200", "tests/golden/traces/poisson_1000.yaml"

LAYERS = (
    ("engine loop", ("rsi_env/sim/engine.py", "rsi_env/sim/scheduler.py", "rsi_env/sim/decoders.py",
                     "rsi_env/sim/kv_cache.py")),
    ("cost model", ("rsi_env/sim/cost.py",)),
    ("workload", ("rsi_env/engine/workload.py",)),
    ("telemetry", ("rsi_env/engine/telemetry.py", "rsi_env/engine/profile.py")),
    ("config/memory", ("rsi_env/engine/config.py", "rsi_env/sim/memory.py", "rsi_env/engine/model.py",
                       "rsi_env/sim/calibration.py", "rsi_env/engine/hardware.py")),
    ("sim/__init__", ("rsi_env/sim/__init__.py",)),
    ("envs", ("rsi_env/envs/", "rsi_env/tasks/", "gymnasium/")),
    ("rsi_env other", ("rsi_env/",)),
)


def _layer(filename: str, name: str) -> str:
    if filename == "~":
        return "numpy/builtins (C)" if ("numpy" in name or "ufunc" in name or "array" in name) else "builtins (C)"
    for label, parts in LAYERS:
        if any(p in filename for p in parts):
            return label
    return "numpy (py)" if "/numpy/" in filename else "other (stdlib, libs)"


def by_layer(stats: pstats.Stats) -> dict[str, float]:
    """Self time summed by layer."""
    out: dict[str, float] = defaultdict(float)
    for (fn, _line, name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        out[_layer(fn, name)] += tt
    return dict(out)


def cum_of(stats: pstats.Stats, part: str, name: str) -> float:
    """Largest cumulative time of a function ``name`` in a file whose path holds ``part`` (0 if not called)."""
    return max((ct for (fn, _line, fname), (_cc, _nc, _tt, ct, _callers) in stats.stats.items()  # type: ignore[attr-defined]
                if part in fn and fname == name), default=0.0)


def top(stats: pstats.Stats, n: int) -> list[tuple[float, str]]:
    rows = [(tt, f"{fn.split('/work/main/')[-1]}:{line} {name}")
            for (fn, line, name), (_cc, _nc, tt, _ct, _c) in stats.stats.items()]  # type: ignore[attr-defined]
    return sorted(rows, reverse=True)[:n]


def report(title: str, prof: cProfile.Profile, bounds: list[tuple[str, str, str]]) -> None:
    st = pstats.Stats(prof)
    total = st.total_tt  # type: ignore[attr-defined]
    print(f"\n== {title}: profiled total {total * 1e3:.1f} ms")
    print("  self time by layer:")
    for k, v in sorted(by_layer(st).items(), key=lambda kv: -kv[1]):
        print(f"    {k:24s} {v * 1e3:9.1f} ms  {100 * v / total:5.1f} %")
    print("  cumulative time of the calls that bound the parts:")
    for label, suffix, name in bounds:
        c = cum_of(st, suffix, name)
        print(f"    {label:36s} {c * 1e3:9.1f} ms  {100 * c / total:5.1f} %")
    print("  largest self times:")
    for tt, where in top(st, 12):
        print(f"    {tt * 1e3:8.1f} ms  {100 * tt / total:5.1f} %  {where}")


SIM_BOUNDS = [
    ("simulate_detailed", "rsi_env/sim/__init__.py", "simulate_detailed"),
    ("  EngineSim.run (the loop)", "rsi_env/sim/engine.py", "run"),
    ("    _decode_span", "rsi_env/sim/engine.py", "_decode_span"),
    ("    _step", "rsi_env/sim/engine.py", "_step"),
    ("    _admit", "rsi_env/sim/scheduler.py", "_admit"),
    ("    _schedule_running", "rsi_env/sim/scheduler.py", "_schedule_running"),
    ("    StepCost.step_time", "rsi_env/sim/cost.py", "step_time"),
    ("    StepCost.decode_span_until", "rsi_env/sim/cost.py", "decode_span_until"),
    ("    StepCost.add_span_parts", "rsi_env/sim/cost.py", "add_span_parts"),
    ("  Workload.trace (generation)", "rsi_env/engine/workload.py", "trace"),
    ("  summarize (telemetry)", "rsi_env/engine/telemetry.py", "summarize"),
    ("  plan_memory", "rsi_env/sim/memory.py", "plan_memory"),
    ("  StepCost.__init__", "<string>", "__init__"),
]


def profile_simulate(repeat: int) -> None:
    from rsi_env.sim import simulate

    simulate({}, MODEL, HW, TRACE)  # warm: the YAML parse and imports are paid once per process
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        simulate({}, MODEL, HW, TRACE)
        best = min(best, time.process_time() - t0)
    print(f"simulate({MODEL}, poisson_1000, defaults): {best * 1e3:.1f} ms CPU unprofiled (best of {repeat})")
    prof = cProfile.Profile()
    prof.enable()
    simulate({}, MODEL, HW, TRACE)
    prof.disable()
    report("rsi-env simulate, golden poisson_1000 / defaults", prof, SIM_BOUNDS)


def _cold_steps(env: Any, steps: int, prof: cProfile.Profile | None) -> float:
    import numpy as np

    rng = np.random.default_rng(0)
    n = len(env.flag_names)
    elapsed = 0.0
    for _ in range(steps):
        a = {"kind": 0, "flag": int(rng.integers(n)), "value": np.float32(rng.random())}
        env.tier.cache.clear()
        t0 = time.process_time()
        if prof:
            prof.enable()
        _, _, term, trunc, _ = env.step(a)
        if prof:
            prof.disable()
        elapsed += time.process_time() - t0
        if term or trunc or env.measurements >= env.task.max_measurements:
            env.reset(seed=0)
    return elapsed


class _Timed:
    """Wraps a callable and sums the CPU time spent in it."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.t = fn, 0.0

    def __call__(self, *a: Any, **k: Any) -> Any:
        t0 = time.process_time()
        try:
            return self.fn(*a, **k)
        finally:
            self.t += time.process_time() - t0


def profile_env(steps: int) -> None:
    import gymnasium as gym

    import rsi_env  # noqa: F401  (registers the ids)
    import rsi_env.sim as sim
    from rsi_env.sim.engine import EngineSim

    env = gym.make("RSI/Batching-v0").unwrapped
    env.reset(seed=0)
    _cold_steps(env, 3, None)
    env.reset(seed=0)
    detailed, run = _Timed(sim.simulate_detailed), _Timed(EngineSim.run)
    sim.simulate_detailed, EngineSim.run = detailed, lambda self: run(self)  # type: ignore[method-assign]
    try:
        t = _cold_steps(env, steps, None)
    finally:
        sim.simulate_detailed, EngineSim.run = detailed.fn, run.fn  # type: ignore[method-assign]
    print(f"\nRSI/Batching-v0 cold step: {t / steps * 1e3:.2f} ms CPU unprofiled ({steps} steps, "
          f"{steps / t:.1f} steps/s)")
    print(f"  in simulate_detailed {detailed.t / steps * 1e3:.2f} ms ({100 * detailed.t / t:.1f} %), "
          f"of which EngineSim.run {run.t / steps * 1e3:.2f} ms ({100 * run.t / t:.1f} %); "
          f"outside the simulator {(t - detailed.t) / steps * 1e3:.2f} ms ({100 * (t - detailed.t) / t:.1f} %)")
    env.reset(seed=0)
    prof = cProfile.Profile()
    _cold_steps(env, steps, prof)
    env.close()
    bounds = [("env.step", "rsi_env/", "step")] + SIM_BOUNDS
    report(f"RSI/Batching-v0, {steps} cold steps", prof, bounds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    profile_simulate(args.repeat)
    profile_env(args.steps)


if __name__ == "__main__":
    main()
