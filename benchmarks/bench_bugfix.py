"""RSI/BugFix-v0 costs: the generator's yield per seed range, and the wall time of a reset, a bench and the hidden checks.

Prints the precomputed table's counts (kept, rejected draws, bugs per class, difficulty levels), then
times, on this machine's sandbox backend: a reset whose instance is precomputed, a reset that must
generate and verify its instance, one bench of the workspace and one uncached run of the hidden checks.
Run: ``python benchmarks/bench_bugfix.py``.
"""

from __future__ import annotations

import argparse
import json

import gymnasium as gym
import yaml
from timing import print_rows, timed  # benchmarks/timing.py, beside this script

import rsi_env  # noqa: F401
from rsi_env.tasks.bugfix import checks
from rsi_env.tasks.bugfix.generator import INSTANCES_FILE


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sandbox", default="auto")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    print("precomputed instances:", json.dumps(yaml.safe_load(INSTANCES_FILE.read_text())["stats"]))
    env = gym.make("RSI/BugFix-v0", sandbox=args.sandbox).unwrapped
    rows = {"reset, precomputed instance": [], "reset, instance generated live": [], "bench (2 workloads)": [],
            "hidden checks (uncached)": []}
    for k in range(args.repeats):
        rows["reset, precomputed instance"].append(timed(env.reset, seed=k))
        env.tier.cache.clear()
        rows["bench (2 workloads)"].append(timed(env.step, {"kind": 3}))
        files = env.engine_files()
        checks._VERDICTS.clear()
        rows["hidden checks (uncached)"].append(timed(checks.check_workspace, files, env.sandbox_backend))
        rows["reset, instance generated live"].append(timed(env.reset, seed=1_000_000 + k))
    env.close()
    print(f"sandbox: {env.sandbox_backend}")
    print_rows(rows, 34, 2)


if __name__ == "__main__":
    main()
