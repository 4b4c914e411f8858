"""Train PPO with RLlib (new API stack, action-masking RLModule) on an `RSI/*` task.

``python -m baselines.rllib_ppo --env RSI/Batching-v0 --iterations 20 [--num-env-runners K] [--address ADDR]``
joins the Ray cluster at ``ADDR`` (default: starts a local one), trains PPO on the protocol's view
(`DiscreteFlagMoves`, `FlatObservation` in RLlib's ``{"observations", "action_mask"}`` layout,
`ImprovementReward`, workload seeds from the training set) with RLlib's
``ActionMaskingTorchRLModule``, saves a checkpoint to ``--out``, optionally evaluates the greedy
policy on held-out seeds, and prints as its last line one JSON object: ``episode_return_mean``,
``iterations``, ``env_steps``, ``wall_s``, ``checkpoint`` (and ``eval_*`` when evaluated).

Env runners in other processes build the env through ``rsi_env.wrappers.views.env_creator``,
registered by name, so any process with rsi-env installed finds it. ``OMP_NUM_THREADS`` is 1 unless
set. Batches are small by default (256 steps per iteration) so that a couple of iterations run in
well under a minute on two cores; pass larger ones for real training.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from baselines.episodes import run_agent
from baselines.protocol import RL_VIEW, eval_seeds, limit_threads, print_result_line, train_seeds
from baselines.results import RunResult
from rsi_env.engine.task import load_task

__all__ = ["ENV_NAME", "build_config", "evaluate_rllib", "main", "train_rllib"]

ENV_NAME = "rsi-view"


def build_config(env_id: str, *, budget: int | None = None, n_train: int = 64, num_env_runners: int = 1,
                 train_batch: int = 256, minibatch: int = 64, epochs: int = 4, lr: float = 3e-4,
                 gamma: float = 0.95, seed: int = 0) -> Any:
    """The ``PPOConfig``: masking RLModule, small batches, the view registered as :data:`ENV_NAME`."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule
    from ray.tune.registry import register_env

    from rsi_env.wrappers.views import env_creator

    register_env(ENV_NAME, env_creator)
    env_config: dict[str, Any] = {"env_id": env_id, **RL_VIEW, "actions": "moves", "observation": "masked",
                                  "train_seeds": train_seeds(n_train)}
    if budget is not None:
        env_config["max_measurements"] = budget
    return (
        PPOConfig()
        .environment(ENV_NAME, env_config=env_config)
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=1, rollout_fragment_length="auto",
                     num_cpus_per_env_runner=1)
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=train_batch, minibatch_size=minibatch, num_epochs=epochs, lr=lr,
                  gamma=gamma, entropy_coeff=0.01)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=ActionMaskingTorchRLModule,
                                               model_config={"head_fcnet_hiddens": [64, 64]}))
        .debugging(seed=seed)
    )


def train_rllib(config: Any, iterations: int, out: Path) -> tuple[Any, dict[str, Any]]:
    """Build the algorithm, train ``iterations`` times, save a checkpoint to ``out``; return it and its stats."""
    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN, NUM_ENV_STEPS_SAMPLED_LIFETIME

    t0 = time.perf_counter()
    algo = config.build_algo()
    result: dict[str, Any] = {}
    for _ in range(iterations):
        result = algo.train()
    runners = result.get(ENV_RUNNER_RESULTS, {})
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = algo.save_to_path(str(out.resolve()))
    stats = {"episode_return_mean": float(runners.get(EPISODE_RETURN_MEAN, float("nan"))),
             "iterations": iterations, "env_steps": int(runners.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)),
             "wall_s": time.perf_counter() - t0, "checkpoint": str(checkpoint)}
    return algo, stats


def evaluate_rllib(module: Any, env_id: str, seeds: Sequence[int], budget: int, baseline: str = "ppo_rllib",
                   **env_kwargs: Any) -> list[RunResult]:
    """The greedy masked policy of an RLlib ``RLModule``, one episode per held-out seed."""
    import torch
    from ray.rllib.core.columns import Columns

    def act(obs: Any, env: Any) -> int:
        batch = {Columns.OBS: {k: torch.as_tensor(np.asarray(v)[None]) for k, v in obs.items()}}
        with torch.no_grad():
            logits = module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
        return int(torch.argmax(logits[0]).item())

    view = {**RL_VIEW, "actions": "moves", "observation": "masked"}
    return [run_agent(baseline, env_id, s, budget, act, view, **env_kwargs) for s in seeds]


def main(argv: Sequence[str] | None = None) -> None:
    limit_threads()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="RSI/Batching-v0")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--num-env-runners", type=int, default=1)
    p.add_argument("--address", default=None, help="a Ray cluster to join (default: start a local one)")
    p.add_argument("--budget", type=int, default=None, help="measurements per episode (default: the task's)")
    p.add_argument("--train-batch", type=int, default=256)
    p.add_argument("--minibatch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--train-seeds", type=int, default=64)
    p.add_argument("--eval-seeds", type=int, default=0, help="evaluate on N held-out seeds after training")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/rllib_ppo"))
    args = p.parse_args(argv)
    import ray

    ray.init(address=args.address, include_dashboard=False, log_to_driver=False,
             **({} if args.address else {"num_cpus": max(2, args.num_env_runners + 1)}))
    try:
        config = build_config(args.env, budget=args.budget, n_train=args.train_seeds,
                              num_env_runners=args.num_env_runners, train_batch=args.train_batch,
                              minibatch=args.minibatch, epochs=args.epochs, seed=args.seed)
        algo, stats = train_rllib(config, args.iterations, args.out)
        line: dict[str, Any] = {"env": args.env, **stats}
        if args.eval_seeds:
            budget = args.budget or load_task(args.env).max_measurements
            results = evaluate_rllib(algo.get_module(), args.env, eval_seeds(args.eval_seeds), budget)
            line["eval_improvement_pct_mean"] = float(np.mean([r.improvement_pct for r in results]))
            line["eval"] = [{"seed": r.seed, "improvement_pct": r.improvement_pct, "measurements": r.measurements}
                            for r in results]
        algo.stop()
    finally:
        ray.shutdown()
    print_result_line(line)


if __name__ == "__main__":
    main()
