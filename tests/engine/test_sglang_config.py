"""SglangConfig: SGLang 0.5.17's flag names and defaults, its refusals in its own words, ladders it accepts."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_env.engine.config import FLAGS
from rsi_env.engine.sglang_config import RESOLVED_AT_START, SCHEDULE_POLICIES, SGLANG_FLAGS, SglangConfig
from rsi_env.errors import InvalidConfigError

ISSUE_FLAGS = ["max_running_requests", "chunked_prefill_size", "max_prefill_tokens", "mem_fraction_static",
               "disable_radix_cache", "schedule_policy", "schedule_conservativeness", "kv_cache_dtype", "page_size",
               "cuda_graph_max_bs", "tp_size", "dp_size"]


def test_the_flags_are_sglangs_and_every_one_has_a_ladder_shaped_like_vllms():
    assert [f.name for f in dataclasses.fields(SglangConfig)] == ISSUE_FLAGS == list(SGLANG_FLAGS)
    assert {type(s) for s in SGLANG_FLAGS.values()} == {type(next(iter(FLAGS.values())))}
    assert all(len(s.ladder) >= 2 for s in SGLANG_FLAGS.values())


def test_defaults_are_sglangs_and_the_device_dependent_ones_are_left_to_the_engine():
    cfg = SglangConfig()
    # ServerArgs' fixed defaults (server_args.py, SGLang 0.5.17).
    assert (cfg.max_prefill_tokens, cfg.disable_radix_cache, cfg.schedule_policy, cfg.schedule_conservativeness,
            cfg.kv_cache_dtype, cfg.tp_size, cfg.dp_size) == (16384, False, "fcfs", 1.0, "auto", 1, 1)
    unset = {k for k, v in cfg.to_dict().items() if v is None}
    assert unset == set(RESOLVED_AT_START)  # exactly the ones SGLang resolves at start, each with how it does
    assert cfg.to_dict(only_set=True) == {} and cfg.num_gpus == 1
    assert SglangConfig(tp_size=2, dp_size=4).num_gpus == 8


@pytest.mark.parametrize("raw, words", [
    ({"schedule_policy": "priority"}, "Unknown schedule_policy: policy='priority'"),
    ({"schedule_policy": "sjf"}, "Unknown schedule_policy: policy='sjf'"),
    ({"kv_cache_dtype": "int8"}, "Unsupported kv_cache_dtype: int8."),
    ({"kv_cache_dtype": "fp4_e2m1"}, "--kv-cache-dtype=fp4_e2m1 is deprecated"),
    ({"schedule_conservativeness": -0.5}, "schedule_conservativeness must be non-negative"),
    ({"page_size": 0}, "page_size must be >= 1, got 0"),
    ({"chunked_prefill_size": 1000, "page_size": 64}, "chunked_prefill_size must be divisible by page_size"),
    ({"mem_fraction_static": 1.2}, "allowed: a float in (0, 1)"),
    ({"mem_fraction_static": 0.0}, "allowed: a float in (0, 1)"),
    ({"max_running_requests": 0}, "expected int in [1, 65536]"),
    ({"tp_size": 1.5}, "expected int in [1, 64]"),
    ({"disable_radix_cache": "yes"}, "expected true or false"),
    ({"max_runing_requests": 8}, "ServerArgs.__init__() got an unexpected keyword argument 'max_runing_requests'; "
                                 "did you mean ['max_running_requests']?"),
    ({"max_num_seqs": 8}, "unexpected keyword argument 'max_num_seqs'"),
])
def test_refusals_name_the_flag_in_sglangs_words(raw, words):
    with pytest.raises(InvalidConfigError) as exc:
        SglangConfig.from_dict(raw)
    assert words in str(exc.value)
    assert exc.value.field in raw


def test_a_flag_with_a_fixed_default_cannot_be_unset_and_replace_validates():
    with pytest.raises(InvalidConfigError, match="cannot be unset"):
        SglangConfig(tp_size=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="Unknown schedule_policy"):
        SglangConfig().replace(schedule_policy="priority")
    with pytest.raises(InvalidConfigError, match="unexpected keyword argument 'bogus'"):
        SglangConfig().replace(bogus=1)
    assert SglangConfig().replace(schedule_policy="lpm").to_dict(only_set=True) == {"schedule_policy": "lpm"}


def test_every_size_sglang_reads_as_no_chunked_prefill_is_one_value():
    assert {SglangConfig(chunked_prefill_size=v).chunked_prefill_size for v in (-1, 0, -8, -1.0)} == {-1}
    assert SglangConfig(chunked_prefill_size=-1, page_size=64).chunked_prefill_size == -1  # off: no divisibility
    assert SglangConfig(chunked_prefill_size=4096.0).chunked_prefill_size == 4096


def test_every_policy_the_scheduler_runs_is_accepted():
    assert all(SglangConfig(schedule_policy=p).schedule_policy == p for p in SCHEDULE_POLICIES)


@given(st.sampled_from([(name, v) for name, s in SGLANG_FLAGS.items() for v in s.ladder]))
def test_every_ladder_value_validates_and_round_trips(flag_value):
    name, value = flag_value
    cfg = SglangConfig.from_dict({name: value})
    assert getattr(cfg, name) == value
    assert SglangConfig.from_dict(cfg.to_dict()) == cfg


@settings(max_examples=300)
@given(st.fixed_dictionaries({name: st.sampled_from(s.ladder) for name, s in SGLANG_FLAGS.items()}))
def test_every_combination_of_rungs_is_a_configuration_sglang_accepts(rungs):
    assert SglangConfig.from_dict(rungs).to_dict() == rungs
