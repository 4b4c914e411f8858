"""The searches spend the budget they are given and no more, climb, and `run_all` writes its tables and plots."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baselines.results import RunResult
from baselines.run_all import main as run_all_main
from rsi_env.search.auto_tune import auto_tune, grid_shape
from rsi_env.search.coordinate_descent import coordinate_descent, start_indices
from rsi_env.search.evaluator import Evaluator
from rsi_env.search.optuna_tpe import optuna_tpe
from rsi_env.search.random_search import random_search
from rsi_env.wrappers.ladders import ladder

SEARCHES = [random_search, coordinate_descent, auto_tune, optuna_tpe]


@pytest.mark.parametrize("search", SEARCHES, ids=lambda f: f.__name__)
def test_search_spends_at_most_its_budget_and_its_best_is_real(search):
    ev = Evaluator("RSI/Batching-v0", seed=1000, budget=6)
    search(ev, np.random.default_rng(0), 1)
    h = ev.progress.history
    assert 0 < len(h) <= 6 and all(a <= b for a, b in zip(h, h[1:], strict=False))
    measured = [t.score for t in ev.trials if t.measured]
    assert len(measured) == len(h) and max(measured) == h[-1]


def test_random_search_and_coordinate_descent_at_small_budgets():
    results = {}
    for name, search in (("random", random_search), ("cd", coordinate_descent)):
        ev = Evaluator("RSI/KVCache-v0", seed=1000, budget=12)
        search(ev, np.random.default_rng(1000), 1)
        results[name] = RunResult.from_evaluator(name, ev)
    for r in results.values():
        assert r.measurements == 12 and r.best_measured_pct is not None
    # coordinate descent climbs from vLLM's defaults (score 0): on this task it finds better within 12
    assert results["cd"].best_score > 0 and results["cd"].improvement_pct > 0


def test_coordinate_descent_starts_from_the_resolved_defaults():
    ev = Evaluator("RSI/Batching-v0", seed=1000, budget=1)
    start = start_indices(ev)
    assert ladder(ev.env, "max_num_seqs")[start["max_num_seqs"]] == 1024  # vLLM's default on an H200
    assert ladder(ev.env, "max_num_batched_tokens")[start["max_num_batched_tokens"]] == 8192


def test_auto_tune_probes_memory_from_the_top_then_stops_where_nothing_else_is_exposed():
    ev = Evaluator("RSI/KVCache-v0", seed=1000, budget=10)
    auto_tune(ev, None, 1)
    first = ev.trials[0].indices
    assert ladder(ev.env, "gpu_memory_utilization")[first["gpu_memory_utilization"]] == 0.98
    assert ladder(ev.env, "enable_prefix_caching")[first["enable_prefix_caching"]] is True
    assert ev.measurements <= 4  # 0.98, 0.95, 0.92, 0.90 at most; no grid on this task


def test_auto_tune_grid_fits_the_budget():
    assert grid_shape([9, 8], 29) == [5, 5]
    assert grid_shape([9, 8], 100) == [9, 8]
    assert grid_shape([8], 3) == [3]
    ev = Evaluator("RSI/Batching-v0", seed=1000, budget=9)
    auto_tune(ev, None, 1)
    seqs = {t.indices["max_num_seqs"] for t in ev.trials}
    assert ev.measurements <= 9 and {0, ev.sizes["max_num_seqs"] - 1} <= seqs  # ends of the ladder kept


def test_run_all_writes_tables_json_and_plots(tmp_path):
    run_all_main(["--env", "RSI/Batching-v0", "--env", "RSI/KVCache-v0", "--budget", "4", "--seeds", "2",
                  "--baselines", "random_search,coordinate_descent,vllm_auto_tune,optuna_tpe,llm_agent",
                  "--out", str(tmp_path)])
    for task in ("Batching-v0", "KVCache-v0"):
        data = json.loads((tmp_path / task / "results.json").read_text())
        assert data["seeds"] == [1000, 1001] and data["budget"] == 4
        assert set(data["summary"]) == {"random_search", "coordinate_descent", "vllm_auto_tune", "optuna_tpe"}
        assert all(r["measurements"] <= 4 for r in data["runs"]) and len(data["runs"]) == 8
        md = (tmp_path / task / "results.md").read_text()
        assert "| random_search |" in md and "llm_agent*: not run" in md
        assert (tmp_path / task / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "RSI/KVCache-v0" in (tmp_path / "summary.md").read_text()
