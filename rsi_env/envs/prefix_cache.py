"""RSI/PrefixCache-v0.

Serve shared system prompts and multi-turn chat from the prefix cache; time to first token under load.
"""

from __future__ import annotations

from rsi_env.envs.core import RsiEnv

__all__ = ["PrefixCacheEnv"]


class PrefixCacheEnv(RsiEnv):
    """Serve shared system prompts from vLLM's prefix cache with the lowest time to first token.

    ## Description

    Chat traffic behind 8 (and 4 longer) shared system prompts at a fixed request rate. Prefix caching,
    block size (hits are whole blocks), memory share, token budget and long-prefill cap decide how much
    of each prompt is recomputed. The objective is TTFT p90, lower is better, under TTFT <= 300 ms and
    TPOT <= 40 ms for 90 % of requests. (Multi-turn conversations are not modelled yet.)

    ## Arguments, Action Space, Observation Space

    As every ``RSI/*`` env (see :class:`rsi_env.envs.core.RsiEnv`); ``model`` and ``hardware`` default to
    llama-3.1-8b on h200. ``engine="sglang"``: RadixAttention's prefix cache on SGLang 0.5.17 (sim tier), from
    SGLang's defaults, tuning ``disable_radix_cache``, ``schedule_policy`` (``lpm`` serves the longest cached
    prefix first), ``page_size``, ``mem_fraction_static`` and ``chunked_prefill_size``.

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

    task_id = "RSI/PrefixCache-v0"
