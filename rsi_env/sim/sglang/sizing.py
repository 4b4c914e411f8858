"""What SGLang 0.5.17 resolves at start from the device and the model: its defaults, KV pool and request slots.

Read from ``sglang/srt/server_args.py`` (``_handle_gpu_memory_settings``: chunked_prefill_size, the decode CUDA-graph
batch sizes and mem_fraction_static by GPU memory; the capture lists) and ``mem_cache/kv_cache_configurator.py``
(the KV pool: what the loaded weights leave of ``mem_fraction_static`` of the memory free before they loaded, divided
by the KV bytes of a token; ``resolve_max_num_reqs``). `rsi_env.engine.sglang_config.RESOLVED_AT_START` says the
same in words; the real tier records what the engine resolved.

The memory the process holds before the weights load (CUDA context, libraries) is the calibration's
``non_torch_bytes``, a vLLM coefficient: SGLang's own is not fitted (one real SGLang row exists, a sanity check).

The cost model (`rsi_env.sim.cost.StepCost`) and `rsi_env.sim.memory.kv_bytes_per_token_per_gpu` take vLLM's
`ResolvedConfig`; `cost_config` fills one in with SGLang's values where the two engines share a meaning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rsi_env.engine.config import ResolvedConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.sglang_config import SglangConfig
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.memory import kv_bytes_per_token_per_gpu

__all__ = ["SglangPlan", "cost_config", "decode_graph_sizes", "plan_sglang", "prefill_graph_sizes"]

MIB = float(1 << 20)


def decode_graph_sizes(max_bs: int) -> tuple[int, ...]:
    """The decode batch sizes SGLang captures as CUDA graphs (no speculative decoding), up to ``max_bs``."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    return tuple(s for s in sizes if s <= max_bs)


def prefill_graph_sizes(max_tokens: int) -> tuple[int, ...]:
    """The prefill token counts SGLang captures (piecewise CUDA graphs), up to ``max_tokens``."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512)]
    return tuple(s for s in sizes if s <= max_tokens)


def _by_memory(gpu_mib: float, tp: int) -> tuple[int, int]:
    """SGLang's (chunked_prefill_size, decode CUDA-graph max batch) for a GPU of ``gpu_mib`` MiB."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 2048, 24 if tp < 4 else 80
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


@dataclass(frozen=True)
class SglangPlan:
    """SGLang's flags with every default resolved, its KV pool (tokens) and request slots; ``error`` its refusal."""

    max_running_requests: int
    chunked_prefill_size: int | None  # None: no chunked prefill
    max_prefill_tokens: int
    mem_fraction_static: float
    page_size: int
    cuda_graph_max_bs: int
    max_total_num_tokens: int
    context_len: int
    resolved: ResolvedConfig  # what the cost model reads (`cost_config`)
    error: str | None = None

    @property
    def prefill_graphs(self) -> tuple[int, ...]:
        """The prefill token counts SGLang captures as (breakable) CUDA graphs: up to the chunk size, none without
        chunked prefill (its prefill capture list is built from the chunk size; with ``-1`` it logs "Disable prefill
        CUDA graph because the capture size is not set" and every prefill pass runs eagerly)."""
        return prefill_graph_sizes(self.chunked_prefill_size) if self.chunked_prefill_size else ()


def plan_sglang(cfg: SglangConfig, model: ModelSpec, hw: HardwareSpec, cal: Calibration) -> SglangPlan:
    """Resolve ``cfg`` on ``hw`` the way SGLang 0.5.17 does at start, and size its KV pool."""
    gpu_mib = hw.memory_bytes / MIB
    chunk_default, graph_default = _by_memory(gpu_mib, cfg.tp_size)
    chunk = cfg.chunked_prefill_size if cfg.chunked_prefill_size is not None else chunk_default
    max_bs = cfg.cuda_graph_max_bs if cfg.cuda_graph_max_bs is not None else graph_default
    page = cfg.page_size if cfg.page_size is not None else 1
    mfs = cfg.mem_fraction_static
    if mfs is None:
        activation_tokens = max(chunk if chunk > 0 else cfg.max_prefill_tokens, 2048)
        graphs = max_bs * 2 + len(prefill_graph_sizes(chunk if chunk > 0 else 2048)) * 8
        reserved = 512 + activation_tokens * 1.5 + cfg.tp_size / 8 * 1024 + graphs
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        mfs = round((gpu_mib - reserved) / gpu_mib, 3)
    context = model.max_position_embeddings
    resolved = cost_config(cfg, page, max_bs, chunk, mfs, max_running=1, context=context)  # for the KV bytes
    pre_load = hw.memory_bytes - cal.non_torch_bytes
    weights = model.weight_bytes(resolved.weight_dtype_bytes(model)) / cfg.tp_size
    rest = pre_load * mfs - weights
    cell = kv_bytes_per_token_per_gpu(model, resolved)
    tokens = int(rest // cell) // page * page if rest > 0 else 0
    estimated = max(min(int(tokens / context * 512), 4096), 2048)
    if cfg.max_running_requests is not None:
        running = min(cfg.max_running_requests // cfg.dp_size, tokens // 2)
    else:
        running = min(estimated, tokens // 2)
    error = None
    if rest <= 0:
        need = math.ceil((1 - (pre_load - weights) / pre_load) * 1000) / 1000
        error = (f"invalid_config: Loaded weights leave no GPU memory for the KV cache under "
                 f"--mem-fraction-static={mfs}. Raise --mem-fraction-static above {need:.3f}")
    elif running < 1:
        error = "invalid_config: max_running_request is zero"
    return SglangPlan(max(running, 0), chunk if chunk > 0 else None, cfg.max_prefill_tokens, mfs, page, max_bs,
                      tokens, context, cost_config(cfg, page, max_bs, chunk, mfs, max(running, 1), context), error)


def cost_config(cfg: SglangConfig, page: int, max_bs: int, chunk: int, mfs: float,
                max_running: int, context: int) -> ResolvedConfig:
    """vLLM's `ResolvedConfig` the cost model reads, with SGLang's values.

    A decode batch runs as one CUDA graph up to ``cuda_graph_max_bs`` (SGLang's capture sizes, padded up as vLLM's);
    a prefill batch runs under piecewise graphs within `SglangPlan.prefill_graphs` (the cost model's
    ``prefill_graph_sizes``) and is launched layer by layer outside them. SGLang's overlap
    scheduler prepares the next batch on the CPU while the GPU runs this one, which is how the cost model prices
    vLLM's async scheduling (``async_scheduling``: the slower of the two sides sets the step's time).
    """
    kv_dtype = "fp8" if cfg.kv_cache_dtype.startswith("fp8") else "auto"
    return ResolvedConfig(
        engine_version="sglang-0.5.17", usage_context="server", max_num_seqs=max_running,
        max_num_batched_tokens=chunk if chunk > 0 else cfg.max_prefill_tokens, block_size=page,
        gpu_memory_utilization=mfs, enable_prefix_caching=not cfg.disable_radix_cache,
        enable_chunked_prefill=chunk > 0, kv_cache_dtype=kv_dtype, enforce_eager=False,
        cudagraph_capture_sizes=decode_graph_sizes(max_bs), long_prefill_token_threshold=0,
        tensor_parallel_size=cfg.tp_size, pipeline_parallel_size=1, data_parallel_size=cfg.dp_size,
        quantization=None, max_model_len=context, scheduling_policy="fcfs", async_scheduling=True)
