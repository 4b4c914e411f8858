"""Hidden reference of RSI/DayZero-v0's loader and cost model (standard library only; never shown to the agent).

For each feature's config: the checkpoint's tensors and shapes (``weight_shapes``), the `ModelSpec`
fields the project's loader should produce (``spec_fields``), and the cost the simulator should charge:
``param_count`` (every tensor of the checkpoint), ``flops_per_token`` (one decode token at a context of
``c`` tokens) and ``kv_bytes`` (the KV cache a sequence of ``c`` tokens holds).

Conventions (stated to the agent in the workspace's ``spec.py``): FLOPs are 2 per multiply-add of the
matmuls (projections, MLPs and experts the token passes through, router, shared-expert gate, LM head)
plus attention's ``4 x num_heads x head_dim x attended`` per layer, where ``attended`` is the number of
keys the token sees (``min(c, sliding_window)`` on a sliding layer); norms, RoPE, soft-caps, sinks, the
router's bias and activations are free.
"""

from __future__ import annotations

import math
from typing import Any

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _dims(cfg: dict[str, Any]) -> tuple[int, int, int, int, int]:
    h, nh = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    kv = int(cfg.get("num_key_value_heads") or nh)
    hd = int(cfg.get("head_dim") or h // nh)
    return h, nh, kv, hd, int(cfg["num_hidden_layers"])


def is_sliding(cfg: dict[str, Any], layer: int) -> bool:
    every = int(cfg.get("global_attention_every") or 0)
    return bool(cfg.get("sliding_window")) and every > 0 and (layer + 1) % every != 0


def is_moe(cfg: dict[str, Any], layer: int) -> bool:
    return int(cfg.get("num_routed_experts") or 0) > 0 and layer >= int(cfg.get("first_dense_layers") or 0)


def layer_shapes(cfg: dict[str, Any], layer: int) -> dict[str, list[int]]:
    """The tensors of decoder layer ``layer``, named as in the checkpoint without ``model.layers.{i}.``."""
    h, nh, kv, hd, _ = _dims(cfg)
    out = {"input_layernorm.weight": [h], "self_attn.q_proj.weight": [nh * hd, h],
           "self_attn.k_proj.weight": [kv * hd, h], "self_attn.v_proj.weight": [kv * hd, h],
           "self_attn.o_proj.weight": [h, nh * hd], "post_attention_layernorm.weight": [h]}
    if cfg.get("use_qk_norm"):
        out["self_attn.q_norm.weight"] = [hd]
        out["self_attn.k_norm.weight"] = [hd]
    if cfg.get("attention_sinks"):
        out["self_attn.sinks"] = [nh]

    def mlp(prefix: str, inter: int) -> None:
        out[f"{prefix}.gate_proj.weight"] = [inter, h]
        out[f"{prefix}.up_proj.weight"] = [inter, h]
        out[f"{prefix}.down_proj.weight"] = [h, inter]

    if is_moe(cfg, layer):
        e, ei = int(cfg["num_routed_experts"]), int(cfg["expert_intermediate_size"])
        out["mlp.gate.weight"] = [e, h]
        if cfg.get("topk_method") == "noaux_tc":
            out["mlp.gate.e_score_correction_bias"] = [e]
        for j in range(e):
            mlp(f"mlp.experts.{j}", ei)
        if int(cfg.get("num_shared_experts") or 0):
            mlp("mlp.shared_expert", int(cfg["num_shared_experts"]) * ei)
            if cfg.get("shared_expert_gate"):
                out["mlp.shared_expert_gate.weight"] = [1, h]
    else:
        mlp("mlp", int(cfg["intermediate_size"]))
    return out


def weight_shapes(cfg: dict[str, Any]) -> dict[str, list[int]]:
    """Every tensor of the checkpoint, with its full name."""
    h, *_, layers = _dims(cfg)
    out = {"model.embed_tokens.weight": [int(cfg["vocab_size"]), h]}
    for i in range(layers):
        out.update({f"model.layers.{i}.{k}": v for k, v in layer_shapes(cfg, i).items()})
    out["model.norm.weight"] = [h]
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = [int(cfg["vocab_size"]), h]
    return out


def spec_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The `ModelSpec` fields (all but ``name`` and ``raw``) of this architecture."""
    h, nh, kv, hd, layers = _dims(cfg)
    rope = cfg.get("rope_scaling") or {}
    max_pos = int(cfg["max_position_embeddings"])
    if rope.get("rope_type") == "yarn":
        max_pos = int(int(rope.get("original_max_position_embeddings") or max_pos) * float(rope["factor"]))
    experts = int(cfg.get("num_routed_experts") or 0)
    window = int(cfg["sliding_window"]) if cfg.get("sliding_window") else None
    return {
        "architecture": cfg["architectures"][0], "num_layers": layers, "hidden_size": h, "num_heads": nh,
        "num_kv_heads": kv, "head_dim": hd, "intermediate_size": int(cfg["intermediate_size"]),
        "vocab_size": int(cfg["vocab_size"]), "max_position_embeddings": max_pos,
        "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "dtype_bytes": _DTYPE_BYTES[cfg.get("torch_dtype", "bfloat16")],
        "num_experts": experts, "num_experts_per_tok": int(cfg.get("experts_per_token") or 0),
        "moe_intermediate_size": int(cfg.get("expert_intermediate_size") or 0),
        "shared_expert_intermediate_size": int(cfg.get("num_shared_experts") or 0) * int(
            cfg.get("expert_intermediate_size") or 0),
        "num_moe_layers": sum(is_moe(cfg, i) for i in range(layers)),
        "sliding_window": window,
        "num_sliding_layers": sum(is_sliding(cfg, i) for i in range(layers)),
        "qk_norm": bool(cfg.get("use_qk_norm", False)),
        "rope_scaling_type": rope.get("rope_type"),
    }


def param_count(cfg: dict[str, Any]) -> int:
    return sum(math.prod(s) for s in weight_shapes(cfg).values())


def flops_per_token(cfg: dict[str, Any], context: int) -> int:
    h, nh, kv, hd, layers = _dims(cfg)
    total = 2 * int(cfg["vocab_size"]) * h  # LM head
    for i in range(layers):
        shapes = layer_shapes(cfg, i)
        attn = sum(math.prod(v) for k, v in shapes.items() if k.startswith("self_attn.") and k.endswith("proj.weight"))
        if is_moe(cfg, i):
            e, ei, k = int(cfg["num_routed_experts"]), int(cfg["expert_intermediate_size"]), int(
                cfg["experts_per_token"])
            mlp = e * h + k * 3 * h * ei + 3 * h * int(cfg.get("num_shared_experts") or 0) * ei
            mlp += h if cfg.get("shared_expert_gate") and cfg.get("num_shared_experts") else 0
        else:
            mlp = 3 * h * int(cfg["intermediate_size"])
        seen = min(context, int(cfg["sliding_window"])) if is_sliding(cfg, i) else context
        total += 2 * (attn + mlp) + 4 * nh * hd * seen
    return total


def kv_bytes(cfg: dict[str, Any], context: int) -> int:
    _, _, kv, hd, layers = _dims(cfg)
    b = _DTYPE_BYTES[cfg.get("torch_dtype", "bfloat16")]
    held = sum(min(context, int(cfg["sliding_window"])) if is_sliding(cfg, i) else context for i in range(layers))
    return 2 * kv * hd * b * held
