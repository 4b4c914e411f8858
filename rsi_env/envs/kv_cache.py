"""RSI/KVCache-v1 and RSI/KVCache-v0.

Tune the paged KV cache (memory share, block size, prefix caching, context length) for goodput under SLOs.
"""

from __future__ import annotations

from rsi_env.envs.core import RsiEnv

__all__ = ["KVCacheEnv", "KVCacheEnvV0"]


class KVCacheEnv(RsiEnv):
    """Tune vLLM's paged KV cache for goodput under latency SLOs, on a GPU shared with a co-tenant.

    ## Description

    Long-context requests and retrieval-augmented chat (``long_context``, ``rag_chat``), driven by 128
    concurrent users, served by Llama-3.1-8B on an H200 that another tenant shares: the operators gave this
    engine 25 % of the GPU's memory (``gpu_memory_utilization`` 0.25) and allow it 30 % at most. What is left
    for the KV cache after the weights, and how it is used — the block size, prefix caching, the longest
    sequence vLLM promises to serve (``max_model_len``) and, only where the task allows fp8, the KV-cache
    precision — decide how many requests fit and how often they are preempted. The objective is goodput
    (requests/s meeting TTFT <= 5 s and TPOT <= 100 ms), as a ratio to the starting configuration; at submit
    60 % of each workload's requests must meet them.

    ## Arguments, Action Space, Observation Space

    As every ``RSI/*`` env (see :class:`rsi_env.envs.core.RsiEnv`); ``model`` and ``hardware`` default to
    llama-3.1-8b on h200. ``variant="l4"`` is RSI/KVCache-v0's setting (Qwen2.5-7B on a whole 24 GB L4, 48
    users, ``rag_chat`` and ``shared_prefix_chat``, TPOT <= 200 ms), on the sim tier only. ``engine="sglang"``:
    SGLang 0.5.17 (sim tier, the default setting) from ``mem_fraction_static`` 0.25, which the co-tenant caps at
    0.3 in ``serving.yaml`` too, tuning ``mem_fraction_static``, ``page_size``, ``disable_radix_cache``,
    ``max_running_requests`` and ``kv_cache_dtype`` (fixed unless fp8 is allowed).

    ## Rewards

    Continuous: the objective's log-ratio gain over the best so far, the starting configuration scoring 0
    (only new bests pay), minus each measurement's simulated GPU-seconds x 0.0002. Binary, on submit: +1 if
    the workloads are untouched, the precision is as the task fixes it, every workload measured without error
    and met its SLO attainment, and the objective beats the start by 5%.

    ## Starting State

    vLLM 0.26's defaults with the co-tenant's memory share (``gpu_memory_utilization: 0.25``) written to
    ``serving.yaml``, measured as the baseline.

    ## Episode End

    Terminates on submit; truncates after ``max_steps`` (40) steps. At most 30 measurements.

    ## Version History

    * v1: runs on hardware the project has: an H200 shared with a co-tenant, so that the KV cache is the
      constraint (the whole H200 leaves an 8B model's cache nearly unbounded); v0's L4 is ``variant="l4"``.
      The co-tenant's cap (``gpu_memory_utilization`` <= 0.3) binds ``serving.yaml`` edits as well as the flag
      action's ladder: before, an edit past it was measured and could pass submit (a hole, closed in place:
      play within the cap is scored as it was).
    * v0: Qwen2.5-7B on an L4 at 48 users (`KVCacheEnvV0`).
    """

    task_id = "RSI/KVCache-v1"


class KVCacheEnvV0(KVCacheEnv):
    """Tune vLLM's paged KV cache for goodput under latency SLOs.

    ## Description

    Retrieval-augmented chat and chat behind shared system prompts (``rag_chat``, ``shared_prefix_chat``),
    driven by 48 concurrent users on a 24 GB L4: how much memory vLLM takes (``gpu_memory_utilization``),
    the block size, prefix caching, the longest sequence it promises to serve (``max_model_len``) and —
    only where the task allows fp8 — the KV-cache precision decide how many requests fit and how often
    they are preempted. The objective is goodput (requests/s meeting TTFT <= 5 s and TPOT <= 200 ms), as
    a ratio to vLLM's defaults; at submit 80 % of each workload's requests must meet them.

    ## Arguments, Action Space, Observation Space

    As every ``RSI/*`` env (see :class:`rsi_env.envs.core.RsiEnv`); ``model`` and ``hardware`` default to
    qwen2.5-7b on l4. ``engine="sglang"``: SGLang 0.5.17 (sim tier) from its defaults, tuning
    ``mem_fraction_static``, ``page_size``, ``disable_radix_cache``, ``max_running_requests`` and ``kv_cache_dtype``
    (fixed unless fp8 is allowed).

    ## Rewards

    Continuous: the objective's log-ratio gain over the best so far, vLLM's defaults scoring 0 (only new
    bests pay), minus each measurement's simulated GPU-seconds x 0.0002. Binary, on submit: +1 if the
    workloads are untouched, the precision is as the task fixes it, every workload measured without error and met
    its SLO attainment, and the objective beats the defaults by 5%.

    ## Starting State

    vLLM 0.26's defaults written to ``serving.yaml``, measured as the baseline.

    ## Episode End

    Terminates on submit; truncates after ``max_steps`` (40) steps. At most 30 measurements.

    ## Version History

    * v0: first release. Its task data moved under this id before spec sheets were tested against the data:
      Qwen2.5-7B on an L4 at 48 users (it began with Llama-3.1-8B on an H200 at 128), then TTFT 5 s at 80 %
      (it was 2 s at 90 %). A further change is a new version.
    """

    task_id = "RSI/KVCache-v0"
