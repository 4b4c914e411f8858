"""Stage 1 of a two-tier evaluation: search on sim, pick the candidates to promote, write them down.

The search itself is one of ``baselines/`` (``rsi_env.search.trials``, run from a checkout) or any
callable with the same signature; this module only runs it on the plan's env and seed, picks the
candidates and measures their sim telemetry (answered from the sim tier's cache), and writes a
candidates file that the promote stage reads without Gymnasium.

**Selection rule.** A serving team promotes its best configurations, but five near-identical ones
say nothing about whether sim *ranks* configurations as real does. So: distinct configurations
that measured without error, best sim score first; the best is promoted, then each next one is the
best whose score is at least ``min_gap`` (a log ratio: 0.15 is ~16 %) below every one already
promoted; if that leaves fewer than ``top_k``, the best of the rest fill the list.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rsi_env.errors import RsiEnvError
from rsi_env.evaluate.plan import EvalPlan

__all__ = ["Searcher", "default_searcher", "estimate_real_s", "run_search", "select_candidates"]

# (method, env_id, env_kwargs, reset seed, budget, rng seed) -> every measured (flags, sim score), in order.
Searcher = Callable[[str, str, Mapping[str, Any], int, int, int], list[tuple[dict[str, Any], float]]]


def default_searcher() -> Searcher:
    """`rsi_env.search.trials.sim_trials`: one of the package's searches."""
    from rsi_env.search.trials import sim_trials

    return sim_trials


def select_candidates(trials: Sequence[tuple[Mapping[str, Any], float]], top_k: int, min_gap: float) -> list[int]:
    """Indices into ``trials`` of the configurations to promote, by the rule in the module docstring."""
    seen: set[str] = set()
    pool: list[int] = []
    for i, (flags, s) in enumerate(trials):
        key = json.dumps(dict(flags), sort_keys=True, default=str)
        if key in seen or not math.isfinite(s):
            continue
        seen.add(key)
        pool.append(i)
    pool.sort(key=lambda i: -trials[i][1])
    picked: list[int] = []
    for i in pool:
        if len(picked) == top_k:
            break
        if not picked or trials[i][1] <= min(trials[j][1] for j in picked) - min_gap:
            picked.append(i)
    for i in pool:  # too few spread ones: the best of the rest
        if len(picked) == top_k:
            break
        if i not in picked:
            picked.append(i)
    return sorted(picked, key=lambda i: -trials[i][1])


def estimate_real_s(sim_durations: Sequence[float], startup_s: float) -> float:
    """A configuration's expected wall time on real: engine start, warm-up, every workload with 50 % slack."""
    return startup_s + 10.0 + 1.5 * sum(d for d in sim_durations if math.isfinite(d))


def run_search(plan: EvalPlan, searcher: Searcher | None = None) -> dict[str, Any]:
    """Search on sim, select candidates, write ``plan.candidates``; returns what it wrote."""
    import gymnasium as gym

    import rsi_env  # noqa: F401  (registers the RSI/* ids)
    from rsi_env.wrappers.ladders import rsi_env_of

    fn = searcher or default_searcher()
    trials = fn(plan.search.method, plan.env, plan.env_kwargs, plan.seed, plan.search.budget, plan.search.seed)
    env = rsi_env_of(gym.make(plan.env, tier="sim", **plan.env_kwargs))
    try:
        env.reset(seed=plan.seed)
        cal = env.base_tels[0].calibration if env.base_tels else None  # every Telemetry names its calibration

        def entry(name: str, flags: Mapping[str, Any], policy: str | None = None) -> dict[str, Any]:
            cfg = env.engine_kind.make(flags)
            with _policy(env, policy) as keys:
                scored = env.problem.score(cfg)
            tels = scored.tels
            out = {"name": name, "flags": dict(flags), "sim_score": scored.score, "num_gpus": cfg.num_gpus,
                   "est_real_s": round(estimate_real_s([t.duration_s for t in tels], plan.promote.startup_s), 1),
                   "sim": [t.to_dict() for t in tels]}
            if policy is not None:
                out["policy"] = policy
                out["policy_keys"] = {w: {"waiting": [float(x) for x in k.waiting],
                                          "victim": [float(x) for x in k.victim]} for w, k in keys.items()}
            return out

        picked = select_candidates(trials, plan.promote.top_k, plan.promote.min_gap)
        start = env.baseline_config.to_dict(only_set=True)
        doc: dict[str, Any] = {
            "plan": plan.name, "env": plan.env, "env_kwargs": plan.env_kwargs, "seed": plan.seed,
            "model": plan.env_kwargs.get("model") or env.task.default_model,
            "hardware": plan.env_kwargs.get("hardware") or env.task.default_hardware,
            "engine": env.engine_kind.name, "engine_version": env.tier.engine_version, "calibration": cal,
            "search": asdict(plan.search), "sim_evaluations": len(trials),
            "selection": f"best sim score, then each next best at least {plan.promote.min_gap} (log ratio) below "
                         f"every one promoted; top {plan.promote.top_k} of {len(trials)} measured",
            "workloads": [w.to_dict() for w in env.workloads],
            "defaults": entry("defaults", start),
            "candidates": [entry(f"c{r + 1}", trials[i][0]) for r, i in enumerate(picked)],
            # a probe's flags change the task's starting configuration (a co-tenant's memory share stays)
            "probes": [entry(str(p["name"]), {**start, **(p.get("flags") or {})}, p.get("policy"))
                       for p in plan.promote.probes],
        }
    finally:
        env.close()
    Path(plan.candidates).parent.mkdir(parents=True, exist_ok=True)
    Path(plan.candidates).write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
    return doc


@contextlib.contextmanager
def _policy(env: Any, policy: str | None) -> Iterator[dict[str, Any]]:
    """With ``policy`` (``reference``: the task's reference solution) in a Scheduler env's workspace, written as the
    env writes files and put back after; yields a dict that then holds the keys the measurement inside computed."""
    keys: dict[str, Any] = {}
    if policy is None:
        yield keys
        return
    if policy != "reference" or not hasattr(env, "policy_tier"):
        raise RsiEnvError(f"probe policy {policy!r}: only 'reference', on a task with a scheduling policy")
    from rsi_env.tasks.scheduler.reference import reference_files

    files = reference_files(env)
    before = {rel: env.workspace.read(rel) for rel in files}
    try:
        for rel, text in files.items():
            env.workspace.write(rel, text)
        yield keys
        keys.update(env.policy_tier.last_keys)
    finally:
        for rel, text in before.items():
            env.workspace.write(rel, text)


def _json_default(x: Any) -> Any:
    if isinstance(x, tuple):
        return list(x)
    raise TypeError(f"not JSON: {type(x).__name__}")
