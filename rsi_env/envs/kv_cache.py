"""RSI/KVCache-v0.

Tune the paged KV cache (memory share, block size, prefix caching, context length) for goodput under SLOs.
"""

from __future__ import annotations

from rsi_env.envs.core import RsiEnv

__all__ = ["KVCacheEnv"]


class KVCacheEnv(RsiEnv):
    """Tune vLLM's paged KV cache for goodput under latency SLOs.

    ## Description

    Long-context requests and chat behind shared system prompts, driven by 128 concurrent users:
    how much memory vLLM takes (``gpu_memory_utilization``), the block size, prefix caching, the
    longest sequence it promises to serve (``max_model_len``) and — only where the task allows fp8 —
    the KV-cache precision decide how many requests fit and how often they are preempted. The objective
    is goodput (requests/s meeting TTFT <= 2 s and TPOT <= 40 ms), as a ratio to vLLM's defaults.
    ## Arguments

    ``gym.make("RSI/KVCache-v0", tier="sim"|"real", model=None, hardware=None, workloads=None, max_steps=None,
    auto_bench=None, seed=None, engine_version="0.26")``: ``model``/``hardware`` default to the
    task's (llama-3.1-8b on h200); ``workloads`` replaces the task's list (frozen names or YAML paths);
    ``auto_bench`` (on by default on sim) measures after every change; ``seed`` offsets the
    workloads' seeds (``reset(seed=...)`` does the same per episode).

    ## Action Space

    DESIGN.md's ``Dict``: ``kind`` (0 flag, 1 edit, 2 shell, 3 bench, 4 submit), ``flag`` (index into
    ``env.unwrapped.flag_names``), ``value`` in [0, 1] (the nearest value on the flag's ladder),
    ``path``/``old``/``new`` (edit ``serving.yaml``; ``old == ""`` writes it whole) and ``command``
    (run in the workspace under bubblewrap, 10 s, 16 KiB of output). ``flag_action(name, value)``
    builds a flag action.

    ## Observation Space

    ``telemetry`` (12 fields: rates and latencies as ratios to vLLM's defaults, preemptions as
    ``log1p``, hit rate and KV usage raw), ``config`` (each flag's position on its ladder),
    ``budget`` (steps and measurements left, as fractions), ``action_mask`` (bench is masked once the
    measurement budget is spent), ``flag_mask``, and ``text`` (the last command's output, error or verdict).

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

    * v0: first release.
    """

    task_id = "RSI/KVCache-v0"
