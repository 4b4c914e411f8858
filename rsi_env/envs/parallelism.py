"""RSI/Parallelism-v0.

Split a 70B model over N GPUs (tensor, pipeline, data parallel) for the lowest cost per million tokens under an SLO.
"""

from __future__ import annotations

from rsi_env.envs.core import RsiEnv

__all__ = ["ParallelismEnv"]


class ParallelismEnv(RsiEnv):
    """Split Llama-3.1-70B over N GPUs for the lowest cost per million SLO-meeting tokens.

    ## Description

    Tensor, pipeline and data parallel sizes (their product at most ``num_gpus``, 8 by default), with
    ``max_num_seqs`` and the token budget: more replicas add throughput, more tensor parallelism cuts
    latency but adds all-reduces. The objective, driven by 256 concurrent users, is the cost per million
    output tokens of requests that meet TTFT <= 5 s and TPOT <= 60 ms, lower is better; the start is
    tensor_parallel_size=8.

    ## Arguments, Action Space, Observation Space

    As every ``RSI/*`` env (see :class:`rsi_env.envs.core.RsiEnv`); ``model`` and ``hardware`` default to
    llama-3.1-70b on h200. ``variant="x2"``: at most two GPUs, what one host of two H200s runs — Llama-3.1-8B
    on one GPU or both (tensor or pipeline parallel, or two replicas), starting at tensor_parallel_size=2, on
    both tiers (``configs/eval/parallelism_x2_h200.yaml`` is its two-tier evaluation). ``engine="sglang"``:
    SGLang 0.5.17 (sim tier, the default setting), from ``tp_size=8``, tuning ``tp_size``, ``dp_size``,
    ``max_running_requests`` and ``chunked_prefill_size``; the SGLang sim refuses ``dp_size`` > 1 today (the
    measurement's error says so).

    ## Rewards

    Continuous: the objective's log-ratio gain over the best so far, vLLM's defaults scoring 0 (only new
    bests pay), minus each measurement's simulated GPU-seconds x 0.0002. Binary, on submit: +1 if the
    workloads are untouched, the precision is as the task fixes it, every workload measured without error and met
    its SLO attainment, and the objective beats the defaults by 5%.

    ## Starting State

    vLLM 0.26's defaults plus {'tensor_parallel_size': 8} written to ``serving.yaml``, measured as the baseline.

    ## Episode End

    Terminates on submit; truncates after ``max_steps`` (40) steps. At most 30 measurements.

    ## Version History

    * v0: first release.
    """

    task_id = "RSI/Parallelism-v0"
