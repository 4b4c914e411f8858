"""ModelSpec: read any config.json; parameter counts and KV bytes that match the published models."""

from __future__ import annotations

import json

import pytest

from rsi_env.engine import ModelSpec, list_models, load_model
from rsi_env.errors import CatalogError, ModelSpecError


@pytest.mark.parametrize("mid, total_b, active_b", [
    ("llama-3.1-8b", 8.03, 8.03),
    ("llama-3.1-70b", 70.55, 70.55),
    ("llama-3.2-1b", 1.24, 1.24),
    ("qwen2.5-7b", 7.62, 7.62),
    ("qwen3-30b-a3b", 30.5, 3.3),
])
def test_parameter_counts_match_the_model_cards(mid, total_b, active_b):
    m = load_model(mid)
    assert m.total_params / 1e9 == pytest.approx(total_b, rel=0.02)
    active = (m.active_layer_params + m.embedding_params + (0 if m.tie_word_embeddings else m.lm_head_params))
    assert active / 1e9 == pytest.approx(active_b, rel=0.1)


def test_architecture_features():
    assert load_model("llama-3.1-8b").kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2  # GQA: 8 KV heads
    assert load_model("llama-3.1-8b").kv_bytes_per_token(1) == 2 * 32 * 8 * 128  # fp8 KV cache
    assert load_model("llama-3.2-1b").tie_word_embeddings
    assert load_model("mistral-7b").sliding_window == 4096
    assert load_model("qwen2.5-7b").sliding_window is None  # use_sliding_window: false
    moe = load_model("qwen3-30b-a3b")
    assert moe.is_moe and moe.num_moe_layers == 48 and moe.num_experts_per_tok == 8 and moe.qk_norm
    assert {"tiny-llama", "llama-3.1-8b", "qwen3-30b-a3b", "mistral-7b"} <= set(list_models())


def test_any_config_json_and_nested_text_config(tmp_path):
    cfg = {"architectures": ["NewForCausalLM"], "hidden_size": 512, "num_hidden_layers": 4,
           "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 1024,
           "max_position_embeddings": 4096, "layer_types": ["sliding_attention", "full_attention"] * 2,
           "sliding_window": 512}
    p = tmp_path / "new-model" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(cfg))
    m = load_model(p.parent)
    assert m.name == "new-model" and m.head_dim == 64 and m.num_sliding_layers == 2
    wrapped = ModelSpec.from_hf_config({"architectures": ["X"], "text_config": cfg})
    assert wrapped.hidden_size == 512


def test_bad_configs_are_refused_clearly(tmp_path):
    with pytest.raises(ModelSpecError, match=r"missing \['num_attention_heads'"):
        ModelSpec.from_hf_config({"hidden_size": 8, "num_hidden_layers": 1, "vocab_size": 10})
    with pytest.raises(ModelSpecError, match="multiple of num_key_value_heads"):
        ModelSpec.from_hf_config({"hidden_size": 8, "num_hidden_layers": 1, "vocab_size": 10,
                                  "num_attention_heads": 3, "num_key_value_heads": 2})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ModelSpecError, match="not valid JSON"):
        load_model(bad)
    with pytest.raises(CatalogError, match="unknown model 'gpt-9'"):
        load_model("gpt-9")
