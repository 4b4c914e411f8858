"""RSI/Quantization-v0: Trade precision for speed (fp8 weights, fp8 KV cache) within a declared quality budget."""

from __future__ import annotations

from rsi_env.envs.core import RsiEnv

__all__ = ["QuantizationEnv"]


class QuantizationEnv(RsiEnv):
    """Trade precision for throughput — fp8 weights, fp8 KV cache — within a declared quality budget.

    ## Description

    Online fp8 weights (``quantization="fp8"``) halve the bytes every decode step reads and double the
    matrix rate on chips with fp8 units; an fp8 KV cache doubles the blocks and halves the KV reads.
    Each has a declared accuracy cost (task data: 0.6 % and 0.3 % of a quality score); the sum must
    stay within the 1 % budget. The objective is output tokens/s on short-answer and long-context traffic
    from 256 concurrent users, under TTFT <= 3 s and TPOT <= 40 ms for 90 % of requests.

    ## Arguments, Action Space, Observation Space

    As every ``RSI/*`` env (see :class:`rsi_env.envs.core.RsiEnv`); ``model`` and ``hardware`` default to
    llama-3.1-8b on h200.

    ## Rewards

    Continuous: the objective's log-ratio gain over the best so far, vLLM's defaults scoring 0 (only new
    bests pay), minus each measurement's simulated GPU-seconds x 0.0002. Binary, on submit: +1 if the
    workloads are untouched, the precision is within the declared quality budget (1%), every workload
    measured without error and met its SLO attainment, and the objective beats the defaults by 5%.

    ## Starting State

    vLLM 0.26's defaults written to ``serving.yaml``, measured as the baseline.

    ## Episode End

    Terminates on submit; truncates after ``max_steps`` (40) steps. At most 30 measurements.

    ## Version History

    * v0: first release.
    """

    task_id = "RSI/Quantization-v0"
