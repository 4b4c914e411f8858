"""A small suite file for the suite's tests: one flag instance whose ceiling is measured here, and one BugFix
instance; both with the references the frozen suite would carry."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rsi_env.search import Evaluator
from rsi_env.suite.instance import Instance, Suite, threshold_for

FLAG_KWARGS = {"model": "llama-3.1-8b", "hardware": "h200", "workloads": ["short_long", "many_small"]}
REFERENCE = {"max_num_seqs": 128}


def flag_instance(ceiling_config: dict[str, object] = REFERENCE) -> Instance:
    """Batching on an H200, its 'ceiling' the score of ``ceiling_config`` (measured now, as the build does)."""
    ev = Evaluator("RSI/Batching-v0", 0, budget=1, env_kwargs=FLAG_KWARGS)
    try:
        score = ev.env.problem.score(ev.env.baseline_config.replace(**ceiling_config)).score
        cfg = {f: ev.env.baseline_config.replace(**ceiling_config).to_dict()[f] for f in ev.env.flag_names}
    finally:
        ev.close()
    kwargs = {**FLAG_KWARGS, "improvement_threshold": threshold_for(score, 0.95)}
    return Instance(id="opt-batching-test", front="optimisation", family="Batching", env_id="RSI/Batching-v0",
                    env_kwargs=kwargs, seed=0, tier="sim", budget=6, max_steps=10, difficulty="medium",
                    criterion={"kind": "ceiling", "ceiling": score, "fraction": 0.95, "method": "test",
                               "measured": 1}, reference={"config": cfg}, baselines={"null": 0.0})


def bugfix_instance() -> Instance:
    return Instance(id="bug-bugfix-s5", front="bug-fixing", family="BugFix", env_id="RSI/BugFix-v0",
                    env_kwargs={"sandbox": "bubblewrap"}, seed=5, tier="sim", budget=30, max_steps=40,
                    difficulty="hard", criterion={"kind": "checks"}, reference={"code": "BugFix"},
                    baselines={"null": 0.0})


@pytest.fixture(scope="session")
def suite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    suite = Suite(id="rsi-bench-test", instances=(flag_instance(), bugfix_instance()), ceiling_fraction=0.95,
                  calibrations={}, frozen="2026-12-05")
    path = tmp_path_factory.mktemp("suite") / "rsi-bench-test.yaml"
    path.write_text(yaml.safe_dump(suite.to_dict(), sort_keys=False))
    return path
