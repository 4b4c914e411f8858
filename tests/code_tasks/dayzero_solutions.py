"""Reference solutions of RSI/DayZero-v0 (kept in the tests, never in the package): the workspace's
``spec.py`` and ``block.py`` for every feature, written as an agent would, by extending the templates.

One ``spec.py`` and one ``block.py`` cover all four features (each reads only its own config keys), so
every feature's solution is these two files.
"""

from __future__ import annotations

from pathlib import Path

SPEC = '''
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


def param_count(c):
    hidden, _, _, hd, layers = _shape(c)
    n = c["vocab_size"] * hidden * (1 if c.get("tie_word_embeddings", False) else 2) + hidden
    for i in range(layers):
        n += 2 * hidden + _attn_params(c) + _mlp_params(c, i, active=False) + (2 * hd if c.get("use_qk_norm") else 0)
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

BLOCK = '''
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
    dim = x.shape[-1]
    inv_freq, scale = rope_frequencies(config, dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([angles.cos()] * 2, -1)[:, None, :] * scale
    sin = torch.cat([angles.sin()] * 2, -1)[:, None, :] * scale
    half = dim // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


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
    q, k = rotary(q, positions, config), rotary(k, positions, config)
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim)
    distance = positions[:, None] - positions[None, :]
    visible = distance >= 0
    every = config.get("global_attention_every") or 0
    if config.get("sliding_window") and every and (layer_idx + 1) % every != 0:
        visible = visible & (distance < config["sliding_window"])
    scores = scores.masked_fill(~visible[None], float("-inf"))
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(t, heads * head_dim)
    return out @ w["self_attn.o_proj.weight"].T


def swiglu(x, w, prefix):
    return (F.silu(x @ w[prefix + ".gate_proj.weight"].T) * (x @ w[prefix + ".up_proj.weight"].T)) @ w[
        prefix + ".down_proj.weight"].T


def mlp(x, w, config, layer_idx):
    if not config.get("num_routed_experts") or layer_idx < config.get("first_dense_layers", 0):
        return swiglu(x, w, "mlp")
    probs = torch.softmax(x @ w["mlp.gate.weight"].T, dim=-1)
    weight, chosen = torch.topk(probs, config["experts_per_token"], dim=-1)
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

# A plausible mistake: QK-norm applied after the rotary embedding instead of before.
BLOCK_NORM_AFTER_ROPE = BLOCK.replace(
    '''    if config.get("use_qk_norm"):  # per head, before RoPE
        q = rms_norm(q, w["self_attn.q_norm.weight"], config["rms_norm_eps"])
        k = rms_norm(k, w["self_attn.k_norm.weight"], config["rms_norm_eps"])
    q, k = rotary(q, positions, config), rotary(k, positions, config)
''', '''    q, k = rotary(q, positions, config), rotary(k, positions, config)
    if config.get("use_qk_norm"):
        q = rms_norm(q, w["self_attn.q_norm.weight"], config["rms_norm_eps"])
        k = rms_norm(k, w["self_attn.k_norm.weight"], config["rms_norm_eps"])
''')
assert BLOCK_NORM_AFTER_ROPE != BLOCK

# The real tier (QK-norm): vLLM's Llama with an RMSNorm over each head's q and k before the rotary embedding.
VLLM_QK_NORM = (Path(__file__).resolve().parents[2] / "rsi_env/catalog/code/dayzero/template/vllm_model.py").read_text(
).replace('''from vllm.model_executor.models.llama import LlamaForCausalLM
''', '''from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM
''').replace('''class NewModelForCausalLM(LlamaForCausalLM):
    """The model class vLLM instantiates for ARCHITECTURE."""
''', '''class QKNormAttention(LlamaAttention):
    def __init__(self, config, **kwargs):
        super().__init__(config=config, **kwargs)
        self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(self, positions, hidden_states):
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = self.q_norm(q.reshape(-1, self.head_dim)).view(q.shape)
        k = self.k_norm(k.reshape(-1, self.head_dim)).view(k.shape)
        q, k = self.rotary_emb(positions, q, k)
        output, _ = self.o_proj(self.attn(q, k, v))
        return output


class QKNormDecoderLayer(LlamaDecoderLayer):
    def __init__(self, vllm_config, prefix="", config=None):
        super().__init__(vllm_config, prefix, config, attn_layer_type=QKNormAttention)


class NewModelForCausalLM(LlamaForCausalLM):
    """The model class vLLM instantiates for ARCHITECTURE."""

    def __init__(self, *, vllm_config, prefix=""):
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=QKNormDecoderLayer)
''')
assert "QKNormAttention" in VLLM_QK_NORM

_TEMPLATE_VLLM = (Path(__file__).resolve().parents[2] / "rsi_env/catalog/code/dayzero/template/vllm_model.py").read_text()
_TEMPLATE_IMPORT = "from vllm.model_executor.models.llama import LlamaForCausalLM\n"
_TEMPLATE_CLASSES = '''class NewConfig(LlamaConfig):
    """Llama's config under the new model_type; unknown keys (the new ones) become attributes."""

    model_type = MODEL_TYPE


class NewModelForCausalLM(LlamaForCausalLM):
    """The model class vLLM instantiates for ARCHITECTURE."""
'''
assert _TEMPLATE_IMPORT in _TEMPLATE_VLLM and _TEMPLATE_CLASSES in _TEMPLATE_VLLM


def _vllm_solution(imports: str, classes: str) -> str:
    """The template with its Llama import and its two classes replaced, as an agent would edit it."""
    return _TEMPLATE_VLLM.replace(_TEMPLATE_IMPORT, imports).replace(_TEMPLATE_CLASSES, classes)


# The real tier (sliding window): vLLM's Llama attention already takes a per-layer window from the config's
# ``layer_types``; the config class derives that list from ``global_attention_every``.
VLLM_SLIDING_WINDOW = _vllm_solution(_TEMPLATE_IMPORT, '''class NewConfig(LlamaConfig):
    """Llama's config; ``layer_types`` marks every layer but each K-th as a sliding-window layer."""

    model_type = MODEL_TYPE

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        every = getattr(self, "global_attention_every", 0) or 0
        if getattr(self, "sliding_window", None) and every > 0:
            self.layer_types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention"
                                for i in range(self.num_hidden_layers)]


class NewModelForCausalLM(LlamaForCausalLM):
    """The model class vLLM instantiates for ARCHITECTURE."""
''')

# The real tier (shared experts): Llama layers whose MLP, after the first dense ones, is a router over
# routed SwiGLU experts (vLLM's LlamaMLP each) plus a sigmoid-gated shared expert. Every expert computes
# every token and the router's top-k weights mask the sum (a tiny model: simple over fast).
VLLM_SHARED_EXPERTS = _vllm_solution('''import torch
from torch import nn
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.models.llama import LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP
from vllm.model_executor.models.utils import extract_layer_index
''', '''class NewConfig(LlamaConfig):
    """Llama's config under the new model_type; unknown keys (the new ones) become attributes."""

    model_type = MODEL_TYPE


class SharedExpertMoE(nn.Module):
    def __init__(self, config, prefix):
        super().__init__()
        hidden, n, inter = config.hidden_size, config.num_routed_experts, config.expert_intermediate_size
        self.top_k = config.experts_per_token
        self.gate = ReplicatedLinear(hidden, n, bias=False, prefix=f"{prefix}.gate")
        self.experts = nn.ModuleList(LlamaMLP(hidden, inter, "silu", prefix=f"{prefix}.experts.{e}")
                                     for e in range(n))
        self.shared_expert = LlamaMLP(hidden, config.num_shared_experts * inter, "silu",
                                      prefix=f"{prefix}.shared_expert")
        self.shared_expert_gate = (ReplicatedLinear(hidden, 1, bias=False, prefix=f"{prefix}.shared_expert_gate")
                                   if config.shared_expert_gate else None)

    def forward(self, x):
        logits, _ = self.gate(x)
        probs = logits.softmax(dim=-1)
        top_p, top_i = probs.topk(self.top_k, dim=-1)
        weights = torch.zeros_like(probs).scatter(-1, top_i, top_p)  # not renormalised
        out = sum(weights[:, e:e + 1] * expert(x) for e, expert in enumerate(self.experts))
        shared = self.shared_expert(x)
        if self.shared_expert_gate is not None:
            shared = torch.sigmoid(self.shared_expert_gate(x)[0]) * shared
        return out + shared


class MoEDecoderLayer(LlamaDecoderLayer):
    def __init__(self, vllm_config, prefix="", config=None):
        super().__init__(vllm_config, prefix, config)
        config = config or vllm_config.model_config.hf_config
        if extract_layer_index(prefix) >= (getattr(config, "first_dense_layers", 0) or 0):
            self.mlp = SharedExpertMoE(config, f"{prefix}.mlp")


class NewModelForCausalLM(LlamaForCausalLM):
    """The model class vLLM instantiates for ARCHITECTURE."""

    def __init__(self, *, vllm_config, prefix=""):
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=MoEDecoderLayer)
''')
assert "SharedExpertMoE" in VLLM_SHARED_EXPERTS and "layer_types" in VLLM_SLIDING_WINDOW

# The real tier (YaRN): vLLM's Llama already builds YaRN's rotary embedding from the config's rope
# parameters, but vLLM reads ``max_position_embeddings`` as the length YaRN already extends to (Hugging
# Face's convention), while this config gives the original length: the config class states the served one.
VLLM_YARN = _vllm_solution(_TEMPLATE_IMPORT, '''class NewConfig(LlamaConfig):
    """Llama's config; the model serves YaRN's factor x original_max_position_embeddings tokens."""

    model_type = MODEL_TYPE

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        rope = getattr(self, "rope_parameters", None) or {}
        if rope.get("rope_type") == "yarn":
            original = rope.get("original_max_position_embeddings") or self.max_position_embeddings
            rope["original_max_position_embeddings"] = original
            self.max_position_embeddings = int(original * rope["factor"])


class NewModelForCausalLM(LlamaForCausalLM):
    """The model class vLLM instantiates for ARCHITECTURE."""
''')

# A plausible mistake: the served length right, but plain RoPE (the YaRN parameters dropped).
VLLM_YARN_PLAIN_ROPE = VLLM_YARN.replace('''            self.max_position_embeddings = int(original * rope["factor"])
''', '''            self.max_position_embeddings = int(original * rope["factor"])
            self.rope_parameters = {"rope_type": "default", "rope_theta": rope["rope_theta"]}
''')
assert VLLM_YARN_PLAIN_ROPE != VLLM_YARN

VLLM_SOLUTIONS = {"qk_norm": VLLM_QK_NORM, "yarn": VLLM_YARN, "sliding_window": VLLM_SLIDING_WINDOW,
                  "shared_experts": VLLM_SHARED_EXPERTS}
