"""RSI/Batching-v0.

Tune batching (sequences, token budget, long-prefill cap, CUDA graphs) for throughput under a p99 TPOT SLO.
"""

from __future__ import annotations

from rsi_env.envs.core import RsiEnv

__all__ = ["BatchingEnv"]


class BatchingEnv(RsiEnv):
    """Tune vLLM's continuous batching for throughput under a p99 TPOT SLO.

    ## Description

    Short-prompt/long-answer and many-small-request traffic from 256 concurrent users. The agent sets
    ``max_num_seqs``, the step's token budget ``max_num_batched_tokens``, the long-prefill cap, the
    CUDA-graph capture sizes and ``enforce_eager``; the objective is output tokens/s, scaled down
    whenever fewer than 99 % of requests meet TPOT <= 25 ms.
    ## Arguments

    ``gym.make("RSI/Batching-v0", tier="sim"|"real", model=None, hardware=None, workloads=None, max_steps=None,
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

    task_id = "RSI/Batching-v0"
