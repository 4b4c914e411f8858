"""Optuna's TPE sampler over the task's ladders, one trial per configuration, until the budget is spent.

Each free flag is one parameter: an ordered ladder of numbers is an integer index (TPE models its
order), anything else (booleans, dtypes, capture-size lists) a categorical one. A configuration
the env would refuse is told to Optuna as a failed trial and costs no measurement; one measured
before is told its known score at no cost. Scores are told clipped at :data:`SCORE_FLOOR` (below
it every configuration is hopeless alike) and a measurement that failed (out of memory, a workload
that could not run) one below the floor, so that TPE learns to avoid the region. Trials
are asked ``batch_size`` at a time, so a parallel measurer (Ray) runs a batch together.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rsi_env.search.evaluator import Evaluator
from rsi_env.wrappers.ladders import ladder

__all__ = ["SCORE_FLOOR", "optuna_tpe"]

SCORE_FLOOR = -5.0  # a log ratio: e^-5, under 1 % of vLLM's defaults
_ASKS_PER_MEASUREMENT = 50


def _ordered(values: tuple[Any, ...]) -> bool:
    nums = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return nums and list(values) == sorted(values)


def optuna_tpe(ev: Evaluator, rng: np.random.Generator, batch_size: int = 1) -> None:
    """Spend ``ev``'s budget on TPE trials (seeded from ``rng``)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=int(rng.integers(2**31)), n_startup_trials=min(10, ev.budget // 3 + 1))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    ordered = {f: _ordered(ladder(ev.env, f)) for f in ev.flags}
    for idx in ev.warm:  # a warm start: experience's proposals are the first trials (TPE learns from them)
        study.enqueue_trial({f: idx[f] for f in ev.flags}, skip_if_exists=True)
    asks = 0
    while ev.left > 0 and asks < _ASKS_PER_MEASUREMENT * ev.budget:
        trials = [study.ask() for _ in range(min(batch_size, ev.left))]
        asks += len(trials)
        batch = []
        for t in trials:
            batch.append({f: (t.suggest_int(f, 0, ev.sizes[f] - 1) if ordered[f]
                              else t.suggest_categorical(f, list(range(ev.sizes[f])))) for f in ev.flags})
        scores = ev.evaluate(batch)
        for t, s in zip(trials, scores, strict=True):
            if s is None:  # refused by the env (or past the budget): no measurement
                study.tell(t, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(t, max(s, SCORE_FLOOR) if math.isfinite(s) else SCORE_FLOOR - 1.0)
