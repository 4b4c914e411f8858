"""The simulator before and after issue 30, side by side in one run: the golden set, cold env steps, PPO iterations.

The old simulator is the package at ``--base`` (default: the last commit before the rewrite), checked out as a git
worktree (``/tmp/rsi-sim-base-<sha>``, made once); each side runs in its own subprocess with ``PYTHONPATH`` on its
tree, one after the other, on one core (``--cpu``). Prints, old | new | ratio:

- every golden case (``tests/golden``: every model x frozen workload x three configurations, and the Poisson, burst,
  closed-loop and shared-prefix traces under five): ``simulate`` as ``rsi-env simulate`` calls it (CPU seconds, the
  fastest of ``--repeat`` runs each), summed per workload; then whether the two sides' ``--json`` outputs are
  identical case by case;
- the 1,000-request Poisson trace near saturation (llama-3.1-8b, vLLM's defaults), alone;
- cold env steps per second (`benchmarks/bench_envs.py`'s ``rate``: the measurement cache cleared before each step,
  the experience store off) on RSI/Batching-v0 and RSI/KVCache-v0;
- PPO's seconds per iteration (`baselines/rllib_ppo.py`'s config, 256 env steps an iteration) with 1 and 2 RLlib env
  runners, after one warm-up iteration (``--ppo-iterations``; ``--no-ppo`` skips it).

Run: ``python benchmarks/sim_speed.py [--base SHA] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASE = "3c01420"  # main before the rewrite: the simulator as the golden set was recorded from
POISSON = "llama-3.1-8b/poisson_1000/defaults"


# ---- workers (run inside one tree's subprocess) --------------------------------------------------------------
def _golden_cases(quick: bool) -> dict[str, tuple[str, str, list[str]]]:
    from rsi_env.engine.model import list_models
    from rsi_env.engine.workload import list_workloads
    from tests.golden import outputs

    models = ["llama-3.1-8b", "mistral-7b", "qwen3-30b-a3b"] if quick else list_models()
    cases = {f"{m}/{w}/{c}": (m, w, f) for m in models for w in list_workloads() for c, f in outputs.CONFIGS.items()}
    for path in sorted(outputs.TRACES.glob("*.yaml")):
        ms = outputs.LARGE_TRACE_MODELS if path.stem.endswith("_10000") else models
        if quick and path.stem.endswith("_10000"):
            continue
        for m in ms:
            for c, f in outputs.TRACE_CONFIGS.items():
                cases[f"{m}/{path.stem}/{c}"] = (m, str(path), f)
    return cases


def worker_golden(quick: bool, repeat: int) -> dict[str, Any]:
    """Seconds per golden case (``simulate`` as the CLI calls it, fastest of ``repeat``) and its ``--json`` output."""
    from rsi_env.cli import _parse_sets
    from rsi_env.sim import simulate
    from tests.golden import outputs

    times, outs = {}, {}
    for key, (m, w, flags) in _golden_cases(quick).items():
        best = float("inf")
        for _ in range(repeat):
            t0 = time.process_time()
            simulate(_parse_sets(flags), m, "h200", w)
            best = min(best, time.process_time() - t0)
        times[key], outs[key] = best, outputs._simulate_cli(m, w, flags)
    return {"times": times, "outputs": outs}


def worker_env(steps: int) -> dict[str, Any]:
    sys.path.insert(0, str(Path.cwd() / "benchmarks"))
    from bench_envs import rate  # type: ignore[import-not-found]

    return {env: rate(env, steps, True) for env in ("RSI/Batching-v0", "RSI/KVCache-v0")}


def worker_ppo(runners: int, iterations: int) -> dict[str, Any]:
    import ray

    from baselines.rllib_ppo import build_config

    ray.init(include_dashboard=False, log_to_driver=False, num_cpus=max(2, runners + 1))
    try:
        algo = build_config("RSI/Batching-v0", num_env_runners=runners).build_algo()
        algo.train()  # warm-up: env runners started, first episodes reset
        t0 = time.perf_counter()
        for _ in range(iterations):
            algo.train()
        per_iter = (time.perf_counter() - t0) / iterations
        algo.stop()
    finally:
        ray.shutdown()
    return {"s_per_iter": per_iter}


# ---- the driver ------------------------------------------------------------------------------------------------
def base_tree(rev: str) -> Path:
    """A worktree of ``rev`` (made once): the old simulator's package, importable with ``PYTHONPATH``."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], capture_output=True, text=True,
                         check=True).stdout.strip()
    path = Path(f"/tmp/rsi-sim-base-{sha[:12]}")
    if not (path / "rsi_env").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), sha], check=True,
                       capture_output=True)
    return path


def run_in(tree: Path, call: str, cpu: int | None, timeout: int = 3600) -> Any:
    """``call`` (a worker call, as Python) in a subprocess importing the package from ``tree``; its JSON result."""
    env = {**os.environ, "PYTHONPATH": str(tree), "RSI_ENV_STORE": "off", "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import sim_speed as s; "
            f"print('RESULT ' + json.dumps(s.{call}))")
    cmd = [sys.executable, "-c", code]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    res = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{call} in {tree} failed:\n{res.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def row(name: str, old: float, new: float, unit: str, higher_is_better: bool = False) -> str:
    ratio = old / new if not higher_is_better else new / old
    return f"{name:34s} {old:12.4g} {new:12.4g} {unit:>7s} {ratio:8.2f}x"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default=BASE, help="the commit whose simulator is the baseline")
    p.add_argument("--quick", action="store_true", help="three models, no 10,000-request traces")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--env-steps", type=int, default=100)
    p.add_argument("--ppo-iterations", type=int, default=3)
    p.add_argument("--no-ppo", action="store_true")
    p.add_argument("--cpu", type=int, default=None, help="pin each worker to this CPU (taskset)")
    args = p.parse_args()
    trees = {"old": base_tree(args.base), "new": ROOT}
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    print(f"old: {args.base} ({trees['old']})   new: {head} ({ROOT})")
    print(f"{'':34s} {'old':>12s} {'new':>12s} {'':>7s} {'old/new':>9s}")

    gold = {k: run_in(t, f"worker_golden({args.quick}, {args.repeat})", args.cpu) for k, t in trees.items()}
    by_wl: dict[str, list[float]] = {}
    for key, t_old in gold["old"]["times"].items():
        wl = key.split("/")[1]
        acc = by_wl.setdefault(wl, [0.0, 0.0])
        acc[0] += t_old
        acc[1] += gold["new"]["times"][key]
    for wl, (o, n) in sorted(by_wl.items()):
        print(row(f"golden {wl}", o * 1e3, n * 1e3, "ms"))
    tot_o, tot_n = (sum(v[i] for v in by_wl.values()) for i in (0, 1))
    print(row(f"golden, all {len(gold['old']['times'])} cases", tot_o, tot_n, "s"))
    same = sum(gold["old"]["outputs"][k] == gold["new"]["outputs"].get(k) for k in gold["old"]["outputs"])
    print(f"golden outputs identical: {same} of {len(gold['old']['outputs'])}")
    if POISSON in gold["old"]["times"]:
        print(row("poisson_1000 (llama-3.1-8b)", gold["old"]["times"][POISSON] * 1e3,
                  gold["new"]["times"][POISSON] * 1e3, "ms"))

    envs = {k: run_in(t, f"worker_env({args.env_steps})", args.cpu) for k, t in trees.items()}
    for env in envs["old"]:
        print(row(f"cold steps/s {env}", envs["old"][env], envs["new"][env], "1/s", higher_is_better=True))

    if not args.no_ppo:
        for runners in (1, 2):
            ppo = {k: run_in(t, f"worker_ppo({runners}, {args.ppo_iterations})", None) for k, t in trees.items()}
            print(row(f"PPO s/iteration, {runners} env runner(s)", ppo["old"]["s_per_iter"], ppo["new"]["s_per_iter"],
                      "s"))


if __name__ == "__main__":
    main()
