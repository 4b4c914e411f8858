"""The suite builder's bookkeeping: which frozen results make the suite, and the baselines' table.

(The freeze itself — ceilings, references, difficulty — is exercised on the shipped suite by test_suite_file.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

from rsi_env.suite.build import _selected, baseline_table, candidate_key
from rsi_env.suite.instance import Instance
from rsi_env.suite.plan import Candidate, candidates, flag_quota


def _inst(c: Candidate, difficulty: str = "hard", baselines: dict[str, float] | None = None) -> Instance:
    return Instance(id=c.id, front=c.front, family=c.family, env_id=c.env_id, env_kwargs=dict(c.env_kwargs),
                    seed=c.seed, tier="sim", budget=10, max_steps=20, difficulty=difficulty,
                    criterion={"kind": "checks"}, reference={"code": c.family}, baselines=baselines or {})


def test_a_kept_result_is_valid_only_for_its_own_candidate():
    plan = candidates()
    assert len({candidate_key(c) for c in plan}) == len(plan)  # no two candidates share what a result is kept for
    assert len({c.id for c in plan}) == len(plan)  # nor an id (kept results are looked up by it)


def test_the_suite_keeps_the_first_of_each_flag_family_in_plan_order_and_every_code_instance():
    plan = candidates()
    batching = [c for c in plan if c.family == "Batching"]
    code = [c for c in plan if c.kind == "code"][:5]
    assert len(batching) > flag_quota("Batching") + 2
    done: dict[str, dict[str, Any]] = {c.id: {"instance": _inst(c).to_dict()} for c in batching + code}
    done[batching[0].id] = {"rejected": "headroom"}  # a left-out candidate is not an instance
    kept = _selected(plan, done)
    kept_batching = [i.id for i in kept if i.family == "Batching"]
    assert kept_batching == [c.id for c in batching[1:flag_quota("Batching") + 1]]
    assert [i.id for i in kept if i.family not in ("Batching",)] == [c.id for c in code]


def test_the_baselines_table_is_the_mean_pass_rate_per_front_and_difficulty():
    plan = candidates()
    a, b, c = [x for x in plan if x.family == "Batching"][:3]
    rows = [_inst(a, "hard", {"null": 0.0, "random_search": 1 / 3}), _inst(b, "hard", {"null": 1.0}),
            _inst(c, "easy", {"null": 1.0})]
    table = baseline_table(rows)
    assert table["null"]["optimisation/hard"] == {"pass_rate": 0.5, "instances": 2}
    assert table["null"]["easy"] == {"pass_rate": 1.0, "instances": 1}
    assert table["null"]["all"]["pass_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert table["random_search"]["all"] == {"pass_rate": pytest.approx(1 / 3, abs=1e-4), "instances": 1}
