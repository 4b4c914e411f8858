"""Where a cold env step's CPU time goes outside the engine loop, per part, trees side by side (issue 30).

    python benchmarks/step_outside_loop.py [--base REV ...] [--steps 60] [--repeat 3] [--profile N] [--no-compare]

A cold step (the measurement cache cleared first) on RSI/Batching-v0 and RSI/KVCache-v0 is the env's own work
(configuration, keys, serving.yaml, store rows, observation), `rsi_env.sim.simulate_detailed` around the engine
loop (load the model, chip, workload and calibration, resolve the configuration, plan memory, generate the trace,
copy it capped, build `StepCost` and the engines, summarize the telemetry) and `EngineSim.run`, the loop. Each is
timed alone, in a fresh process per pass over the same seeded random flag actions, so that no pass inherits another's
caches (a step's cold configuration is cold in every pass):

- ``whole``: the steps as they run; CPU time of the steps, of ``simulate_detailed`` and of ``EngineSim.run``, and
  every ``simulate_detailed`` result and every ``EngineSim.run`` result recorded (pickled) in order;
- ``env``: ``simulate_detailed`` replayed from the recording, so the steps' CPU time is the env's alone;
- ``sim``: ``EngineSim.run`` replayed, so ``simulate_detailed``'s CPU time is its work outside the loop;
- ``parts``: as ``sim``, with the pieces of ``simulate_detailed`` wrapped in timers (outermost call only), for the
  breakdown; what the pieces do not cover is ``rest`` (the capped lengths, the concatenations, the profile's total).

``--profile N`` prints the N largest cumulative entries of a cProfile of the ``env`` and ``sim`` passes of this tree.
Each tree (``--base``, default the commit before the outside-the-loop work and issue 30's reference ``3c01420``,
from git worktrees under /tmp, and this tree) runs in its own subprocesses with ``PYTHONPATH`` on it and the
experience store off; the rows are CPU ms per cold step (a Batching-v0 step measures two workloads, a KVCache-v0 one
two), the last ones cold steps/s and what a step would allow with a free loop. This host is noisy: the trees run in
turn, ``--repeat`` rounds, and each row is the least of the rounds; compare columns of one run only.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import pickle
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASES = ("3c01420", "ac0c997")  # issue 30's reference simulator; main before the outside-the-loop work
ENVS = ("RSI/Batching-v0", "RSI/KVCache-v0")
PARTS = ("load model/chip/workload/calibration", "config from_dict + resolve", "plan_memory", "workload trace()",
         "Trace copy (capped / dp split)", "StepCost()", "EngineSim()", "summarize")


# ---- a pass (run inside one tree's subprocess) -----------------------------------------------------------------
def _actions(env: Any, n: int) -> list[dict[str, Any]]:
    import numpy as np

    rng = np.random.default_rng(0)
    k = len(env.flag_names)
    return [{"kind": 0, "flag": int(rng.integers(k)), "value": np.float32(rng.random())} for _ in range(n)]


class _Clock:
    """CPU seconds spent inside wrapped calls (outermost only, so nested wrapped calls are not counted twice)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.depth = 0

    def wrap(self, name: str, fn: Callable[..., Any], only_inside: list[int] | None = None) -> Callable[..., Any]:
        def timed(*a: Any, **k: Any) -> Any:
            if self.depth or (only_inside is not None and not only_inside[0]):
                return fn(*a, **k)
            self.depth += 1
            t0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + time.process_time() - t0
                self.depth -= 1
        return timed


def run_pass(env_id: str, steps: int, mode: str, tape_dir: str, profile: int = 0) -> dict[str, Any]:
    """One pass (``whole``, ``env``, ``sim`` or ``parts``) of ``steps`` cold steps; CPU seconds by what was timed."""
    import gymnasium as gym

    import rsi_env  # noqa: F401  (registers the ids)
    import rsi_env.sim as sim
    from rsi_env.engine.config import EngineConfig
    from rsi_env.engine.workload import Workload
    from rsi_env.sim.engine import EngineSim

    tape = Path(tape_dir) / env_id.replace("/", "_")
    env: Any = gym.make(env_id).unwrapped
    actions = _actions(env, steps)
    real_sd, real_run = sim.simulate_detailed, EngineSim.run
    sd_tape: list[Any] = []
    run_tape: list[Any] = []
    if mode != "whole":
        sd_tape, run_tape = pickle.loads(tape.read_bytes())
    pos = [0, 0]
    inside = [0]
    out: dict[str, float] = {"sd": 0.0, "run": 0.0}

    def sd_timed(*a: Any, **k: Any) -> Any:
        inside[0] += 1
        t0 = time.process_time()
        try:
            res = real_sd(*a, **k)
        finally:
            out["sd"] += time.process_time() - t0
            inside[0] -= 1
        if mode == "whole":
            sd_tape.append(res)
        return res

    def sd_replayed(*a: Any, **k: Any) -> Any:
        pos[0] += 1
        return sd_tape[pos[0] - 1]

    def run_timed(self: Any) -> Any:
        t0 = time.process_time()
        res = real_run(self)
        out["run"] += time.process_time() - t0
        run_tape.append(res)
        return res

    def run_replayed(self: Any) -> Any:
        pos[1] += 1
        return run_tape[pos[1] - 1]

    clock = _Clock()
    if mode == "parts":  # the pieces of simulate_detailed, as it names them (whichever a tree has)
        for attr, part in (("load_model", PARTS[0]), ("load_hardware", PARTS[0]), ("load_workload", PARTS[0]),
                           ("load_calibration", PARTS[0]), ("plan_memory", PARTS[2]), ("Trace", PARTS[4]),
                           ("StepCost", PARTS[5]), ("summarize", PARTS[7])):
            if hasattr(sim, attr):
                setattr(sim, attr, clock.wrap(part, getattr(sim, attr), inside))
        for cls, attr, part in ((EngineConfig, "from_dict", PARTS[1]), (EngineConfig, "resolve", PARTS[1]),
                                (Workload, "trace", PARTS[3]), (EngineSim, "__init__", PARTS[6])):
            fn = cls.__dict__[attr]
            if isinstance(fn, classmethod):
                setattr(cls, attr, classmethod(clock.wrap(part, fn.__func__, inside)))
            else:
                setattr(cls, attr, clock.wrap(part, fn, inside))
    sim.simulate_detailed = sd_replayed if mode == "env" else sd_timed
    EngineSim.run = run_timed if mode == "whole" else run_replayed  # type: ignore[method-assign]
    prof = cProfile.Profile() if profile else None
    spent = 0.0
    try:
        env.reset(seed=0)
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
        env.close()
    finally:  # the pass runs in a process of its own; put back what it wrapped all the same
        sim.simulate_detailed, EngineSim.run = real_sd, real_run  # type: ignore[method-assign]
    if mode == "whole":
        tape.write_bytes(pickle.dumps((sd_tape, run_tape)))
    if prof is not None:
        print(f"---- cProfile of the {mode} pass, {env_id} ----", file=sys.stderr)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(profile)
    return {"step": spent, **out, **clock.spent, "simulations": len(sd_tape)}


# ---- the driver ------------------------------------------------------------------------------------------------
def base_tree(rev: str) -> Path:
    """A worktree of ``rev`` (made once), importable with ``PYTHONPATH``."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], capture_output=True, text=True,
                         check=True).stdout.strip()
    path = Path(f"/tmp/rsi-sim-base-{sha[:12]}")
    if not (path / "rsi_env").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), sha], check=True,
                       capture_output=True)
    return path


def run_in(tree: Path, call: str, show_stderr: bool = False) -> Any:
    """``call`` (a pass, as Python) in a subprocess importing the package from ``tree``; its JSON result."""
    env = {**os.environ, "PYTHONPATH": str(tree), "RSI_ENV_STORE": "off", "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import step_outside_loop as s; "
            f"print('RESULT ' + json.dumps(s.{call}))")
    res = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                         timeout=3600)
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{call} in {tree} failed:\n{res.stderr[-3000:]}")
    if show_stderr:
        print(res.stderr, end="")
    return json.loads(line[len("RESULT "):])


def measure(tree: Path, env_id: str, steps: int, profile: int) -> dict[str, float]:
    """CPU ms per cold step of ``env_id`` in ``tree``, by part."""
    with tempfile.TemporaryDirectory() as tmp:
        whole = run_in(tree, f"run_pass({env_id!r}, {steps}, 'whole', {tmp!r})")
        own = run_in(tree, f"run_pass({env_id!r}, {steps}, 'env', {tmp!r}, {profile})", bool(profile))
        outside = run_in(tree, f"run_pass({env_id!r}, {steps}, 'sim', {tmp!r}, {profile})", bool(profile))
        parts = run_in(tree, f"run_pass({env_id!r}, {steps}, 'parts', {tmp!r})")
    ms = 1e3 / steps
    row = {"cold step": whole["step"] * ms, "env outside simulate_detailed": own["step"] * ms,
           "simulate_detailed outside run": outside["sd"] * ms}
    covered = 0.0
    for p in PARTS:
        row[f"  {p}"] = parts.get(p, 0.0) * ms
        covered += parts.get(p, 0.0)
    row["  rest"] = max(parts["sd"] - covered, 0.0) * ms
    row["EngineSim.run"] = whole["run"] * ms
    row["not the loop (env + sim outside run)"] = row["env outside simulate_detailed"] + row[
        "simulate_detailed outside run"]
    row["cold steps/s"] = 1e3 / row["cold step"]
    row["cold steps/s with a free loop"] = 1e3 / row["not the loop (env + sim outside run)"]
    row["simulations per step"] = whole["simulations"] / steps
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", action="append", help=f"a tree to compare (repeatable; default {' '.join(BASES)})")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=3, help="rounds over the trees; each row the least of them")
    ap.add_argument("--profile", type=int, default=0, help="cProfile entries of this tree's env and sim passes")
    ap.add_argument("--no-compare", action="store_true", help="this tree only")
    args = ap.parse_args()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    trees = {} if args.no_compare else {rev: base_tree(rev) for rev in (args.base or BASES)}
    trees[f"this ({head}+)"] = ROOT
    names = list(trees)
    print(f"CPU ms per cold step (steps/s where named), the least of {args.repeat} rounds, row by row; ratios: each "
          "tree over this one (higher: this one cheaper)")
    for env_id in ENVS:
        rows: dict[str, dict[str, float]] = {}
        for rep in range(args.repeat):  # the trees in turn, each round; the least of the rounds, row by row
            for n, t in trees.items():
                got = measure(t, env_id, args.steps, args.profile if t == ROOT and rep == 0 else 0)
                rows[n] = got if n not in rows else {k: min(v, got[k]) for k, v in rows[n].items()}
        for r in rows.values():  # the rates from the least times
            r["cold steps/s"] = 1e3 / r["cold step"]
            r["cold steps/s with a free loop"] = 1e3 / r["not the loop (env + sim outside run)"]
        print(f"\n{env_id}, {args.steps} cold steps, "
              f"{rows[names[-1]]['simulations per step']:.2f} simulations a step")
        print(f"{'':40s}" + "".join(f"{n:>16s}" for n in names)
              + "".join(f"{n[:10] + '/this':>16s}" for n in names[:-1]))
        for key in rows[names[-1]]:
            if key == "simulations per step":
                continue
            vals = [rows[n][key] for n in names]
            rate = key.startswith("cold steps/s")
            ratios = [(vals[-1] / v if rate else v / vals[-1]) if v and vals[-1] else float("nan") for v in vals[:-1]]
            print(f"{key:40s}" + "".join(f"{v:16.3f}" for v in vals)
                  + "".join(f"{r:15.2f}x" if math.isfinite(r) else f"{'-':>16s}" for r in ratios))


if __name__ == "__main__":
    main()
