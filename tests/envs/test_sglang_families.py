"""The flag families with ``engine="sglang"``: SGLang's flags, defaults and refusals, measured on SGLang's simulator.

Each SGLang setting passes Gymnasium's checker; a flag step reaches the SGLang sim and moves its measurement; an
invalid value is refused in SGLang's words and the episode goes on; SGLang's defaults do not pass submit, a tuned
configuration does. Then the attacks an agent could try for reward without the work: switch the engine under the
env, set flags the family does not own (vLLM's, or SGLang's outside the family), exceed the co-tenant's memory cap
or change the precision through ``serving.yaml``, or leave a better ``serving.yaml`` that no check re-validates.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rsi_env  # noqa: F401  (registers RSI/*)
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.sglang_config import SglangConfig
from rsi_env.envs.state import validate
from rsi_env.errors import CatalogError, RsiEnvError
from rsi_env.sim.sglang import SGLANG_SIM_VERSION, simulate_sglang
from rsi_env.sim.sglang.simulate import sglang_calibration

FAMILIES = ["RSI/Batching-v0", "RSI/KVCache-v1", "RSI/KVCache-v0", "RSI/PrefixCache-v0", "RSI/Parallelism-v0"]


def _make(task: str, **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # KVCache-v0's "out of date" notice
        return gym.make(task, **{"engine": "sglang", "sandbox": "bubblewrap", **kw}).unwrapped


def _edit_serving(env: Any, text: str) -> tuple[dict[str, Any], float, dict[str, Any]]:
    obs, reward, _, _, info = env.step({"kind": 1, "path": "serving.yaml", "old": "", "new": text})
    return obs, reward, info


@pytest.mark.parametrize("task", FAMILIES)
def test_gymnasium_s_checker_passes_each_sglang_setting(task: str) -> None:
    env = _make(task)
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.parametrize("task", FAMILIES)
def test_the_env_tunes_sglang_s_flags_from_sglang_s_defaults(task: str) -> None:
    env = _make(task)
    obs, info = env.reset(seed=0)
    assert env.tier.engine_version == SGLANG_SIM_VERSION
    assert isinstance(env.config, SglangConfig) and env.config == SglangConfig.from_dict(env.task.start)
    assert set(env.flag_names) <= set(SglangConfig().to_dict())
    serving = env.workspace.read("serving.yaml")
    assert serving.startswith(f"# Engine flags of {task} (SGLang names). null = SGLang's default.")
    assert [line.split(":")[0] for line in serving.splitlines()[1:]] == list(env.flag_names)
    assert "SGLang's defaults" in env.workspace.read("TASK.md")
    assert all(t.ok for t in env.base_tels), obs["text"]
    assert env.state()["kwargs"]["engine"] == "sglang"
    assert env.state()["kwargs"]["engine_version"] == SGLANG_SIM_VERSION
    env.close()


def test_a_flag_step_reaches_the_sglang_sim_and_moves_its_measurement() -> None:
    env = _make("RSI/Batching-v0")
    env.reset(seed=0)
    base = env.base_tels
    obs, reward, _, _, info = env.step(env.flag_action("max_running_requests", 64))
    assert env.config == SglangConfig(max_running_requests=64)
    want = [simulate_sglang(SglangConfig(max_running_requests=64), env.model, env.hardware, w)
            for w in env.workloads]
    assert [t["out_tok_per_s"] for t in info["telemetry"]] == [t.out_tok_per_s for t in want]
    assert [t.out_tok_per_s for t in want] != [t.out_tok_per_s for t in base]
    assert info["score"] > 0 and reward > 0  # a new best pays
    assert "max_running_requests: 64" in env.workspace.read("serving.yaml")
    assert obs["config"][env.flag_names.index("max_running_requests")] == pytest.approx(3 / 8)
    env.close()


def test_submit_from_sglang_s_defaults_fails_the_improvement_bar_and_a_tuned_one_passes() -> None:
    env = _make("RSI/Batching-v0")
    env.reset(seed=0)
    _, _, term, _, info = env.step({"kind": 4})
    assert term and info["verdict"]["passed"] is False and info["verdict"]["guards"]["improvement"] is False
    env.reset(seed=0)
    env.step(env.flag_action("max_running_requests", 64))  # SGLang's default runs too many: TPOT p99 over 25 ms
    _, reward, term, _, info = env.step({"kind": 4})
    assert term and info["verdict"]["passed"] is True, env.text
    assert reward >= 1.0
    env.close()


@pytest.mark.parametrize(("text", "words"), [
    ("schedule_policy: priority\n", "Unknown schedule_policy: policy='priority'"),
    ("page_size: 0\n", "page_size must be >= 1"),
    ("page_size: 64\nchunked_prefill_size: 1000\n", "chunked_prefill_size must be divisible by page_size"),
    ("mem_fraction_static: 1.5\n", "mem_fraction_static is the fraction of the device's memory"),
])
def test_an_invalid_sglang_value_is_refused_in_sglang_s_words_and_the_episode_goes_on(text: str, words: str) -> None:
    env = _make("RSI/PrefixCache-v0")
    env.reset(seed=0)
    before = env.config
    obs, reward, _ = _edit_serving(env, text)
    assert words in obs["text"] and "restored the configuration in force" in obs["text"]
    assert env.config == before and reward == 0.0
    assert "schedule_policy: fcfs" in env.workspace.read("serving.yaml")  # the file is the configuration in force
    obs, _, _, _, info = env.step(env.flag_action("schedule_policy", "lpm"))
    assert env.config.schedule_policy == "lpm" and info["score"] is not None
    env.close()


def test_parallelism_says_the_sglang_sim_refuses_dp_size_over_one() -> None:
    env = _make("RSI/Parallelism-v0")
    env.reset(seed=0)
    obs, _, _, _, _ = env.step(env.flag_action("dp_size", 2))  # tp 8 x dp 2: more GPUs than the task has
    assert "tp_size*dp_size=16 is not allowed: expected at most num_gpus=8" in obs["text"]
    env.step(env.flag_action("tp_size", 4))
    obs, _, _, _, info = env.step(env.flag_action("dp_size", 2))
    assert "dp_size > 1 is not modelled yet" in obs["text"] and info["score"] == -math.inf
    obs, _, _, _, info = env.step(env.flag_action("dp_size", 1))
    assert env.config == SglangConfig(tp_size=4) and "ERROR" not in obs["text"]  # measured (goodput 0 on
    # long_context at tp 4: its cost per good token is infinite, as it is on vLLM)
    env.close()


# ---- the engine is the env's, fixed for its life ----------------------------------------------------------------
def test_an_engine_release_of_the_other_engine_is_refused() -> None:
    with pytest.raises(RsiEnvError, match="not a SGLang release"):
        _make("RSI/Batching-v0", engine_version="0.26")
    with warnings.catch_warnings(), pytest.raises(RsiEnvError, match="not a vLLM release"):
        warnings.simplefilter("ignore")
        gym.make("RSI/Batching-v0", engine_version=SGLANG_SIM_VERSION, sandbox="bubblewrap")
    with pytest.raises(RsiEnvError, match="engine must be one of"):
        _make("RSI/Batching-v0", engine="tensorrt")


def test_a_family_without_an_sglang_setting_and_a_variant_refuse_it() -> None:
    with pytest.raises(CatalogError, match="has no SGLang setting"):
        _make("RSI/Quantization-v0")
    with pytest.raises(CatalogError, match="default setting only"):
        _make("RSI/KVCache-v1", variant="l4")
    with pytest.raises(RsiEnvError, match="runs on the sim tier"):  # an L4: none to run it on
        _make("RSI/KVCache-v0", tier="real")
    with pytest.raises(RsiEnvError, match="sim tier only"):
        _make("RSI/KVCache-v0", promote_on_submit=True)


def test_the_real_tier_and_promotion_run_sglang() -> None:
    """On real, the env measures the installed SGLang (none here: the baseline's error says so, in SGLang's
    terms); promotion's real tier is SGLang's, never vLLM's (which would run SGLang's flags as its own)."""
    env = _make("RSI/Batching-v0", tier="real")
    assert env.tier.engine_version == "none" or env.tier.engine_version.startswith("sglang-")
    env.reset(seed=0)
    errors = [t.error for t in env.base_tels]
    assert all(e and "SGLang is not installed" in e for e in errors), errors
    env.close()
    promoted = _make("RSI/Batching-v0", promote_on_submit=True)
    assert promoted.promoter is not None and promoted.promoter.tier.engine == "sglang"
    promoted.close()


# What serving.yaml may not carry into an SGLang Batching env: the engine or release switched, vLLM's flags, and
# SGLang's flags the family does not own.
_FOREIGN_SERVING = ("engine: vllm\n", "engine_version: '0.26'\n", "max_num_seqs: 64\n",
                    "max_running_requests: 64\nmax_num_batched_tokens: 8192\n",
                    "mem_fraction_static: 0.95\n", "disable_radix_cache: true\n", "tp_size: 2\n",
                    "kv_cache_dtype: fp8_e4m3\n")


def test_serving_yaml_cannot_switch_the_engine_or_set_flags_outside_the_family() -> None:
    env = _make("RSI/Batching-v0")
    env.reset(seed=0)
    for text in _FOREIGN_SERVING:
        obs, reward, _ = _edit_serving(env, text)
        assert "not tunable in RSI/Batching-v0" in obs["text"] and reward == 0.0, text
        assert env.config == SglangConfig()
    assert env.tier.engine_version == SGLANG_SIM_VERSION
    env.close()


def test_the_sims_calibration_terms_cannot_be_set_from_serving_yaml() -> None:
    """An agent that writes the cost model's coefficients (a shared prefix's KV read for free, weights streamed at
    the datasheet's bandwidth) gets a refusal and no reward, and the next measurement is priced as shipped."""
    env = _make("RSI/Batching-v0")
    env.reset(seed=0)
    shipped = sglang_calibration(env.hardware.name)
    assert shipped.kv_shared_read < 1.0  # 1.0 would read every shared prefix for free
    for text in ("kv_shared_read: 1.0\n", "bw_eff: 1.0\nkv_shared_read: 1.0\nmax_running_requests: 64\n"):
        obs, reward, _ = _edit_serving(env, text)
        assert "kv_shared_read" in obs["text"] and "not tunable in RSI/Batching-v0" in obs["text"], text
        assert reward == 0.0 and env.config == SglangConfig()
    _, _, _, _, info = env.step(env.flag_action("max_running_requests", 64))
    want = [simulate_sglang(SglangConfig(max_running_requests=64), env.model, env.hardware, w, calibration=shipped)
            for w in env.workloads]
    assert [t["out_tok_per_s"] for t in info["telemetry"]] == [t.out_tok_per_s for t in want]
    assert all(t.calibration == shipped.id for t in env.base_tels)
    env.close()


def test_a_vllm_configuration_never_lands_in_an_sglang_env() -> None:
    env = _make("RSI/Batching-v0")
    env.reset(seed=0)
    with pytest.raises(RsiEnvError, match="tunes SGLang's flags, not a EngineConfig"):
        env.check_config(EngineConfig(max_num_seqs=64))
    with pytest.raises(RsiEnvError, match="unexpected keyword argument 'max_num_seqs'"):
        _make("RSI/Batching-v0", warm_start={"max_num_seqs": 64}).reset(seed=0)
    env.close()


def test_the_co_tenant_s_memory_cap_binds_serving_yaml_too() -> None:
    env = _make("RSI/KVCache-v1")
    env.reset(seed=0)
    obs, reward, _ = _edit_serving(env, "mem_fraction_static: 0.9\n")
    assert "mem_fraction_static=0.9 is not allowed" in obs["text"] and "at most 0.3" in obs["text"]
    assert env.config.mem_fraction_static == 0.25 and reward == 0.0
    obs, _, _ = _edit_serving(env, "mem_fraction_static: 0.3\n")  # the cap itself is allowed
    assert env.config.mem_fraction_static == 0.3
    env.close()


def test_the_fixed_precision_cannot_be_changed_through_serving_yaml() -> None:
    env = _make("RSI/KVCache-v1")
    obs, _ = env.reset(seed=0)
    assert obs["flag_mask"][env.flag_names.index("kv_cache_dtype")] == 0
    obs, _, _ = _edit_serving(env, "kv_cache_dtype: fp8_e4m3\n")
    assert "fixed: this task keeps the model's precision" in obs["text"] and env.config.kv_cache_dtype == "auto"
    env.close()


def test_a_serving_yaml_written_around_the_edit_action_is_not_what_submit_judges() -> None:
    # The workspace file is the agent's to write (a shell command can): submit judges the configuration in force.
    env = _make("RSI/Batching-v0")
    env.reset(seed=0)
    env.workspace.write("serving.yaml", "max_running_requests: 64\n")
    _, _, term, _, info = env.step({"kind": 4})
    assert term and info["config"] == {} and info["verdict"]["passed"] is False
    env.close()


def test_an_sglang_episode_replays_on_sglang_and_a_vllm_state_names_no_engine() -> None:
    env = _make("RSI/Batching-v0")
    env.reset(seed=0)
    env.step(env.flag_action("max_running_requests", 64))
    env.step({"kind": 4})
    state = env.state()
    env.close()
    assert validate(state, trusted=True).ok
    assert not validate({**state, "kwargs": {**state["kwargs"], "engine": "vllm"}}, trusted=True).ok
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vllm = gym.make("RSI/Batching-v0", sandbox="bubblewrap").unwrapped
    vllm.reset(seed=0)
    assert "engine" not in vllm.state()["kwargs"] and vllm.state()["kwargs"]["engine_version"] == "0.26"
    assert isinstance(vllm.config, EngineConfig) and vllm.tier.engine_version == "0.26"
    vllm.close()


@pytest.mark.parametrize("task", FAMILIES)
def test_the_sglang_section_leaves_the_vllm_task_as_it_was(task: str) -> None:
    from dataclasses import replace

    from rsi_env.engine.task import Task, _raw, load_task

    raw = {k: v for k, v in _raw()[task].items() if k != "engines"}
    assert load_task(task) == replace(Task.from_dict(raw), engines=("vllm", "sglang"))


@pytest.mark.parametrize("view", ["DiscreteFlagMoves", "DirectSetting"])
def test_the_rl_views_move_along_sglang_s_ladders(view: str) -> None:
    import rsi_env.wrappers as wrappers

    env = getattr(wrappers, view)(_make("RSI/Batching-v0"))
    env.reset(seed=0)
    rsi = env.unwrapped
    for _ in range(4):
        _, _, term, _, _ = env.step(env.action_space.sample())
        if term:  # a sampled submit ends the episode
            env.reset(seed=0)
        assert isinstance(rsi.config, SglangConfig)
        assert set(rsi.config.to_dict(only_set=True)) <= set(rsi.flag_names)
        assert all(rsi.config.to_dict()[f] in rsi.task.ladder(f) or rsi.config.to_dict()[f] is None
                   for f in rsi.flag_names)
    env.close()


@pytest.mark.parametrize("task", FAMILIES)
def test_the_spec_sheet_names_the_sglang_flags(task: str) -> None:
    env = _make(task)
    doc = " ".join((type(env).__doc__ or "").split())
    assert 'engine="sglang"' in doc and all(f"``{f}``" in doc for f in env.flag_names)
    env.close()


def test_warm_starts_read_only_their_own_engine_s_rows() -> None:
    env = _make("RSI/Batching-v0")
    env.reset(seed=0)
    env.step(env.flag_action("max_running_requests", 64))
    env.step({"kind": 4})
    env.close()
    sglang = _make("RSI/Batching-v0", warm_start=True)
    _, info = sglang.reset(seed=0)
    assert info["warm_start"] and isinstance(sglang.config, SglangConfig)
    assert all(set(p["config"]) <= set(sglang.flag_names) for p in info["warm_start"])
    sglang.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vllm = gym.make("RSI/Batching-v0", sandbox="bubblewrap", warm_start=True).unwrapped
    _, info = vllm.reset(seed=0)
    assert isinstance(vllm.config, EngineConfig)
    assert not any(set(p["config"]) & set(SglangConfig().to_dict()) - {"kv_cache_dtype"} for p in info["warm_start"])
    vllm.close()


_ACTIONS = st.lists(st.one_of(
    st.builds(lambda f, v: {"kind": 0, "flag": f, "value": v}, st.integers(0, 4), st.floats(0.0, 1.0)),
    st.builds(lambda text: {"kind": 1, "path": "serving.yaml", "old": "", "new": text},
              st.sampled_from(["max_num_seqs: 64\n", "mem_fraction_static: 0.9\n", "schedule_conservativeness: -1\n",
                               "max_running_requests: 0\n", "chunked_prefill_size: 4096\n", "engine: vllm\n",
                               "cuda_graph_max_bs: 64\nmax_prefill_tokens: 8192\n", "[1, 2]\n"]))), max_size=6)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=_ACTIONS)
def test_any_actions_leave_an_sglang_config_of_the_family_s_flags_and_replay(actions: list[dict[str, Any]]) -> None:
    env = _make("RSI/Batching-v0")
    env.reset(seed=0)
    for a in actions:
        env.step(a)
        assert isinstance(env.config, SglangConfig)
        assert set(env.config.to_dict(only_set=True)) <= set(env.flag_names)
        env.check_config(env.config)  # what is in force is what the env would accept
    state = env.state()
    env.close()
    assert validate(state, trusted=True).ok
