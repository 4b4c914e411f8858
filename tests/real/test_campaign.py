"""The calibration campaign's choice of runs (`rsi_env.real.campaign`): ``--only`` in the order given, typos refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsi_env.real.campaign import _selected_runs, driver_command, main

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


def test_a_runs_flags_workloads_and_driver_options_reach_the_driver(tmp_path: Path):
    run = {"name": "n", "model": "llama-3.1-8b", "set": {"max_num_seqs": 32, "kv_cache_dtype": "fp8"},
           "args": ["--no-min-tokens"]}
    cmd = driver_command(run, ["a.yaml", "b.yaml"], tmp_path / "r.jsonl")
    assert cmd[1:3] == ["-m", "rsi_env.real.vllm_driver"]
    assert cmd[3:] == ["--model", "llama-3.1-8b", "--out", str(tmp_path / "r.jsonl"), "--set", "max_num_seqs=32",
                       "--set", 'kv_cache_dtype="fp8"', "--workload", "a.yaml", "--workload", "b.yaml",
                       "--no-min-tokens"]
    assert driver_command({"model": "m", "workloads": ["c.yaml"]}, ["a.yaml"], tmp_path / "r.jsonl")[-2:] == [
        "--workload", "c.yaml"]
