"""Every valid configuration on a task's ladders, measured (`rsi_env.search.exhaustive`), as a baseline's result.

Not a baseline (it spends thousands of measurements, not the budget): the yardstick that says whether
a task has a configuration 10 % better than vLLM's defaults at all, on the sim tier.
``python -m baselines.exhaustive --env RSI/Batching-v0 --seed 1000`` prints one JSON line.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from baselines.protocol import EVAL_SEED_BASE, limit_threads, print_result_line
from baselines.results import RunResult
from rsi_env.search.exhaustive import exhaustive as measure_all_valid

__all__ = ["exhaustive", "main"]


def exhaustive(env_id: str, seed: int) -> tuple[RunResult, int]:
    """Measure every configuration the env accepts; the result and the number of valid configurations."""
    ev = measure_all_valid(env_id, seed)
    return RunResult.from_evaluator("exhaustive", ev), ev.budget


def main(argv: Sequence[str] | None = None) -> None:
    limit_threads()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="RSI/Batching-v0")
    p.add_argument("--seed", type=int, default=EVAL_SEED_BASE)
    args = p.parse_args(argv)
    result, n = exhaustive(args.env, args.seed)
    print_result_line({"env": args.env, "seed": args.seed, "valid_configs": n,
                       "best_improvement_pct": result.improvement_pct, "best_measured_pct": result.best_measured_pct,
                       "config": result.config, "wall_s": result.wall_s})


if __name__ == "__main__":
    main()
