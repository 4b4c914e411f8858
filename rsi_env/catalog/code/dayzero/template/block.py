"""PyTorch reference forward of ONE decoder layer of the new architecture (edit me).

The hidden checks call ``decoder_layer`` on the tiny model (``tiny/config.json``; its tensors and shapes
are listed in ``tiny/weights.json``) with seeded random float64 weights and inputs, and compare the
output with a hidden reference implementation.

    decoder_layer(x, positions, weights, config, layer_idx) -> Tensor
      x          float64 [T, hidden_size]: one sequence's hidden states entering layer ``layer_idx``
      positions  int64 [T]: their positions (consecutive, not necessarily starting at 0)
      weights    {name: float64 Tensor}: this layer's tensors, named as in the checkpoint without the
                 ``model.layers.{layer_idx}.`` prefix (e.g. ``self_attn.q_proj.weight``)
      config     the tiny model's config.json, as a dict
      returns    float64 [T, hidden_size]: the layer's output (causal attention within the sequence)

This starts as a plain Llama layer (pre-norm RMSNorm, grouped-query attention with rotary embeddings,
SwiGLU MLP); the new architecture (see MODEL.md) differs from it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotary(x, positions, theta):
    """Rotate-half rotary embedding of x [T, heads, head_dim]."""
    dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([angles.cos()] * 2, -1)[:, None, :]
    sin = torch.cat([angles.sin()] * 2, -1)[:, None, :]
    half = dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def self_attention(x, positions, w, config, layer_idx):
    t = x.shape[0]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    q = (x @ w["self_attn.q_proj.weight"].T).view(t, heads, head_dim)
    k = (x @ w["self_attn.k_proj.weight"].T).view(t, kv_heads, head_dim)
    v = (x @ w["self_attn.v_proj.weight"].T).view(t, kv_heads, head_dim)
    theta = config.get("rope_theta", 10000.0)
    q, k = rotary(q, positions, theta), rotary(k, positions, theta)
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim)
    causal = positions[:, None] >= positions[None, :]
    scores = scores.masked_fill(~causal[None], float("-inf"))
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(t, heads * head_dim)
    return out @ w["self_attn.o_proj.weight"].T


def mlp(x, w, config, layer_idx):
    gate = x @ w["mlp.gate_proj.weight"].T
    up = x @ w["mlp.up_proj.weight"].T
    return (F.silu(gate) * up) @ w["mlp.down_proj.weight"].T


def decoder_layer(x, positions, weights, config, layer_idx):
    eps = config["rms_norm_eps"]
    h = x + self_attention(rms_norm(x, weights["input_layernorm.weight"], eps), positions, weights, config, layer_idx)
    return h + mlp(rms_norm(h, weights["post_attention_layernorm.weight"], eps), weights, config, layer_idx)
