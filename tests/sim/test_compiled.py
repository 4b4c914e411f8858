"""The compiled engine loop (`rsi_env.sim.vllm`): numba loads only when a simulation runs, and the same code run as
plain Python (no numba) gives the same results, to the last bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

# A small run through every part of the loop: preemptions (a small pool), shared prefixes, the priority policy,
# chunked prompts, the step trace and the invariant checks.
RUN = """
import json, sys
import numpy as np
from rsi_env.engine import EngineConfig, load_hardware, load_model
from rsi_env.engine.workload import Trace
from rsi_env.sim.calibration import load_calibration
from rsi_env.sim.cost import StepCost
from rsi_env.sim.engine import EngineSim
m, hw = load_model("llama-3.1-8b"), load_hardware("h200")
out = {}
for policy in ("fcfs", "priority"):
    cfg = EngineConfig(max_num_seqs=16, max_num_batched_tokens=512, scheduling_policy=policy).resolve(m, hw, "0.26")
    cost = StepCost(m, hw, cfg, load_calibration("h200", "0.26"))
    rng = np.random.default_rng(3)
    n = 60
    trace = Trace(np.sort(rng.uniform(0, 2, n)), rng.integers(40, 700, n), rng.integers(1, 90, n),
                  rng.integers(-1, 3, n), np.full(n, 256), 0, 0)
    r = EngineSim(cfg, cost, trace, 120, check_invariants=True).run()
    out[policy] = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in vars(r).items()
                   if k not in ("steps", "profile")}
    out[policy]["steps"] = {k: v.tolist() for k, v in r.steps.items()}
    out[policy]["profile"] = [float(x) for x in vars(r.profile).values()]
json.dump(out, sys.stdout)
"""


def _run(code: str, **env: str) -> str:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-c", code], env=e, cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def test_import_rsi_env_does_not_load_numba() -> None:
    out = _run("import sys, rsi_env, rsi_env.sim, rsi_env.sim.engine, rsi_env.envs; print('numba' in sys.modules)")
    assert out.split() == ["False"]


def test_cache_entries_are_stamped_by_all_the_loop_sources() -> None:
    """numba stamps a cached function by its own file; the loop's functions call each other across files, so each is
    stamped by a hash of all of them (`rsi_env.sim.vllm.jit._install_locators`)."""
    out = _run("from rsi_env.sim.vllm import jit, loop, block_pool\n"
               "for f in (loop.engine_loop, block_pool.take):\n"
               "    loc = f._cache._impl.locator\n"
               "    print(getattr(type(loc), '_rsi_env', False), loc.get_source_stamp() == jit._sources_stamp())")
    assert out.split() == ["True", "True", "True", "True"]


def test_plain_python_gives_the_compiled_results() -> None:
    compiled = json.loads(_run(RUN))
    plain = json.loads(_run(RUN, RSI_ENV_NO_NUMBA="1"))
    assert compiled["fcfs"]["num_preemptions"] > 0 and compiled["priority"]["num_preemptions"] > 0
    assert compiled["fcfs"]["prefix_hits"] > 0
    assert compiled == plain  # floats through JSON: repr, exact
    assert np.isfinite(compiled["fcfs"]["finish"]).all()
