"""Warm-started searches and the transfer experiment's mechanics (a small run; not its headline numbers)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from baselines.episodes import run_agent
from baselines.transfer import fill_store, markdown, meets_bar, run_transfer, to_fraction
from baselines.warm_start import warm_agent, warm_indices
from rsi_env.search import SEARCHES
from rsi_env.search.evaluator import Evaluator
from rsi_env.store import ExperienceStore


@pytest.fixture(scope="module")
def source_store(tmp_path_factory) -> ExperienceStore:
    url = f"sqlite:///{tmp_path_factory.mktemp('transfer') / 'sources.sqlite'}"
    stats = fill_store(url, "RSI/Batching-v0", ["llama-3.1-8b@h200", "qwen2.5-7b@a100-80gb"], 8, [0])
    assert stats["measurements"] > 0
    return ExperienceStore(url)


def test_to_fraction():
    assert to_fraction([0.0, 0.5, 1.0], 1.0) == 3
    assert to_fraction([0.0, 0.97, 1.0], 1.0) == 2  # log(0.95) = -0.051: within 95 % of the objective
    assert to_fraction([0.0, 0.5], 1.0) is None and to_fraction([0.1], -math.inf) is None
    assert meets_bar({"cold_to_95": 10, "warm_to_95": 5}, 30) and not meets_bar({"cold_to_95": 9, "warm_to_95": 5}, 30)
    assert meets_bar({"cold_to_95": None, "warm_to_95": 15}, 30) and not meets_bar({"cold_to_95": 3, "warm_to_95": None}, 30)


@pytest.mark.parametrize("search", ["optuna_tpe", "random_search", "coordinate_descent"])
def test_searches_measure_the_proposals_first(source_store, search, monkeypatch):
    monkeypatch.setenv("RSI_ENV_STORE", "off")
    ev = Evaluator("RSI/Batching-v0", 1000, 8, env_kwargs={"model": "mistral-7b", "hardware": "h200"})
    ev.warm = warm_indices(ev, source_store, n=3)
    assert 1 <= len(ev.warm) <= 3 and all(ev.check(i) is None for i in ev.warm)
    SEARCHES[search](ev, np.random.default_rng(0), 1)
    measured = [t.indices for t in ev.trials if t.measured]
    assert measured[: len(ev.warm)] == ev.warm and ev.measurements == 8
    ev.close()


def test_proposals_skip_the_defaults_and_follow_experience(source_store, monkeypatch):
    monkeypatch.setenv("RSI_ENV_STORE", "off")
    ev = Evaluator("RSI/Batching-v0", 1000, 4, env_kwargs={"model": "llama-3.1-8b", "hardware": "h200"})
    warm = warm_indices(ev, source_store, n=5)
    assert warm and all(ev.config(i).to_dict(only_set=True) != {} for i in warm)  # vLLM's defaults: measured anyway
    # The same pair is in the store: its best measured configuration is the first proposal.
    from rsi_env.store.queries import best_configs

    best = best_configs(source_store, "llama-3.1-8b", "h200", task=ev.env.task, n=1)[0]["config"]
    assert ev.config(warm[0]).to_dict(only_set=True) == best
    assert warm_indices(ev, source_store, exclude=[("llama-3.1-8b", "h200"), ("qwen2.5-7b", "a100-80gb")]) == []
    ev.close()


def test_a_policy_plays_the_proposals_first(source_store, monkeypatch):
    monkeypatch.setenv("RSI_ENV_STORE", "off")
    seen = []

    def stay(obs, env):  # a "policy" that submits nothing and keeps the defaults
        seen.append(env.unwrapped.config.to_dict(only_set=True))
        return np.zeros(len(env.unwrapped.flag_names) + 1, dtype=np.int64)

    ev = Evaluator("RSI/Batching-v0", 1000, 4, env_kwargs={"model": "mistral-7b", "hardware": "h200"})
    warm = [ev.config(i).to_dict(only_set=True) for i in warm_indices(ev, source_store, n=2)]
    ev.close()
    res = run_agent("ppo", "RSI/Batching-v0", 1000, 4, warm_agent(stay, source_store, n=2),
                    {"actions": "direct", "observation": "box"}, model="mistral-7b", hardware="h200")
    assert res.measurements >= 3 and seen[0] == warm[1] and len(seen) == res.measurements - 2
    assert res.cost["sim"]["gpu_seconds"] > 0


def test_transfer_runs_cold_and_warm_and_keeps_targets_out_of_the_store(source_store, monkeypatch):
    before = source_store.stats()["measurements"]
    rows = run_transfer("RSI/Batching-v0", source_store, ["mistral-7b@h200"], [1000], 6, ["random_search"])
    assert source_store.stats()["measurements"] == before
    assert {m for (m,) in source_store.conn.execute("SELECT DISTINCT model FROM measurements")} == \
        {"llama-3.1-8b", "qwen2.5-7b"}
    (r,) = rows
    assert r["proposals"] > 0 and r["best_known_pct"] is not None
    assert r["warm_to_95"] is not None or r["cold_to_95"] is not None  # the best known came from one of them
    assert r["cold_gpu_s"] > 0 and r["warm_usd"] > 0
    text = markdown("RSI/Batching-v0", rows, 6, {"store": source_store.stats(), "sources": ["a"], "source_budget": 8,
                                                 "source_seeds": [0], "seeds": [1000]})
    assert "| mistral-7b@h200 | random_search |" in text
