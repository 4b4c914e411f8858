"""Run every baseline on flag tasks at the same budget of measurements; write tables and learning curves.

``python -m baselines.run_all --env RSI/Batching-v0 --budget 30 --seeds 3 --out results/`` runs, on
held-out seeds: random search, vLLM's auto-tune procedure, coordinate descent, Optuna TPE, PPO
(sb3-contrib's ``MaskablePPO`` on `DirectSetting`, trained first on the training seeds, played
greedily and sampled) and, given ``--llm-base-url``
and ``--llm-model``, the LLM agent. ``--env all`` runs every flag task. Per task it writes
``OUT/<task>/results.{md,json}`` and ``curves.png``; ``OUT/summary.md`` gathers the tables.
``--workers K`` measures the searches' batches as Ray tasks on ``K`` local CPUs, or on the cluster
at ``--address``. ``--config FILE.yaml`` sets any option (keys as the options, ``-`` as ``_``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from baselines.protocol import eval_seeds, limit_threads
from baselines.report import write_report
from baselines.results import RunResult
from rsi_env.engine.task import list_tasks
from rsi_env.search import SEARCHES
from rsi_env.search.evaluator import Evaluator, Measurer, local_measurer
from rsi_env.store import recording

__all__ = ["FLAG_TASKS", "SEARCHES", "main", "run_searches", "run_task"]

FLAG_TASKS = ("RSI/KVCache-v0", "RSI/Batching-v0", "RSI/PrefixCache-v0", "RSI/Quantization-v0",
              "RSI/Parallelism-v0")


def run_searches(env_id: str, names: Sequence[str], seeds: Sequence[int], budget: int,
                 measurer: Measurer = local_measurer, batch_size: int = 1) -> list[RunResult]:
    """Each named search on each seed."""
    results = []
    for seed in seeds:
        for name in names:
            with recording(source=f"search:{name}"):  # who asked, in the experience store
                ev = Evaluator(env_id, seed, budget, measurer=measurer)
                SEARCHES[name](ev, np.random.default_rng(seed), batch_size)
            results.append(RunResult.from_evaluator(name, ev))
            ev.close()
    return results


def _auto_tune_note(env_id: str) -> str:
    flags = next(t.flags for t in list_tasks() if t.id == env_id)
    grid = [f for f in ("max_num_seqs", "max_num_batched_tokens") if f in flags]
    step1 = "probes gpu_memory_utilization from 0.98 down" if "gpu_memory_utilization" in flags else \
        "skips the memory probe (the task does not expose gpu_memory_utilization)"
    step2 = (f"then a grid over {' x '.join(grid)} (the task's ladders, thinned to the budget)" if grid else
             "and stops: the task exposes neither max_num_seqs nor max_num_batched_tokens")
    return f"{step1}, {step2}; other flags stay at the task's start."


def run_task(env_id: str, args: argparse.Namespace, measurer: Measurer) -> tuple[list[RunResult], str]:
    """Every requested baseline on one task; writes its report and returns the results and its markdown."""
    seeds = eval_seeds(args.seeds)
    searches = [b for b in args.baselines if b in SEARCHES]
    results = run_searches(env_id, searches, seeds, args.budget, measurer, args.workers)
    notes: dict[str, str] = {}
    if "vllm_auto_tune" in searches:
        notes["vllm_auto_tune"] = _auto_tune_note(env_id)
    meta: dict[str, Any] = {"seeds": seeds, "tier": "sim"}
    if "ppo" in args.baselines:
        from baselines.sb3_ppo import evaluate_sb3, train_sb3

        model, stats = train_sb3(env_id, args.ppo_timesteps, args.out / _slug(env_id) / "ppo", budget=args.budget,
                                 n_train=args.train_seeds, seed=0, actions="direct")
        results += evaluate_sb3(model, env_id, seeds, args.budget, baseline="ppo_greedy")
        results += evaluate_sb3(model, env_id, seeds, args.budget, baseline="ppo_sampled", deterministic=False)
        meta["ppo_training"] = stats
        notes["ppo_greedy / ppo_sampled"] = (
            f"sb3-contrib MaskablePPO on DirectSetting (a whole configuration per step) with ImprovementReward, "
            f"{stats['timesteps']} env steps on training seeds 0-{args.train_seeds - 1} ({stats['wall_s']:.0f} s of "
            "training, not in the wall column); on the held-out seeds the policy is played greedily, and sampled "
            "(seeded per episode).")
    if "llm_agent" in args.baselines:
        if args.llm_base_url and args.llm_model:
            from baselines.llm_agent import ChatEndpoint, run_llm

            endpoint = ChatEndpoint(args.llm_base_url, args.llm_model, args.llm_api_key)
            results += run_llm(endpoint, env_id, seeds, args.budget)
        else:
            notes["llm_agent"] = "not run: no --llm-base-url/--llm-model given."
    paths = write_report(env_id, results, args.budget, args.out / _slug(env_id), notes, meta)
    return results, paths["markdown"].read_text()


def _slug(env_id: str) -> str:
    return env_id.replace("RSI/", "").replace("/", "_")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=None, help="YAML file of option values")
    p.add_argument("--env", action="append", default=None, help="a task id, repeatable, or 'all' (default: all)")
    p.add_argument("--budget", type=int, default=30, help="measurements per run, the same for every baseline")
    p.add_argument("--seeds", type=int, default=3, help="held-out seeds per task")
    p.add_argument("--out", type=Path, default=Path("results"))
    p.add_argument("--baselines", default=",".join([*SEARCHES, "ppo", "llm_agent"]),
                   help="comma-separated subset of: " + ", ".join([*SEARCHES, "ppo", "llm_agent"]))
    p.add_argument("--ppo-timesteps", type=int, default=8000)
    p.add_argument("--train-seeds", type=int, default=64)
    p.add_argument("--workers", type=int, default=1, help="measure searches' batches on K Ray workers (1: in-process)")
    p.add_argument("--address", default=None, help="a Ray cluster to join (implies Ray)")
    p.add_argument("--llm-base-url", default=None)
    p.add_argument("--llm-model", default=None)
    p.add_argument("--llm-api-key", default=None)
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = _parser()
    pre, _ = p.parse_known_args(argv)
    if pre.config is not None:
        raw = yaml.safe_load(pre.config.read_text()) or {}
        p.set_defaults(**{k.replace("-", "_"): v for k, v in raw.items()})
    args = p.parse_args(argv)
    args.out = Path(args.out)
    envs = args.env if args.env else ["all"]
    args.env = list(FLAG_TASKS) if "all" in envs else list(dict.fromkeys(envs))
    names = args.baselines if isinstance(args.baselines, list) else str(args.baselines).split(",")
    args.baselines = [b.strip() for b in names if b.strip()]
    unknown = sorted(set(args.baselines) - {*SEARCHES, "ppo", "llm_agent"})
    if unknown:
        p.error(f"unknown baselines {unknown}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    limit_threads()
    args = parse_args(argv)
    measurer: Measurer = local_measurer
    if args.workers > 1 or args.address:
        from baselines.distributed import connect, ray_measurer

        connect(args.address, num_cpus=None if args.address else args.workers)
        measurer = ray_measurer
    t0 = time.perf_counter()
    tables = []
    for env_id in args.env:
        _, text = run_task(env_id, args, measurer)
        tables.append(text)
        print(text, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    head = (f"# Baselines on the sim tier: {args.budget} measurements per run, {args.seeds} held-out seeds "
            f"(reset seeds {eval_seeds(args.seeds)[0]}+), {time.perf_counter() - t0:.0f} s\n")
    (args.out / "summary.md").write_text(head + "\n" + "\n".join(tables))
    print(f"wrote {args.out.resolve() / 'summary.md'}", flush=True)


if __name__ == "__main__":
    main()
