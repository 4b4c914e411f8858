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
    stay within the 1 % budget. The objective is output tokens/s on short-answer and long-context traffic.
    ## Arguments

    ``gym.make("RSI/Quantization-v0", tier="sim"|"real", model=None, hardware=None, workloads=None, max_steps=None,
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
