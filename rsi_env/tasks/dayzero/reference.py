"""The reference solution of RSI/DayZero-v0 and -v1 (hidden: no sandbox sees ``rsi_env/tasks``).

The workspace files an agent would write by extending the Llama templates: one ``spec.py``, one
``block.py`` and one ``vllm_model.py`` cover every feature, each part reading only its own config keys,
so every instance's solution is these files (``vllm_model.py`` on the real tier only). `reference_files`
is what the benchmark suite's reference agent writes with edit actions before it submits
(`rsi_env.suite.reference`); the tests check that it passes every feature, at every size, on both tiers.
"""

from __future__ import annotations

from typing import Any

from rsi_env.errors import RsiEnvError
from rsi_env.tasks.dayzero.env import TEMPLATE_DIR, VLLM_FILE, DayZeroEnv

__all__ = ["BLOCK", "SPEC", "VLLM_MODEL", "reference_files"]

SPEC = '''"""rsi-env's loader and cost model for the new architecture (every DayZero feature's keys)."""

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _shape(c):
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    return hidden, heads, kv, c.get("head_dim") or hidden // heads, c["num_hidden_layers"]


def _sliding(c, i):
    every = c.get("global_attention_every") or 0
    return bool(c.get("sliding_window")) and every > 0 and (i + 1) % every != 0


def _moe(c, i):
    return (c.get("num_routed_experts") or 0) > 0 and i >= (c.get("first_dense_layers") or 0)


def spec_fields(c):
    hidden, heads, kv, hd, layers = _shape(c)
    rope = c.get("rope_scaling") or {}
    max_pos = c["max_position_embeddings"]
    if rope.get("rope_type") == "yarn":
        max_pos = int(rope.get("original_max_position_embeddings", max_pos) * rope["factor"])
    ei = c.get("expert_intermediate_size") or 0
    return {
        "architecture": c["architectures"][0], "num_layers": layers, "hidden_size": hidden, "num_heads": heads,
        "num_kv_heads": kv, "head_dim": hd, "intermediate_size": c["intermediate_size"],
        "vocab_size": c["vocab_size"], "max_position_embeddings": max_pos,
        "tie_word_embeddings": c.get("tie_word_embeddings", False),
        "dtype_bytes": DTYPE_BYTES[c.get("torch_dtype", "bfloat16")],
        "num_experts": c.get("num_routed_experts") or 0, "num_experts_per_tok": c.get("experts_per_token") or 0,
        "moe_intermediate_size": ei, "shared_expert_intermediate_size": (c.get("num_shared_experts") or 0) * ei,
        "num_moe_layers": sum(_moe(c, i) for i in range(layers)),
        "sliding_window": c.get("sliding_window"),
        "num_sliding_layers": sum(_sliding(c, i) for i in range(layers)),
        "qk_norm": bool(c.get("use_qk_norm")), "rope_scaling_type": rope.get("rope_type"),
    }


def _mlp_params(c, i, active):
    hidden = c["hidden_size"]
    if not _moe(c, i):
        return 3 * hidden * c["intermediate_size"]
    e, ei, shared = c["num_routed_experts"], c["expert_intermediate_size"], c.get("num_shared_experts") or 0
    n = e * hidden + (c["experts_per_token"] if active else e) * 3 * hidden * ei + 3 * hidden * shared * ei
    return n + (hidden if shared and c.get("shared_expert_gate") else 0)


def _attn_params(c):
    hidden, heads, kv, hd, _ = _shape(c)
    return 2 * hidden * heads * hd + 2 * hidden * kv * hd


def _vectors(c, i):
    """Per-layer parameters outside the matmuls: norms, QK-norm weights, sinks, the router's bias."""
    hidden, heads, _, hd, _ = _shape(c)
    n = 2 * hidden + (2 * hd if c.get("use_qk_norm") else 0) + (heads if c.get("attention_sinks") else 0)
    return n + (c["num_routed_experts"] if _moe(c, i) and c.get("topk_method") == "noaux_tc" else 0)


def param_count(c):
    hidden, _, _, _, layers = _shape(c)
    n = c["vocab_size"] * hidden * (1 if c.get("tie_word_embeddings", False) else 2) + hidden
    for i in range(layers):
        n += _vectors(c, i) + _attn_params(c) + _mlp_params(c, i, active=False)
    return n


def flops_per_token(c, context_tokens):
    hidden, heads, _, hd, layers = _shape(c)
    n = 2 * c["vocab_size"] * hidden
    for i in range(layers):
        seen = min(context_tokens, c["sliding_window"]) if _sliding(c, i) else context_tokens
        n += 2 * (_attn_params(c) + _mlp_params(c, i, active=True)) + 4 * heads * hd * seen
    return n


def kv_bytes(c, context_tokens):
    _, _, kv, hd, layers = _shape(c)
    held = sum(min(context_tokens, c["sliding_window"]) if _sliding(c, i) else context_tokens for i in range(layers))
    return 2 * kv * hd * DTYPE_BYTES[c.get("torch_dtype", "bfloat16")] * held
'''

BLOCK = '''"""One decoder layer of the new architecture in PyTorch (every DayZero feature's keys)."""

import math

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_frequencies(config, dim):
    theta = config.get("rope_theta", 10000.0)
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type") != "yarn":
        return inv_freq, 1.0
    factor = scaling["factor"]
    original = scaling.get("original_max_position_embeddings", config["max_position_embeddings"])

    def correction_dim(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(correction_dim(scaling.get("beta_fast", 32))), 0)
    high = min(math.ceil(correction_dim(scaling.get("beta_slow", 1))), dim - 1)
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / max(high - low, 0.001)).clamp(0, 1)
    blended = inv_freq / factor * ramp + inv_freq * (1 - ramp)
    return blended, 0.1 * math.log(factor) + 1.0


def rotary(x, positions, config):
    """Rotate-half RoPE on the first rotary_dim channels (all by default); the rest pass through."""
    dim = config.get("rotary_dim") or x.shape[-1]
    inv_freq, scale = rope_frequencies(config, dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([angles.cos()] * 2, -1)[:, None, :] * scale
    sin = torch.cat([angles.sin()] * 2, -1)[:, None, :] * scale
    half = dim // 2
    part, rest = x[..., :dim], x[..., dim:]
    return torch.cat([part * cos + torch.cat([-part[..., half:], part[..., :half]], -1) * sin, rest], -1)


def uses_rope(config, layer_idx):
    every = config.get("no_rope_layer_interval") or 0
    return not (every and (layer_idx + 1) % every == 0)


def self_attention(x, positions, w, config, layer_idx):
    t = x.shape[0]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    q = (x @ w["self_attn.q_proj.weight"].T).view(t, heads, head_dim)
    k = (x @ w["self_attn.k_proj.weight"].T).view(t, kv_heads, head_dim)
    v = (x @ w["self_attn.v_proj.weight"].T).view(t, kv_heads, head_dim)
    if config.get("use_qk_norm"):  # per head, before RoPE
        q = rms_norm(q, w["self_attn.q_norm.weight"], config["rms_norm_eps"])
        k = rms_norm(k, w["self_attn.k_norm.weight"], config["rms_norm_eps"])
    if uses_rope(config, layer_idx):
        q, k = rotary(q, positions, config), rotary(k, positions, config)
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim)
    cap = config.get("attn_logit_softcapping")
    if cap:
        scores = cap * torch.tanh(scores / cap)
    distance = positions[:, None] - positions[None, :]
    visible = distance >= 0
    every = config.get("global_attention_every") or 0
    if config.get("sliding_window") and every and (layer_idx + 1) % every != 0:
        visible = visible & (distance < config["sliding_window"])
    scores = scores.masked_fill(~visible[None], float("-inf"))
    if config.get("attention_sinks"):  # the sink joins each head's softmax and carries no value
        sink = w["self_attn.sinks"].view(heads, 1, 1)
        top = torch.maximum(scores.amax(-1, keepdim=True), sink)
        e = (scores - top).exp()
        probs = e / (e.sum(-1, keepdim=True) + (sink - top).exp())
    else:
        probs = scores.softmax(-1)
    out = torch.einsum("hqk,khd->qhd", probs, v).reshape(t, heads * head_dim)
    return out @ w["self_attn.o_proj.weight"].T


def swiglu(x, w, prefix):
    return (F.silu(x @ w[prefix + ".gate_proj.weight"].T) * (x @ w[prefix + ".up_proj.weight"].T)) @ w[
        prefix + ".down_proj.weight"].T


def route(x, w, config):
    """Each token's chosen experts and their weights."""
    logits = x @ w["mlp.gate.weight"].T
    affinity = torch.sigmoid(logits) if config.get("scoring_func") == "sigmoid" else torch.softmax(logits, -1)
    choice = affinity
    if config.get("topk_method") == "noaux_tc":  # the bias chooses; the unbiased affinities weigh
        choice = affinity + w["mlp.gate.e_score_correction_bias"]
    chosen = torch.topk(choice, config["experts_per_token"], dim=-1).indices
    weight = torch.gather(affinity, -1, chosen)
    if config.get("norm_topk_prob"):
        weight = weight / weight.sum(-1, keepdim=True)
    return weight * config.get("routed_scaling_factor", 1.0), chosen


def mlp(x, w, config, layer_idx):
    if not config.get("num_routed_experts") or layer_idx < config.get("first_dense_layers", 0):
        return swiglu(x, w, "mlp")
    weight, chosen = route(x, w, config)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for p, e in zip(weight[t], chosen[t]):
            out[t] += p * swiglu(x[t:t + 1], w, f"mlp.experts.{int(e)}")[0]
    if config.get("num_shared_experts"):
        shared = swiglu(x, w, "mlp.shared_expert")
        if config.get("shared_expert_gate"):
            shared = torch.sigmoid(x @ w["mlp.shared_expert_gate.weight"].T) * shared
        out = out + shared
    return out


def decoder_layer(x, positions, weights, config, layer_idx):
    eps = config["rms_norm_eps"]
    h = x + self_attention(rms_norm(x, weights["input_layernorm.weight"], eps), positions, weights, config, layer_idx)
    return h + mlp(rms_norm(h, weights["post_attention_layernorm.weight"], eps), weights, config, layer_idx)
'''

_TEMPLATE_VLLM = (TEMPLATE_DIR / VLLM_FILE).read_text()
_TEMPLATE_IMPORT = "from vllm.model_executor.models.llama import LlamaForCausalLM\n"
_TEMPLATE_CLASSES = '''class NewConfig(LlamaConfig):
    """Llama's config under the new model_type; unknown keys (the new ones) become attributes."""

    model_type = MODEL_TYPE


class NewModelForCausalLM(LlamaForCausalLM):
    """The model class vLLM instantiates for ARCHITECTURE."""
'''

_VLLM_IMPORTS = '''import torch
from torch import nn
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import QKVParallelLinear, ReplicatedLinear, RowParallelLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.models.llama import LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP
from vllm.model_executor.models.utils import extract_layer_index
'''

# vLLM's Llama with every feature's new part: the config states what vLLM's own layers already read (YaRN's
# served length, layer_types for the sliding windows, rotary_dim as the rope's partial_rotary_factor); the
# attention adds per-head q/k RMSNorm, NoPE layers, soft-capped scores and sinks (vLLM's attention backends
# take both); the MLP after the dense layers is a router over routed LlamaMLP experts (every expert computes
# every token and the router's weights mask the sum: a tiny model, simple over fast) plus a shared expert.
_VLLM_CLASSES = '''class NewConfig(LlamaConfig):
    """Llama's config, with what vLLM's own layers read stated in their terms."""

    model_type = MODEL_TYPE

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        rope = dict(getattr(self, "rope_parameters", None) or {})
        if rope.get("rope_type") == "yarn":  # vLLM reads max_position_embeddings as YaRN's extended length
            original = rope.get("original_max_position_embeddings") or self.max_position_embeddings
            rope["original_max_position_embeddings"] = original
            self.max_position_embeddings = int(original * rope["factor"])
        if getattr(self, "rotary_dim", None):
            rope["partial_rotary_factor"] = self.rotary_dim / self.head_dim
        self.rope_parameters = rope
        every = getattr(self, "global_attention_every", 0) or 0
        if getattr(self, "sliding_window", None) and every > 0:
            self.layer_types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention"
                                for i in range(self.num_hidden_layers)]


class NewAttention(nn.Module):
    """Llama's attention with QK-norm, NoPE layers, soft-capped scores and attention sinks where configured."""

    def __init__(self, config, hidden_size, num_heads, num_kv_heads, max_position_embeddings=8192,
                 quant_config=None, cache_config=None, prefix="", **_):
        super().__init__()
        layer = extract_layer_index(prefix)
        self.head_dim = getattr(config, "head_dim", None) or hidden_size // num_heads
        self.q_size, self.kv_size = num_heads * self.head_dim, num_kv_heads * self.head_dim
        self.qkv_proj = QKVParallelLinear(hidden_size, self.head_dim, num_heads, num_kv_heads, bias=False,
                                          quant_config=quant_config, prefix=f"{prefix}.qkv_proj")
        self.o_proj = RowParallelLinear(num_heads * self.head_dim, hidden_size, bias=False,
                                        quant_config=quant_config, prefix=f"{prefix}.o_proj")
        self.qk_norm = bool(getattr(config, "use_qk_norm", False))
        if self.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        every = getattr(config, "no_rope_layer_interval", 0) or 0
        self.rotary_emb = None if every and (layer + 1) % every == 0 else get_rope(
            self.head_dim, max_position=max_position_embeddings, rope_parameters=config.rope_parameters)
        extra = {}
        if getattr(config, "attention_sinks", False):
            self.sinks = nn.Parameter(torch.empty(num_heads), requires_grad=False)
            extra["sinks"] = self.sinks
        types = getattr(config, "layer_types", None)
        window = config.sliding_window if types and types[layer] == "sliding_attention" else None
        self.attn = Attention(num_heads, self.head_dim, self.head_dim ** -0.5, num_kv_heads=num_kv_heads,
                              cache_config=cache_config, quant_config=quant_config,
                              logits_soft_cap=getattr(config, "attn_logit_softcapping", None),
                              per_layer_sliding_window=window, prefix=f"{prefix}.attn", **extra)

    def forward(self, positions, hidden_states):
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        if self.qk_norm:
            q = self.q_norm(q.reshape(-1, self.head_dim)).view(q.shape)
            k = self.k_norm(k.reshape(-1, self.head_dim)).view(k.shape)
        if self.rotary_emb is not None:
            q, k = self.rotary_emb(positions, q, k)
        output, _ = self.o_proj(self.attn(q, k, v))
        return output


class NewMoE(nn.Module):
    """Routed SwiGLU experts (softmax or sigmoid affinities, an optional choosing bias) and a shared expert."""

    def __init__(self, config, prefix):
        super().__init__()
        hidden, n, inter = config.hidden_size, config.num_routed_experts, config.expert_intermediate_size
        self.top_k = config.experts_per_token
        self.sigmoid = getattr(config, "scoring_func", "softmax") == "sigmoid"
        self.normalise = bool(getattr(config, "norm_topk_prob", False))
        self.scale = float(getattr(config, "routed_scaling_factor", 1.0))
        self.gate = ReplicatedLinear(hidden, n, bias=False, prefix=f"{prefix}.gate")
        self.biased = getattr(config, "topk_method", None) == "noaux_tc"
        if self.biased:
            self.gate.e_score_correction_bias = nn.Parameter(torch.empty(n), requires_grad=False)
        self.experts = nn.ModuleList(LlamaMLP(hidden, inter, "silu", prefix=f"{prefix}.experts.{e}")
                                     for e in range(n))
        shared = getattr(config, "num_shared_experts", 0) or 0
        self.shared_expert = (LlamaMLP(hidden, shared * inter, "silu", prefix=f"{prefix}.shared_expert")
                              if shared else None)
        self.shared_expert_gate = (ReplicatedLinear(hidden, 1, bias=False, prefix=f"{prefix}.shared_expert_gate")
                                   if shared and getattr(config, "shared_expert_gate", False) else None)

    def forward(self, x):
        logits, _ = self.gate(x)
        affinity = logits.sigmoid() if self.sigmoid else logits.softmax(dim=-1)
        choice = affinity + self.gate.e_score_correction_bias if self.biased else affinity
        top_i = choice.topk(self.top_k, dim=-1).indices
        top_p = affinity.gather(-1, top_i)
        if self.normalise:
            top_p = top_p / top_p.sum(-1, keepdim=True)
        weights = torch.zeros_like(affinity).scatter(-1, top_i, top_p * self.scale)
        out = sum(weights[:, e:e + 1] * expert(x) for e, expert in enumerate(self.experts))
        if self.shared_expert is not None:
            shared = self.shared_expert(x)
            if self.shared_expert_gate is not None:
                shared = torch.sigmoid(self.shared_expert_gate(x)[0]) * shared
            out = out + shared
        return out


class NewDecoderLayer(LlamaDecoderLayer):
    def __init__(self, vllm_config, prefix="", config=None):
        super().__init__(vllm_config, prefix, config, attn_layer_type=NewAttention)
        config = config or vllm_config.model_config.hf_config
        experts = getattr(config, "num_routed_experts", 0) or 0
        if experts and extract_layer_index(prefix) >= (getattr(config, "first_dense_layers", 0) or 0):
            self.mlp = NewMoE(config, f"{prefix}.mlp")


class NewModelForCausalLM(LlamaForCausalLM):
    """The model class vLLM instantiates for ARCHITECTURE."""

    def __init__(self, *, vllm_config, prefix=""):
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=NewDecoderLayer)
        cap = getattr(self.config, "final_logit_softcapping", None)
        if cap:
            self.logits_processor = LogitsProcessor(self.config.vocab_size, soft_cap=cap)
'''

if _TEMPLATE_IMPORT not in _TEMPLATE_VLLM or _TEMPLATE_CLASSES not in _TEMPLATE_VLLM:
    raise RsiEnvError("the DayZero vllm_model.py template changed: the reference solution no longer applies to it")
VLLM_MODEL = _TEMPLATE_VLLM.replace(_TEMPLATE_IMPORT, _VLLM_IMPORTS).replace(_TEMPLATE_CLASSES, _VLLM_CLASSES)


def reference_files(env: Any) -> dict[str, str]:
    """The workspace files (path -> whole text) that solve the instance ``env`` drew at its last reset."""
    if not isinstance(env, DayZeroEnv):
        raise RsiEnvError(f"the DayZero reference solves RSI/DayZero-v* envs, not {type(env).__name__}")
    files = {"spec.py": SPEC, "block.py": BLOCK}
    if env.real:
        files[VLLM_FILE] = VLLM_MODEL
    return files
