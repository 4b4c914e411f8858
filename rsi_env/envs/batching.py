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

    ## Arguments, Action Space, Observation Space

    As every ``RSI/*`` env (see :class:`rsi_env.envs.core.RsiEnv`); ``model`` and ``hardware`` default to
    llama-3.1-8b on h200. ``engine="sglang"``: the same job on SGLang 0.5.17 (sim tier), from SGLang's defaults,
    tuning ``max_running_requests``, ``chunked_prefill_size``, ``max_prefill_tokens``, ``cuda_graph_max_bs`` and
    ``schedule_conservativeness``.

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
