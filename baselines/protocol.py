"""The evaluation protocol every baseline follows: training seeds, held-out seeds, the RL view, the result line.

Policies train on workload seeds ``0 .. n_train-1`` (drawn per episode by `TrainingSeeds`) and every
baseline — search or policy — is evaluated on reset seeds from :data:`EVAL_SEED_BASE` up, which no
training run sees. Budgets are counted in measurements (one measurement = every workload of the
task once, on the task's tier), the same for every baseline.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["EVAL_SEED_BASE", "RL_VIEW", "eval_seeds", "json_safe", "limit_threads", "print_result_line", "train_seeds"]

EVAL_SEED_BASE = 1000
# What PPO trains and is evaluated on: the search's reward (no measurement charge); each program picks the actions.
RL_VIEW: Mapping[str, Any] = {"reward": "improvement"}


def train_seeds(n: int) -> list[int]:
    """The workload seeds a policy may train on."""
    return list(range(n))


def eval_seeds(n: int) -> list[int]:
    """``n`` held-out reset seeds, disjoint from every training set."""
    return [EVAL_SEED_BASE + k for k in range(n)]


def limit_threads() -> None:
    """One OpenMP/MKL thread per process unless the caller says otherwise: many small processes share few cores."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def json_safe(x: Any) -> Any:
    """``x`` with non-finite floats as ``None`` (JSON has no infinity), recursively."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def print_result_line(result: Mapping[str, Any]) -> None:
    """Print ``result`` as one JSON object on one line — the last line a training program prints."""
    print(json.dumps(json_safe(dict(result)), sort_keys=False), flush=True)
