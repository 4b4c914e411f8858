"""How many KV-cache blocks a configuration gets, the way vLLM's worker profiles memory.

``available = total * gpu_memory_utilization - weights - peak activations - non-torch memory
- CUDA-graph memory``; ``num_gpu_blocks = available // (block_size * KV bytes per token per GPU)``.
The activation terms (the token budget's activations, the sampler's logits, and for a MoE model the
fused-MoE kernel's caches) and the non-torch term are calibrated per chip from the ``num_gpu_blocks`` that
real runs report. The refusals are vLLM's own (``kv_cache_utils.check_enough_kv_cache_memory``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rsi_env.engine.config import ResolvedConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.sim.calibration import Calibration

__all__ = ["MemoryPlan", "plan_memory", "kv_bytes_per_token_per_gpu"]

GIB = float(1 << 30)


@dataclass(frozen=True)
class MemoryPlan:
    """Where one GPU's memory goes; ``error`` is vLLM's refusal, or None."""

    requested_bytes: float
    weight_bytes: float
    activation_bytes: float
    other_bytes: float
    kv_cache_bytes: float
    block_bytes: float
    num_gpu_blocks: int
    error: str | None = None


def kv_bytes_per_token_per_gpu(model: ModelSpec, cfg: ResolvedConfig) -> float:
    """KV bytes one token takes on one GPU: layers split by PP, KV heads by TP (replicated below 1)."""
    layers = math.ceil(model.num_layers / cfg.pipeline_parallel_size)
    kv_heads = max(1, model.num_kv_heads // cfg.tensor_parallel_size)
    return 2.0 * layers * kv_heads * model.head_dim * cfg.kv_dtype_bytes(model)


def plan_memory(model: ModelSpec, hw: HardwareSpec, cfg: ResolvedConfig, cal: Calibration) -> MemoryPlan:
    tp, pp = cfg.tensor_parallel_size, cfg.pipeline_parallel_size
    requested = math.ceil(hw.memory_bytes * cfg.gpu_memory_utilization)
    weights = model.weight_bytes(cfg.weight_dtype_bytes(model)) / (tp * pp)
    inter = (model.num_experts_per_tok * model.moe_intermediate_size if model.is_moe else model.intermediate_size)
    per_token = (2.0 * inter / tp + 4.0 * model.hidden_size) * model.dtype_bytes
    num_reqs = min(cfg.max_num_batched_tokens, cfg.max_num_seqs)
    act = cal.act_token_coef * cfg.max_num_batched_tokens * per_token + (
        cal.act_logit_coef * num_reqs * model.vocab_size * 4.0 / tp)
    if model.is_moe:  # fused_moe's caches: (tokens, top-k, max(2I, H)) for the up/down outputs, (tokens, top-k, I)
        moe = model.num_experts_per_tok * (max(2 * model.moe_intermediate_size, model.hidden_size)
                                           + model.moe_intermediate_size) * model.dtype_bytes
        act += cal.act_moe_coef * cfg.max_num_batched_tokens * moe / tp
    other = cal.non_torch_bytes + (0.0 if cfg.enforce_eager else cal.cudagraph_bytes)
    available = requested - weights - act - other
    block_bytes = cfg.block_size * kv_bytes_per_token_per_gpu(model, cfg)
    blocks = int(available // block_bytes) if available > 0 else 0
    plan = MemoryPlan(requested, weights, act, other, available, block_bytes, blocks)
    if weights > hw.memory_bytes:
        return _with_error(plan, "oom: the weights alone "
                           f"({weights / GIB:.2f} GiB per GPU) exceed the device memory ({hw.memory_bytes / GIB:.2f} GiB)")
    if weights + act + other > requested and weights + act + other > hw.memory_bytes * 0.98:
        return _with_error(plan, "oom: CUDA out of memory during the profile run")
    if available <= 0 or blocks < 2:
        return _with_error(plan, "invalid_config: No available memory for the cache blocks. Try increasing "
                           "`gpu_memory_utilization` when initializing the engine.")
    needed = math.ceil(cfg.max_model_len / cfg.block_size) * block_bytes
    if needed > available:
        est = int(available // block_bytes) * cfg.block_size
        msg = (f"invalid_config: To serve at least one request with the model's max seq len ({cfg.max_model_len}), "
               f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
               f"({available / GIB:.2f} GiB).")
        if est > 0:
            msg += f" Based on the available memory, the estimated maximum model length is {est}."
        msg += " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        return _with_error(plan, msg)
    return plan


def _with_error(plan: MemoryPlan, error: str) -> MemoryPlan:
    return MemoryPlan(plan.requested_bytes, plan.weight_bytes, plan.activation_bytes, plan.other_bytes,
                      plan.kv_cache_bytes, plan.block_bytes, plan.num_gpu_blocks, error)
