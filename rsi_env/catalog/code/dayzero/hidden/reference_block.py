"""Hidden reference forward of one decoder layer of every DayZero architecture (never shown to the agent).

The same contract as the workspace's ``block.py``: ``decoder_layer(x, positions, weights, config,
layer_idx) -> Tensor``. Run only in a fresh sandbox, by the same harness as the agent's block, so both
see the same weights and inputs; the env compares the two outputs. Follows Hugging Face's Qwen3
(QK-norm), ``_compute_yarn_parameters`` (YaRN), Gemma-style interleaved sliding windows, Qwen2-MoE
(shared expert with a sigmoid gate), Gemma 2 (attention logit soft-capping), GPT-NeoX and Phi (partial
rotary, ``rotary_dim``), gpt-oss (attention sinks), Llama 4 (NoPE layers) and DeepSeek-V3 (sigmoid
routing with a bias that only chooses, ``noaux_tc``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def inv_freq_and_scale(cfg: dict[str, Any], dim: int) -> tuple[torch.Tensor, float]:
    base = float(cfg.get("rope_theta", 10000.0))
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    rope = cfg.get("rope_scaling") or {}
    if rope.get("rope_type") != "yarn":
        return 1.0 / pos_freqs, 1.0
    factor = float(rope["factor"])
    orig = int(rope.get("original_max_position_embeddings") or cfg["max_position_embeddings"])
    beta_fast, beta_slow = float(rope.get("beta_fast", 32)), float(rope.get("beta_slow", 1))

    def corr(n: float) -> float:
        return dim * math.log(orig / (n * 2 * math.pi)) / (2 * math.log(base))

    low, high = float(max(math.floor(corr(beta_fast)), 0)), float(min(math.ceil(corr(beta_slow)), dim - 1))
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extra = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra
    return inv, 0.1 * math.log(factor) + 1.0


def rope(x: torch.Tensor, positions: torch.Tensor, cfg: dict[str, Any]) -> torch.Tensor:
    """Rotate-half RoPE on the first ``rotary_dim`` of ``x``'s channels ([T, heads, head_dim]; all by default)."""
    d = int(cfg.get("rotary_dim") or x.shape[-1])
    inv, scale = inv_freq_and_scale(cfg, d)
    ang = positions.to(torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :] * scale
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :] * scale
    rot, rest = x[..., :d], x[..., d:]
    x1, x2 = rot[..., : d // 2], rot[..., d // 2:]
    return torch.cat([rot * cos + torch.cat([-x2, x1], -1) * sin, rest], -1)


def is_nope(cfg: dict[str, Any], layer: int) -> bool:
    every = int(cfg.get("no_rope_layer_interval") or 0)
    return every > 0 and (layer + 1) % every == 0


def soft_cap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    return cap * torch.tanh(x / cap) if cap else x


def attention(x: torch.Tensor, positions: torch.Tensor, w: dict[str, torch.Tensor], cfg: dict[str, Any],
              layer: int) -> torch.Tensor:
    t = x.shape[0]
    nh, kvh = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    hd = int(cfg.get("head_dim") or cfg["hidden_size"] // nh)
    eps = float(cfg["rms_norm_eps"])
    q = (x @ w["self_attn.q_proj.weight"].T).view(t, nh, hd)
    k = (x @ w["self_attn.k_proj.weight"].T).view(t, kvh, hd)
    v = (x @ w["self_attn.v_proj.weight"].T).view(t, kvh, hd)
    if cfg.get("use_qk_norm"):
        q = rms_norm(q, w["self_attn.q_norm.weight"], eps)
        k = rms_norm(k, w["self_attn.k_norm.weight"], eps)
    if not is_nope(cfg, layer):
        q, k = rope(q, positions, cfg), rope(k, positions, cfg)
    k = k.repeat_interleave(nh // kvh, dim=1)
    v = v.repeat_interleave(nh // kvh, dim=1)
    scores = soft_cap(torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd), cfg.get("attn_logit_softcapping"))
    dist = positions[:, None] - positions[None, :]
    allowed = dist >= 0
    every = int(cfg.get("global_attention_every") or 0)
    if cfg.get("sliding_window") and every and (layer + 1) % every != 0:
        allowed &= dist < int(cfg["sliding_window"])
    scores = scores.masked_fill(~allowed[None], float("-inf"))
    if cfg.get("attention_sinks"):  # one more logit per head, with no value
        sink = w["self_attn.sinks"][:, None, None].expand(nh, t, 1)
        probs = torch.cat([scores, sink], -1).softmax(-1)[..., :-1]
    else:
        probs = scores.softmax(-1)
    out = torch.einsum("hqk,khd->qhd", probs, v).reshape(t, nh * hd)
    return out @ w["self_attn.o_proj.weight"].T


def swiglu(x: torch.Tensor, w: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    g = x @ w[f"{prefix}.gate_proj.weight"].T
    u = x @ w[f"{prefix}.up_proj.weight"].T
    return (F.silu(g) * u) @ w[f"{prefix}.down_proj.weight"].T


def mlp(x: torch.Tensor, w: dict[str, torch.Tensor], cfg: dict[str, Any], layer: int) -> torch.Tensor:
    experts = int(cfg.get("num_routed_experts") or 0)
    if not experts or layer < int(cfg.get("first_dense_layers") or 0):
        return swiglu(x, w, "mlp")
    logits = x @ w["mlp.gate.weight"].T
    k = int(cfg["experts_per_token"])
    probs = torch.sigmoid(logits) if cfg.get("scoring_func") == "sigmoid" else logits.softmax(-1)
    if cfg.get("topk_method") == "noaux_tc":  # the bias chooses; the unbiased affinities weigh
        top_i = (probs + w["mlp.gate.e_score_correction_bias"]).topk(k, dim=-1).indices
        top_p = probs.gather(-1, top_i)
    else:
        top_p, top_i = probs.topk(k, dim=-1)
    if cfg.get("norm_topk_prob"):
        top_p = top_p / top_p.sum(-1, keepdim=True)
    top_p = top_p * float(cfg.get("routed_scaling_factor", 1.0))
    out = torch.zeros_like(x)
    for e in range(experts):
        tok, slot = (top_i == e).nonzero(as_tuple=True)
        if tok.numel():
            out[tok] += top_p[tok, slot, None] * swiglu(x[tok], w, f"mlp.experts.{e}")
    if int(cfg.get("num_shared_experts") or 0):
        shared = swiglu(x, w, "mlp.shared_expert")
        if cfg.get("shared_expert_gate"):
            shared = torch.sigmoid(x @ w["mlp.shared_expert_gate.weight"].T) * shared
        out = out + shared
    return out


def decoder_layer(x: torch.Tensor, positions: torch.Tensor, weights: dict[str, torch.Tensor], config: dict[str, Any],
                  layer_idx: int) -> torch.Tensor:
    eps = float(config["rms_norm_eps"])
    h = x + attention(rms_norm(x, weights["input_layernorm.weight"], eps), positions, weights, config, layer_idx)
    return h + mlp(rms_norm(h, weights["post_attention_layernorm.weight"], eps), weights, config, layer_idx)
