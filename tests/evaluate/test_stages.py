"""The three stages on RSI/Batching-v0 (sim search, promote on a stand-in real tier, report), and the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import yaml

import rsi_env.evaluate.promote as promote_mod
from rsi_env.cli import main as cli_main
from rsi_env.errors import RsiEnvError
from rsi_env.evaluate import evaluate, load_plan, run_promote, run_search
from rsi_env.evaluate.promote import estimated_makespan_s, load_candidates, read_results
from rsi_env.evaluate.report import build_report, render_markdown

PLAN = {
    "name": "unit", "env": "RSI/Batching-v0", "env_kwargs": {}, "seed": 1000,
    "search": {"method": "random_search", "budget": 12, "seed": 0},
    "promote": {"top_k": 3, "min_gap": 0.1, "record_tokens": 4, "per_run_timeout_s": 60, "deadline_s": 120,
                "startup_s": 1, "probes": [{"name": "kv_fp8", "flags": {"kv_cache_dtype": "fp8"}},
                                           {"name": "tp2", "flags": {"tensor_parallel_size": 2}}]},
}


@pytest.fixture
def plan(tmp_path, monkeypatch, fake_real_tier):
    global FakeRealTier
    FakeRealTier = fake_real_tier
    raw = {**PLAN, "candidates": str(tmp_path / "cand.json"), "out": str(tmp_path / "out")}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(promote_mod, "RealTier", fake_real_tier)
    return load_plan(tmp_path / "plan.yaml")


@pytest.fixture
def searched(plan):
    return plan, run_search(plan)


def test_search_writes_spread_candidates_with_sim_telemetry(searched):
    plan, doc = searched
    assert load_candidates(plan) == json.loads(plan.candidates.read_text())
    assert doc["sim_evaluations"] == 12 and doc["model"] == "llama-3.1-8b" and doc["hardware"] == "h200"
    assert len(doc["candidates"]) == 3 and doc["defaults"]["sim_score"] == 0.0
    scores = [c["sim_score"] for c in doc["candidates"]]
    assert scores == sorted(scores, reverse=True)
    assert len(doc["workloads"]) == 2 and all(len(c["sim"]) == 2 for c in doc["candidates"])
    assert [p["name"] for p in doc["probes"]] == ["kv_fp8", "tp2"] and doc["probes"][1]["num_gpus"] == 2


def test_promote_runs_on_two_gpus_in_parallel_and_appends(searched):
    plan, doc = searched
    rows = run_promote(plan, gpus=["0", "1"])
    # The defaults go first, on the first GPU (rows are in order of completion, which two GPUs make a race).
    assert next(r for r in rows if r["name"] == "defaults")["gpus"] == ["0"] and len(rows) == 6
    assert FakeRealTier.max_running == 2
    pinned = {c["env"]["CUDA_VISIBLE_DEVICES"] for c in FakeRealTier.calls}
    assert pinned == {"0", "1", "0,1"}  # the tensor-parallel probe took both GPUs
    assert next(r for r in rows if r["name"] == "tp2")["gpus"] == ["0", "1"]
    assert all(r["error"] is None and r["gpu_s"] >= r["wall_s"] > 0 for r in rows)
    assert all(set(r["output_token_ids"]) == {w["name"] for w in doc["workloads"]} for r in rows)
    assert all(set(r["steps"]) == {w["name"] for w in doc["workloads"]} for r in rows)  # each workload's step trace
    # the host that measured, and its CPU probe before each workload
    assert all(r["host"]["cpu"] == "stand-in" and r["cpu_probe_ms"] == {w["name"]: 12.5 for w in doc["workloads"]}
               for r in rows)
    # a second run measures nothing new: what is there is kept
    FakeRealTier.reset()
    assert len(run_promote(plan, gpus=["0", "1"])) == 6 and FakeRealTier.calls == []


def test_promote_runs_the_drivers_with_the_plans_collector_mode(searched):
    plan, _ = searched
    assert plan.promote.gc is None  # the default: the engine's own mode, vLLM's live
    [row] = run_promote(plan, only=["c2"])
    assert [c["gc"] for c in FakeRealTier.calls] == ["live"] and row["gc"] == "live"
    FakeRealTier.reset()
    frozen = dataclasses.replace(plan, promote=dataclasses.replace(plan.promote, gc="frozen"))
    # rows of another mode in the results: refused before any engine starts (their scores would not compare)
    with pytest.raises(RsiEnvError, match="collector live; this run measures with it frozen"):
        run_promote(frozen, only=["defaults", "c1"])
    assert FakeRealTier.calls == []
    rows = run_promote(frozen, only=["defaults", "c1"], fresh=True)
    assert [c["gc"] for c in FakeRealTier.calls] == ["frozen", "frozen"]
    assert {r["name"]: r["gc"] for r in rows} == {"defaults": "frozen", "c1": "frozen"}
    assert all(set(r["driver_gc"]) == set(r["requests"]) == set(r["workloads"]) for r in rows)


def test_promote_keeps_to_the_deadline(searched):
    plan, _ = searched
    rows = run_promote(plan, deadline_s=0.0)
    assert rows == [] and FakeRealTier.calls == []
    run_promote(plan, deadline_s=60.0, only=["defaults", "c1"])
    assert [r["name"] for r in read_results(plan)] == ["defaults", "c1"]
    assert all(c["timeout_s"] <= 60.0 for c in FakeRealTier.calls)


def test_a_config_needing_more_gpus_than_given_is_skipped(searched, capsys):
    plan, _ = searched
    rows = run_promote(plan, gpus=["0"])
    assert "tp2" not in {r["name"] for r in rows} and '"skipped": "tp2"' in capsys.readouterr().out


def test_report_numbers(searched):
    plan, doc = searched
    run_promote(plan, gpus=["0", "1"])
    rep = build_report(plan)
    # real = sim x 0.8 on every rate: the objective is 25 % off, the scores and their ranks are the same
    assert rep["fidelity"]["mape_pct"] == pytest.approx(25.0)
    assert rep["fidelity"]["mape_metric_pct"] == pytest.approx(25.0)
    assert rep["fidelity"]["spearman"] == pytest.approx(1.0)
    rows = {r["name"]: r for r in rep["rows"]}
    for c in doc["candidates"]:
        assert rows[c["name"]]["real_score"] == pytest.approx(c["sim_score"], abs=1e-9)
        assert rows[c["name"]]["outputs"]["ok"]
    assert not rows["kv_fp8"]["outputs"]["ok"] and rows["kv_fp8"]["probe"]
    assert rep["improvement"]["best_on_real"] == "c1"
    assert rep["improvement"]["best_real_pct"] == pytest.approx(100 * math.expm1(doc["candidates"][0]["sim_score"]))
    spent = [r["gpu_s"] for r in read_results(plan)]
    assert rep["cost"]["real_gpu_s"] == pytest.approx(sum(spent))
    assert rep["cost"]["real_only_gpu_s_est"] == pytest.approx(13 * sum(spent) / len(spent))
    md = render_markdown(rep)
    assert "| c1 |" in md and "kv_fp8 (probe)" in md and "Spearman rho 1.000" in md


def test_a_candidate_real_refuses_is_reported_not_ranked(searched):
    plan, doc = searched
    FakeRealTier.refuse = doc["candidates"][1]["flags"]
    run_promote(plan)
    rep = build_report(plan)
    c2 = next(r for r in rep["rows"] if r["name"] == "c2")
    assert c2["real_error"].startswith("invalid_config") and c2["outputs"] is None and c2["real_score"] == -math.inf
    assert rep["fidelity"]["failed_on_real"] == ["c2"] and rep["fidelity"]["spearman"] == pytest.approx(1.0)
    assert "invalid_config: refused by the stand-in" in render_markdown(rep)


def test_report_without_real_defaults_has_no_real_scores(searched):
    plan, _ = searched
    run_promote(plan, only=["c1"])
    rep = build_report(plan)
    assert all(math.isnan(r["real_score"]) for r in rep["rows"]) and math.isnan(rep["fidelity"]["spearman"])


def test_promote_on_another_card_than_the_search_priced_labels_its_rows_and_report(searched):
    """A lease that gives an H100 for a plan searched for the H200: the rows say which card measured them and the
    report names both (its sim columns are the other card's predictions), instead of a candidates file edited by hand."""
    plan, doc = searched
    assert doc["hardware"] == "h200"
    rows = run_promote(plan, only=["defaults", "c1"], hardware="h100-sxm")
    assert {c["hardware"] for c in FakeRealTier.calls} == {"h100-sxm"}
    assert [r["hardware"] for r in rows] == ["h100-sxm", "h100-sxm"]
    rep = build_report(plan)
    assert rep["hardware"] == "h200" and rep["real_hardware"] == "h100-sxm"
    assert "searched for h200, measured on h100-sxm" in render_markdown(rep)


def test_promote_refuses_to_mix_cards_in_one_results_file(searched):
    plan, _ = searched
    run_promote(plan, only=["defaults"])  # on the searched card, h200
    FakeRealTier.reset()
    with pytest.raises(RsiEnvError, match=r"measured on h200.*this run measures on h100-sxm.*--fresh"):
        run_promote(plan, only=["c1"], hardware="h100-sxm")
    assert FakeRealTier.calls == []  # refused before any engine started
    with pytest.raises(RsiEnvError, match="unknown hardware|h999"):
        run_promote(plan, only=["c1"], hardware="h999")
    rows = run_promote(plan, only=["c1"], hardware="h100-sxm", fresh=True)
    assert [(r["name"], r["hardware"]) for r in rows] == [("c1", "h100-sxm")]


def test_rows_from_before_the_card_was_recorded_count_as_the_searched_card(searched):
    plan, _ = searched
    run_promote(plan, only=["defaults"])
    out = plan.out / "real.jsonl"
    out.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "hardware"}) + "\n"
                           for r in read_results(plan)))
    rep = build_report(plan)
    assert rep["real_hardware"] == "h200" and "searched for" not in render_markdown(rep)
    run_promote(plan, only=["c1"])  # the same card: appended, no refusal
    assert [r["name"] for r in read_results(plan)] == ["defaults", "c1"]


def test_estimated_makespan():
    e = [{"est_real_s": 100, "num_gpus": 1}, {"est_real_s": 50, "num_gpus": 1}, {"est_real_s": 30, "num_gpus": 1},
         {"est_real_s": 40, "num_gpus": 2}]
    # 0: [0,100]; 1: [0,50] then [50,80]; the 2-GPU run waits for both: [100,140]
    assert estimated_makespan_s(e, 2) == pytest.approx(140.0)
    assert estimated_makespan_s(e, 0) == pytest.approx(220.0)


def test_evaluate_all_stages_and_cli(plan, capsys):
    rep = evaluate(plan, gpus=["0", "1"])
    assert rep is not None and (plan.out / "report.md").exists() and json.loads((plan.out / "report.json").read_text())
    capsys.readouterr()
    assert cli_main(["eval", "--plan", plan.source, "--stage", "report", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"] == "unit" and out["fidelity"]["spearman"] == pytest.approx(1.0)


def test_bad_plans_are_named(tmp_path):
    with pytest.raises(RsiEnvError, match="no eval plan"):
        load_plan(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    for raw, msg in [({**PLAN, "candidates": "c", "out": "o", "colour": 1}, "unknown keys"),
                     ({**PLAN, "candidates": "c", "out": "o", "env_kwargs": {"tier": "real"}}, "may not set tier"),
                     ({**PLAN, "out": "o"}, "missing keys"),
                     ({**PLAN, "candidates": "c", "out": "o", "promote": {"probes": [{"flags": {}}]}}, "each probe"),
                     ({**PLAN, "candidates": "c", "out": "o", "promote": {"gc": "off"}}, r"promote.gc is one of")]:
        bad.write_text(yaml.safe_dump(raw))
        with pytest.raises(RsiEnvError, match=msg):
            load_plan(bad)


def test_promote_needs_the_search_first(plan):
    with pytest.raises(RsiEnvError, match="run the search stage first"):
        run_promote(plan)
    other = dataclasses.replace(plan, name="other")
    run_search(plan)
    with pytest.raises(RsiEnvError, match="not 'other'"):
        load_candidates(other)
    doc = json.loads(plan.candidates.read_text())
    plan.candidates.write_text(json.dumps({**doc, "engine": "tensorrt"}))
    with pytest.raises(RsiEnvError, match=r"candidates.*engine must be one of \['sglang', 'vllm'\]"):
        run_promote(plan)  # refused before any engine starts, not a traceback in a run's thread


def test_the_shipped_h200_plan_fits_two_gpus_in_its_deadline():
    plan = load_plan("configs/eval/batching_h200.yaml")
    doc = load_candidates(plan)
    assert len(doc["candidates"]) == plan.promote.top_k == 5
    scores = [c["sim_score"] for c in doc["candidates"]]
    assert all(a - b >= plan.promote.min_gap for a, b in zip(scores, scores[1:], strict=False))
    assert estimated_makespan_s([doc["defaults"], *doc["candidates"]], 2) <= plan.promote.deadline_s


def test_a_scheduling_policy_probe_reaches_the_real_engine_as_its_keys(tmp_path, monkeypatch, fake_real_tier):
    """A probe naming the reference policy: the search stage computes its keys on sim (every request of every
    workload, in the co-tenant's memory share), and promote runs exactly those keys on the (stand-in) real tier."""
    raw = {"name": "sched", "env": "RSI/Scheduler-v1", "env_kwargs": {"sandbox": "bubblewrap"}, "seed": 3,
           "search": {"method": "random_search", "budget": 2, "seed": 0},
           "promote": {"top_k": 1, "min_gap": 0.1, "record_tokens": 0, "per_run_timeout_s": 60, "deadline_s": 120,
                       "startup_s": 1, "probes": [{"name": "ref", "policy": "reference"}]},
           "candidates": str(tmp_path / "cand.json"), "out": str(tmp_path / "out")}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(promote_mod, "RealTier", fake_real_tier)
    plan = load_plan(tmp_path / "plan.yaml")
    doc = run_search(plan)
    probe = doc["probes"][0]
    assert probe["policy"] == "reference" and probe["flags"] == {"gpu_memory_utilization": 0.25}
    sizes = {w["name"]: w["requests"] for w in doc["workloads"]}
    assert {w: len(k["waiting"]) for w, k in probe["policy_keys"].items()} == sizes
    assert probe["sim_score"] != doc["defaults"]["sim_score"]
    rows = run_promote(plan)
    assert {r["name"]: r["policy"] for r in rows} == {"defaults": None, "c1": None, "ref": "reference"}
    assert len(fake_real_tier.scheduled_keys) == 1
    ran = fake_real_tier.scheduled_keys[0]
    assert {w: list(k.waiting) for w, k in ran.items()} == {w: k["waiting"] for w, k in probe["policy_keys"].items()}


def test_a_probe_needs_flags_or_a_policy(tmp_path):
    raw = {**PLAN, "candidates": str(tmp_path / "c.json"), "out": str(tmp_path / "o"),
           "promote": {**PLAN["promote"], "probes": [{"name": "nothing"}]}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(RsiEnvError, match="with flags or a policy"):
        load_plan(tmp_path / "plan.yaml")


def test_a_candidate_measured_without_the_defaults_has_no_score_and_has_not_failed(searched):
    plan, doc = searched
    run_promote(plan, only=["c1"])
    rep = build_report(plan)
    c1 = next(r for r in rep["rows"] if r["name"] == "c1")
    assert c1["measured"] and math.isnan(c1["real_score"]) and c1["real_error"] is None
    assert rep["fidelity"]["failed_on_real"] == [] and rep["fidelity"]["measured_on_real"] == 1


def test_an_sglang_plan_is_searched_on_sglang_s_sim_and_promoted_to_sglang(tmp_path):
    """engine=sglang in the plan: SGLang's flags and sim (its H100 fit) in the candidates, SGLang's real tier in
    promote. This machine has no SGLang: the real run fails in those words, as a row, and the report names SGLang."""
    raw = {**PLAN, "name": "unit_sglang", "env_kwargs": {"engine": "sglang", "hardware": "h100-sxm"},
           "search": {"method": "random_search", "budget": 6, "seed": 0},
           "promote": {**PLAN["promote"], "top_k": 2, "probes": []},
           "candidates": str(tmp_path / "cand.json"), "out": str(tmp_path / "out")}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    plan = load_plan(tmp_path / "plan.yaml")
    doc = run_search(plan)
    assert doc["engine"] == "sglang" and doc["engine_version"] == "sglang-0.5.17"
    assert doc["calibration"].startswith("h100-sxm-sglang-0.5-")
    assert all(set(c["flags"]) <= {"max_running_requests", "chunked_prefill_size", "max_prefill_tokens",
                                   "cuda_graph_max_bs", "schedule_conservativeness"} for c in doc["candidates"])
    rows = run_promote(plan, only=["defaults"])
    assert [r["name"] for r in rows] == ["defaults"] and rows[0]["engine"] == "sglang"
    assert rows[0]["error"] and "SGLang" in rows[0]["error"] and "vLLM" not in rows[0]["error"], rows[0]["error"]
    md = render_markdown(build_report(plan))
    assert "real: SGLang none; sim: SGLang sglang-0.5.17" in md and "over SGLang's defaults" in md
