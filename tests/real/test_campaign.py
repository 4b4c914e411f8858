"""The calibration campaign's choice of runs (`rsi_env.real.campaign`): ``--only`` in the order given, typos refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsi_env.real.campaign import _selected_runs, main

RUNS = [{"name": n, "model": "llama-3.1-8b", "set": {}} for n in ("a-default", "a-mns32", "a-eager")]


def test_only_runs_the_named_runs_in_the_order_given():
    """A second pass names the first's runs in reverse, so a drift over the lease does not favour one of them."""
    assert [r["name"] for r in _selected_runs(RUNS, ["a-eager", "a-default"])] == ["a-eager", "a-default"]
    assert _selected_runs(RUNS, []) == RUNS


def test_a_name_the_plan_lacks_is_refused_before_anything_runs(tmp_path: Path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("workloads: []\nruns:\n" + "".join(f"  - {{name: {r['name']}, model: m}}\n" for r in RUNS))
    with pytest.raises(SystemExit, match=r"no run named \['a-mns23'\].*a-mns32"):
        main(["--plan", str(plan), "--only", "a-default,a-mns23", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
