"""The searches the package itself runs: over a flag task's ladders, through `Evaluator` (one measurement per trial).

``SEARCHES``: `random_search`, vLLM's `auto_tune` procedure, `coordinate_descent` and `optuna_tpe` (Optuna loads
only when it runs). The two-tier evaluation's search stage runs them (`sim_trials`); ``baselines/`` compares them
with trained policies and agents at one budget. `exhaustive` is the yardstick beside them: every valid
configuration measured, the best any of them could find.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rsi_env.search.auto_tune import auto_tune
from rsi_env.search.coordinate_descent import coordinate_descent
from rsi_env.search.evaluator import Evaluator
from rsi_env.search.optuna_tpe import optuna_tpe
from rsi_env.search.random_search import random_search

__all__ = ["SEARCHES", "Evaluator", "Search"]

Search = Callable[[Evaluator, np.random.Generator, int], None]
SEARCHES: dict[str, Search] = {"random_search": random_search, "vllm_auto_tune": auto_tune,
                               "coordinate_descent": coordinate_descent, "optuna_tpe": optuna_tpe}
