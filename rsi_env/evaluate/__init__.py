"""Two-tier evaluation: search on sim, promote the best candidates to real, report how well sim predicted real.

Three stages, runnable apart (the real stage often on another machine) or at once:

1. ``search`` (`run_search`): a search of ``baselines/`` on the sim tier within the plan's budget;
   the candidates to promote (and vLLM's defaults) with their sim telemetry go to a JSON file;
2. ``promote`` (`run_promote`, ``python -m rsi_env.evaluate.promote``): each candidate measured on the
   real tier, one engine per configuration, on N local GPUs in parallel, results appended as they
   come; imports no Gymnasium or Optuna;
3. ``report`` (`write_report`): per candidate sim vs real, MAPE and Spearman of the promotion, the
   real improvement over the defaults, and GPU-seconds spent against a search on real alone.

``rsi-env eval --plan configs/eval/<plan>.yaml [--stage search|promote|report]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rsi_env.evaluate.plan import EvalPlan, load_plan
from rsi_env.evaluate.search import Searcher, run_search, select_candidates

__all__ = ["EvalPlan", "Searcher", "evaluate", "load_plan", "run_promote", "run_search", "select_candidates",
           "write_report"]

STAGES = ("search", "promote", "report")


def evaluate(plan: EvalPlan | str, stages: Sequence[str] = STAGES, *, searcher: Searcher | None = None,
             gpus: Sequence[str] = (), deadline_s: float | None = None) -> dict[str, Any] | None:
    """Run the named stages of ``plan`` in order; returns the report if the report stage ran."""
    p = plan if isinstance(plan, EvalPlan) else load_plan(plan)
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        from rsi_env.errors import RsiEnvError

        raise RsiEnvError(f"unknown eval stages {unknown}; stages: {list(STAGES)}")
    rep = None
    if "search" in stages:
        run_search(p, searcher)
    if "promote" in stages:
        from rsi_env.evaluate.promote import run_promote

        run_promote(p, gpus, deadline_s)
    if "report" in stages:
        from rsi_env.evaluate.report import write_report

        rep = write_report(p)
    return rep


def __getattr__(name: str) -> Any:
    # Imported on use: ``python -m rsi_env.evaluate.promote`` must not find its module imported already,
    # and the report needs the task's objective (Gymnasium's side of the package).
    if name == "run_promote":
        from rsi_env.evaluate.promote import run_promote

        return run_promote
    if name == "write_report":
        from rsi_env.evaluate.report import write_report

        return write_report
    raise AttributeError(name)
