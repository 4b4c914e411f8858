"""The project's loader and cost model for the new architecture (edit me).

rsi-env's `ModelSpec` (rsi_env/engine/model.py) is what the simulator prices; it does not know this
architecture's config keys yet. Four functions, each given a config.json as a dict (the full model's,
``config.json``, and the tiny one's, ``tiny/config.json``); they run in a fresh sandbox, standard library only.

- ``spec_fields(config) -> dict``: the `ModelSpec` fields (every dataclass field but ``name`` and ``raw``;
  fields left out take their defaults). The env builds the ModelSpec from them and simulates serving it.
- ``param_count(config) -> int``: the number of parameters in the checkpoint (every tensor, norms included).
- ``flops_per_token(config, context_tokens) -> int``: forward FLOPs of one decode token that attends to a
  context of ``context_tokens`` tokens (itself included): 2 per multiply-add of every matmul the token passes
  through (projections, MLP or the experts it is routed to, router, gates, LM head), plus
  ``4 x num_heads x head_dim x keys_seen`` per layer for attention; norms, RoPE and activations are free.
- ``kv_bytes(config, context_tokens) -> int``: bytes of KV cache one sequence of ``context_tokens`` tokens
  holds (K and V, every layer, at the model's dtype).

This starts as a plain Llama loader; the new architecture (see MODEL.md) differs from it.
"""

from __future__ import annotations

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _shape(config):
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    return hidden, heads, kv_heads, head_dim, config["num_hidden_layers"]


def spec_fields(config):
    hidden, heads, kv_heads, head_dim, layers = _shape(config)
    return {
        "architecture": config["architectures"][0],
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": config["intermediate_size"],
        "vocab_size": config["vocab_size"],
        "max_position_embeddings": config["max_position_embeddings"],
        "tie_word_embeddings": config.get("tie_word_embeddings", False),
        "dtype_bytes": DTYPE_BYTES[config.get("torch_dtype", "bfloat16")],
    }


def _layer_matmul_params(config):
    hidden, heads, kv_heads, head_dim, _ = _shape(config)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    return attention + 3 * hidden * config["intermediate_size"]


def param_count(config):
    hidden, _, _, _, layers = _shape(config)
    embeddings = config["vocab_size"] * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    norms = layers * 2 * hidden + hidden
    return embeddings + norms + layers * _layer_matmul_params(config)


def flops_per_token(config, context_tokens):
    hidden, heads, _, head_dim, layers = _shape(config)
    per_layer = 2 * _layer_matmul_params(config) + 4 * heads * head_dim * context_tokens
    return layers * per_layer + 2 * config["vocab_size"] * hidden


def kv_bytes(config, context_tokens):
    _, _, kv_heads, head_dim, layers = _shape(config)
    return 2 * kv_heads * head_dim * DTYPE_BYTES[config.get("torch_dtype", "bfloat16")] * layers * context_tokens
