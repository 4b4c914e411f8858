"""RSI/KVCache-v0.

Tune the paged KV cache (memory share, block size, prefix caching, context length) for goodput under SLOs.
"""

from __future__ import annotations

from rsi_env.envs.core import RsiEnv

__all__ = ["KVCacheEnv"]


class KVCacheEnv(RsiEnv):
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
    qwen2.5-7b on l4.

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
