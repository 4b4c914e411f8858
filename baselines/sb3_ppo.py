"""Train PPO with Stable-Baselines3 (sb3-contrib's ``MaskablePPO``) on an `RSI/*` task; evaluate on held-out seeds.

``python -m baselines.sb3_ppo --env RSI/Batching-v0 --timesteps 8000 --out runs/sb3`` trains on
`DirectSetting` (``--actions direct``, the default: a whole configuration per step, one
measurement each) or `DiscreteFlagMoves` (``--actions moves``: one notch per step), with invalid
actions masked, `FlatObservation` as a ``Box`` and `ImprovementReward`, on workload seeds drawn
from the training set; saves ``OUT/model.zip``; plays the policy once per held-out seed, greedily
and sampled (a policy over whole configurations, sampled, is a learned search distribution); and
prints as its last line one JSON object: ``episode_return_mean`` (the last training episodes),
``timesteps``, ``wall_s``, ``checkpoint`` and the held-out evaluation (``eval_improvement_pct_mean``
greedy, ``eval_sampled_improvement_pct_mean``, per seed).
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

__all__ = ["SB3Settings", "evaluate_sb3", "main", "train_sb3"]

SB3Settings = dict[str, Any]
DEFAULTS: SB3Settings = {"n_steps": 256, "batch_size": 64, "n_epochs": 4, "learning_rate": 3e-4, "gamma": 0.95,
                         "ent_coef": 0.01, "net_arch": [64, 64]}


def _make_env(env_id: str, budget: int | None, n_train: int, actions: str) -> Any:
    from stable_baselines3.common.monitor import Monitor

    from rsi_env.wrappers.views import make_view

    kwargs: dict[str, Any] = {} if budget is None else {"max_measurements": budget}
    view = {**RL_VIEW, "actions": actions, "observation": "box"}
    return Monitor(make_view(env_id, train_seeds=train_seeds(n_train), **view, **kwargs))


def train_sb3(env_id: str, timesteps: int, out: Path, *, budget: int | None = None, n_train: int = 64,
              seed: int = 0, settings: SB3Settings | None = None, actions: str = "direct") -> tuple[Any, dict[str, Any]]:
    """Train ``MaskablePPO`` for ``timesteps`` env steps; save to ``out/model.zip``; return the model and stats."""
    import torch
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    s = {**DEFAULTS, **(settings or {})}
    env = _make_env(env_id, budget, n_train, actions)
    env.reset(seed=seed)
    t0 = time.perf_counter()
    model = MaskablePPO("MlpPolicy", env, n_steps=s["n_steps"], batch_size=s["batch_size"], n_epochs=s["n_epochs"],
                        learning_rate=s["learning_rate"], gamma=s["gamma"], ent_coef=s["ent_coef"],
                        policy_kwargs={"net_arch": list(s["net_arch"])}, seed=seed, device="cpu", verbose=0)
    model.learn(total_timesteps=timesteps)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.zip"
    model.save(path)
    returns = [float(e["r"]) for e in model.ep_info_buffer or ()]
    stats = {"episode_return_mean": float(np.mean(returns)) if returns else float("nan"),
             "episodes": len(returns), "timesteps": int(model.num_timesteps),
             "wall_s": time.perf_counter() - t0, "checkpoint": str(path.resolve())}
    env.close()
    return model, stats


def evaluate_sb3(model: Any, env_id: str, seeds: Sequence[int], budget: int, baseline: str = "ppo_sb3",
                 actions: str = "direct", deterministic: bool = True, warm_start: bool = False,
                 **env_kwargs: Any) -> list[RunResult]:
    """The masked policy, greedy or sampled, one episode per held-out seed, ``budget`` measurements each.

    Sampling draws from torch's generator, seeded with the episode's seed, so a sampled run repeats.
    ``warm_start`` (``actions="direct"`` only): the first actions are the experience store's proposals
    for the episode's context (`baselines.warm_start.warm_agent`), then the policy's.
    """
    import torch

    def act(obs: Any, env: Any) -> Any:
        action, _ = model.predict(obs, deterministic=deterministic,
                                  action_masks=env.get_wrapper_attr("action_masks")())
        return action

    view = {**RL_VIEW, "actions": actions, "observation": "box"}
    results = []
    for s in seeds:
        torch.manual_seed(s)
        agent = act
        if warm_start:
            from baselines.warm_start import warm_agent

            if actions != "direct":
                raise ValueError("warm_start needs actions='direct' (a proposal is a whole configuration)")
            agent = warm_agent(act)
        results.append(run_agent(baseline, env_id, s, budget, agent, view, **env_kwargs))
    return results


def main(argv: Sequence[str] | None = None) -> None:
    limit_threads()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="RSI/Batching-v0")
    p.add_argument("--timesteps", type=int, default=8000)
    p.add_argument("--budget", type=int, default=None, help="measurements per episode (default: the task's)")
    p.add_argument("--train-seeds", type=int, default=64, help="train on workload seeds 0..N-1")
    p.add_argument("--eval-seeds", type=int, default=3, help="evaluate on N held-out seeds (0: skip)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--actions", choices=("direct", "moves"), default="direct",
                   help="DiscreteFlagMoves (one notch per step) or DirectSetting (a whole configuration per step)")
    p.add_argument("--out", type=Path, default=Path("runs/sb3_ppo"))
    args = p.parse_args(argv)
    model, stats = train_sb3(args.env, args.timesteps, args.out, budget=args.budget, n_train=args.train_seeds,
                             seed=args.seed, actions=args.actions)
    budget = args.budget or load_task(args.env).max_measurements
    seeds = eval_seeds(args.eval_seeds)
    greedy = evaluate_sb3(model, args.env, seeds, budget, actions=args.actions)
    sampled = evaluate_sb3(model, args.env, seeds, budget, actions=args.actions, deterministic=False)
    line: dict[str, Any] = {"env": args.env, "actions": args.actions, **stats}
    if seeds:
        line["eval_improvement_pct_mean"] = float(np.mean([r.improvement_pct for r in greedy]))
        line["eval_sampled_improvement_pct_mean"] = float(np.mean([r.improvement_pct for r in sampled]))
        line["eval"] = [{"seed": g.seed, "improvement_pct": g.improvement_pct, "sampled_improvement_pct":
                         r.improvement_pct, "measurements": g.measurements, "sampled_measurements": r.measurements}
                        for g, r in zip(greedy, sampled, strict=True)]
    print_result_line(line)


if __name__ == "__main__":
    main()
