"""SGLang's simulator behind the `Tier` seam: cached, recorded once, and never mistaken for a vLLM release's."""

from __future__ import annotations

import pytest

from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.sglang_config import SglangConfig
from rsi_env.engine.task import load_task
from rsi_env.engine.workload import load_workload
from rsi_env.envs.measure import get_tier, sim_tier
from rsi_env.errors import RsiEnvError
from rsi_env.sim.calibration import load_calibration
from rsi_env.sim.sglang import SGLANG_SIM_VERSION, SglangSimTier, simulate_sglang
from rsi_env.store.record import default_store
from rsi_env.store.warm_start import propose


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("RSI_ENV_STORE", f"sqlite:///{tmp_path / 'exp.sqlite'}")
    st = default_store()
    assert st is not None
    return st


def test_the_sglang_sim_tier_measures_what_simulate_sglang_does_and_the_store_keeps_it_once(store):
    tier = sim_tier(SGLANG_SIM_VERSION)
    m, hw = load_model("llama-3.2-1b"), load_hardware("h200")
    a, b = load_workload("many_small"), load_workload("shared_prefix_chat")
    cfg = SglangConfig(schedule_policy="lpm", chunked_prefill_size=2048)
    first = tier.measure_all(cfg, m, hw, [a, b])
    assert first == [simulate_sglang(cfg, m, hw, w) for w in (a, b)]
    assert tier.measure_all(cfg, m, hw, [b]) == [first[1]] and (tier.hits, tier.misses) == (1, 2)
    assert tier.measure_all(SglangConfig(schedule_policy="fcfs"), m, hw, [b])[0] != first[1]  # another config
    rows = store.measurements()
    assert len(rows) == 3 and {r["engine_version"] for r in rows} == {SGLANG_SIM_VERSION}
    assert rows[0]["config"] == {"schedule_policy": "lpm", "chunked_prefill_size": 2048} and all(r["sim_key"] for r in rows)


def test_the_engine_version_picks_the_engine_and_sglang_rows_never_warm_start_vllm(store):
    assert SGLANG_SIM_VERSION.startswith("sglang-")
    assert isinstance(get_tier("sim", SGLANG_SIM_VERSION).tier.tier, SglangSimTier)  # Cached(Recorded(sim))
    assert not isinstance(get_tier("sim", "0.26").tier.tier, SglangSimTier)
    assert get_tier("real", SGLANG_SIM_VERSION).tier.engine == "sglang"  # Recorded(RealTier(engine="sglang"))
    assert get_tier("real", "0.26").tier.engine == "vllm"
    m, hw, w = load_model("llama-3.2-1b"), load_hardware("h200"), load_workload("many_small")
    sim_tier(SGLANG_SIM_VERSION).measure_all(SglangConfig(max_running_requests=64), m, hw, [w])
    assert len(store.measurements()) == 1
    # vLLM had 0.5.x releases: a warm start for one must not read SGLang 0.5.17's rows.
    assert propose(store, load_task("RSI/Batching-v0"), m, hw, [w], engine_version="0.5") == []


def test_a_vllm_config_is_refused_in_sglangs_words():
    tier = SglangSimTier()
    [tel] = tier.measure_all({"max_num_seqs": 8}, load_model("llama-3.2-1b"), load_hardware("h200"),  # type: ignore[arg-type]
                             [load_workload("many_small")])
    assert tel.error is not None and "unexpected keyword argument 'max_num_seqs'" in tel.error


def test_the_tier_prices_with_sglangs_own_calibration_where_the_chip_has_one(store):
    """On h100-sxm SGLang's fit prices the passes, in the tier as in simulate_sglang, and keys its cache."""
    tier, fitted = SglangSimTier(), load_calibration("h100-sxm", SGLANG_SIM_VERSION)
    m, hw, w = load_model("llama-3.1-8b"), load_hardware("h100-sxm"), load_workload("many_small")
    assert fitted.id.startswith("h100-sxm-sglang-") and tier.calibration(hw).id == fitted.id
    [tel] = tier.measure_all({}, m, hw, [w])
    assert tel.calibration == fitted.id and tel == simulate_sglang({}, m, hw, w)
    assert fitted.id in tier.key({}, m, hw, w)


def test_an_sglang_release_the_sim_does_not_model_is_refused():
    with pytest.raises(RsiEnvError, match="models sglang-0.5.17 only"):
        sim_tier("sglang-0.4.0")
