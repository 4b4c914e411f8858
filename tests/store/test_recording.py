"""What lands in the experience store, automatically: measurements of the tiers, episodes of the envs."""

from __future__ import annotations

import json
import math
import re

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401
from rsi_env.cli import main
from rsi_env.engine import load_hardware, load_model, load_workload
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.task import load_task
from rsi_env.envs.measure import sim_tier
from rsi_env.envs.state import validate
from rsi_env.store import ExperienceStore, default_store
from rsi_env.store.queries import best_configs
from rsi_env.store.transfer import export_store, import_files


@pytest.fixture
def store(tmp_path, monkeypatch) -> ExperienceStore:
    monkeypatch.setenv("RSI_ENV_STORE", f"sqlite:///{tmp_path / 'exp.sqlite'}")
    st = default_store()
    assert st is not None
    return st


def test_an_episode_records_its_measurements_once_and_itself(store):
    env = gym.make("RSI/Batching-v0")
    rsi = env.unwrapped
    env.reset(seed=4242)
    for v in (128, 256, 128):  # the third is a cache hit: simulated before, so not recorded again
        env.step(rsi.flag_action("max_num_seqs", v))
    env.step({"kind": 4})
    rows = store.measurements()
    assert len(rows) == 2 * 3  # baseline + two new configurations, two workloads each
    assert {r["source"] for r in rows} == {"env:RSI/Batching-v0"}
    assert {r["episode"] for r in rows} == {rsi.episode_id}
    r = rows[0]
    assert r["model"] == "llama-3.1-8b" and r["hardware"] == "h200" and r["tier"] == "sim"
    assert r["model_features"]["params_b"] > 7 and r["hardware_features"]["memory_gb"] > 100
    assert r["workload_stats"]["concurrency"] == 256 and r["telemetry"]["calibration"] == r["calibration"]
    assert r["gpu_seconds"] == pytest.approx(r["telemetry"]["duration_s"])
    assert r["cost_usd"] == pytest.approx(r["gpu_seconds"] * 3.80 / 3600)
    eps = store.episodes()
    assert len(eps) == 1 and eps[0]["id"] == rsi.episode_id and eps[0]["task"] == "RSI/Batching-v0"
    assert eps[0]["rewards"] == pytest.approx(rsi.reward_log) and len(eps[0]["actions"]) == 4
    assert eps[0]["passed"] in (0, 1) and eps[0]["extra"]["cost"]["sim"]["measurements"] == 4  # a repeat costs on a GPU
    env.close()
    assert len(store.episodes()) == 1  # closing does not record it twice


def test_the_cache_measures_only_its_misses_and_the_store_gets_them_as_one_trial(store):
    tier = sim_tier("0.26")
    m, hw = load_model("llama-3.2-1b"), load_hardware("l40s")
    a, b, c = load_workload("short_long"), load_workload("many_small"), load_workload("rag_chat")
    first = tier.measure_all(EngineConfig(), m, hw, [a])
    both = tier.measure_all(EngineConfig(), m, hw, [b, a, c])
    assert both[1] == first[0] and (tier.hits, tier.misses) == (1, 3)
    rows = store.measurements()
    assert [r["workload"] for r in rows] == ["short_long", "many_small", "rag_chat"]
    assert rows[1]["trial"] == rows[2]["trial"] != rows[0]["trial"] and all(r["sim_key"] for r in rows)
    assert tier.measure_all(EngineConfig(max_num_seqs=8), m, hw, [a])[0] != first[0]  # another config: measured


def test_a_new_store_gets_what_the_cache_already_had(tmp_path, monkeypatch):
    tier = sim_tier("0.26")
    args = (EngineConfig(), load_model("llama-3.2-1b"), load_hardware("l40s"), [load_workload("short_long")])
    monkeypatch.setenv("RSI_ENV_STORE", f"sqlite:///{tmp_path / 'a.sqlite'}")
    tier.measure_all(*args)
    tier.measure_all(*args)
    assert (tier.hits, tier.misses) == (1, 1)
    monkeypatch.setenv("RSI_ENV_STORE", f"sqlite:///{tmp_path / 'b.sqlite'}")
    tier.measure_all(*args)
    assert default_store().stats()["measurements"] == 1


def test_store_off_records_nothing_and_breaks_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RSI_ENV_STORE", "off")
    assert default_store() is None
    env = gym.make("RSI/KVCache-v0")
    env.reset(seed=77)
    _, _, _, _, info = env.step({"kind": 3})
    assert info["measurements"] == 1
    env.close()


def test_an_unwritable_store_warns_once_and_measurements_go_on(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("RSI_ENV_STORE", f"sqlite:///{blocker / 'x.sqlite'}")  # a path under a regular file
    env = gym.make("RSI/KVCache-v0")
    with pytest.warns(UserWarning, match="experience store could not") as caught:
        env.reset(seed=78)
        _, _, _, _, info = env.step({"kind": 3})
        env.step({"kind": 4})
        env.close()
    assert info["score"] is not None
    assert len([w for w in caught if "record measurements" in str(w.message)]) <= 1  # once, not per measurement


def test_export_import_round_trip(store, tmp_path):
    env = gym.make("RSI/KVCache-v0")
    env.reset(seed=4243)
    env.step({"kind": 3})
    env.step({"kind": 4})
    env.close()
    out = tmp_path / "exp.jsonl"
    counts = export_store(store, out)
    assert counts["measurement"] == len(store.measurements()) > 0 and counts["episode"] == 1
    other = ExperienceStore(str(tmp_path / "other.sqlite"))
    assert import_files(other, [out]) == counts
    assert import_files(other, [out]) == {"measurement": 0, "episode": 0, "calibration": 0}
    a = {r["uid"]: r for r in store.measurements()}
    b = {r["uid"]: r for r in other.measurements()}
    assert a.keys() == b.keys()
    for k in a:
        assert {c: v for c, v in a[k].items() if c != "id"} == {c: v for c, v in b[k].items() if c != "id"}
    pytest.importorskip("pyarrow")
    pq = tmp_path / "exp.parquet"
    assert export_store(store, pq) == counts
    third = ExperienceStore(str(tmp_path / "third.sqlite"))
    added = import_files(third, [pq, tmp_path / "exp.episodes.parquet"])
    assert added["measurement"] == counts["measurement"] and added["episode"] == 1
    assert {r["uid"]: r["telemetry"] for r in third.measurements()} == {k: v["telemetry"] for k, v in a.items()}


def test_best_configs_by_metric_and_by_task(store):
    env = gym.make("RSI/Batching-v0")
    rsi = env.unwrapped
    env.reset(seed=4244)
    for v in (64, 256, 512):
        env.step(rsi.flag_action("max_num_seqs", v))
    env.close()
    by_tput = best_configs(store, "llama-3.1-8b", "h200", workload="short_long")
    vals = [b["value"] for b in by_tput]
    assert vals == sorted(vals, reverse=True) and len(vals) == 4
    by_ttft = best_configs(store, "llama-3.1-8b", "h200", metric="ttft_p99")
    assert [b["value"] for b in by_ttft] == sorted(b["value"] for b in by_ttft)
    by_task = best_configs(store, "llama-3.1-8b", "h200", task=load_task("RSI/Batching-v0"))
    assert {json.dumps(b["config"]) for b in by_task} == {json.dumps(b["config"]) for b in by_tput}
    default = next(b for b in by_task if b["config"] == {})
    assert default["value"] == 0.0 and by_task[0]["value"] >= 0.0 and len(by_task[0]["workloads"]) == 2
    best_cfg = by_task[0]["config"]
    assert rsi.best_score == pytest.approx(by_task[0]["value"]) or best_cfg == {}


def test_demo_fills_the_default_store_and_stats_reports_it(store, capsys, tmp_path):
    assert main(["demo", "--budget", "6", "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"rsi-env demo: recording into the experience store {store.path}")  # said before it writes
    recorded = re.search(r"this run recorded (\d+) measurements and 1 episode in ", out)
    assert recorded and int(recorded.group(1)) >= 6, out
    assert main(["experience", "stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["measurements"] >= 6 and stats["episodes"] == 1 and stats["store"] == store.path
    assert stats["by_tier"]["sim"]["gpu_seconds"] > 0
    assert main(["experience", "best", "--model", "qwen2.5-7b", "--hardware", "l4", "--task", "RSI/KVCache-v0",
                 "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert best and math.isfinite(best[0]["value"])


def test_warm_start_starts_from_experience_and_replays(store):
    for hw in ("h200", "h100-sxm"):
        env = gym.make("RSI/Batching-v0", hardware=hw)
        rsi = env.unwrapped
        env.reset(seed=5)
        for v in (128, 256):
            env.step(rsi.flag_action("max_num_seqs", v))
        env.step(rsi.flag_action("max_num_batched_tokens", 512))
        env.close()
    env = gym.make("RSI/Batching-v0", hardware="a100-80gb", warm_start=True)
    rsi = env.unwrapped
    _, info = env.reset(seed=9)
    props = info["warm_start"]
    assert props and props[0]["config"] == rsi.config.to_dict(only_set=True) != {}
    assert set(props[0]["sources"]) <= {"llama-3.1-8b@h200", "llama-3.1-8b@h100-sxm"}
    assert rsi.baseline_config == EngineConfig()  # the reward still counts against vLLM's defaults
    env.step({"kind": 3})
    state = rsi.state()
    assert state["kwargs"]["warm_start"] == props[0]["config"]
    env.close()
    assert validate(state).ok
    cold = gym.make("RSI/Batching-v0", hardware="a100-80gb")
    _, info = cold.reset(seed=9)
    assert "warm_start" not in info and cold.unwrapped.config == EngineConfig()
    cold.close()


FAKE_DRIVER = '''#!/usr/bin/env python3
"""Stands in for rsi_env.real.vllm_driver: one result line per workload, as the real driver writes them."""
import json, sys, yaml
args = sys.argv[1:]
out = args[args.index("--out") + 1]
names = [yaml.safe_load(open(args[i + 1]))["name"] for i, a in enumerate(args) if a == "--workload"]
with open(out, "w") as f:
    for n in names:
        f.write(json.dumps({"workload": n, "telemetry": {"duration_s": 2.0, "out_tok_per_s": 100.0, "tier": "real"},
                            "resolved": {"num_gpu_blocks": 123}, "startup_s": 5.0, "wall_s": 2.0,
                            "counters": {"num_steps": 7}}) + "\\n")
'''


def test_the_recorded_real_tier_records_what_the_engine_reported(store, tmp_path):
    from rsi_env.real.tier import RealTier
    from rsi_env.store.recorded import Recorded

    driver = tmp_path / "fake-python"
    driver.write_text(FAKE_DRIVER)
    driver.chmod(0o755)
    tier = RealTier(python=str(driver), timeout_s=60)
    wls = [load_workload("short_long"), load_workload("many_small")]
    tier.measure_all({"max_num_seqs": 64}, "tiny-llama", "cpu", wls)
    assert store.measurements() == []  # the bare engine measures; recording is the wrapper's job
    tels = Recorded(tier).measure_all(EngineConfig(max_num_seqs=64), load_model("tiny-llama"), load_hardware("cpu"),
                                      wls)
    assert all(t.ok and t.tier == "real" for t in tels)
    rows = store.measurements()
    assert [r["workload"] for r in rows] == ["short_long", "many_small"] and {r["tier"] for r in rows} == {"real"}
    assert rows[0]["resolved"] == {"num_gpu_blocks": 123} and rows[0]["extra"]["startup_s"] == 5.0
    assert rows[0]["config"] == {"max_num_seqs": 64} and rows[0]["engine_version"] == tier.engine_version
    assert rows[0]["gpu_seconds"] > 0 and rows[0]["trial"] == rows[1]["trial"]  # the GPU time held, shared
