"""The driver's warm-up: requests that make the engine run, before any measurement, the batch shapes it will meet.

vLLM compiles some kernels on first use of a batch shape, not at start-up: Triton compiles the fused-MoE
kernel again for each range of batch sizes its tuning table distinguishes and for whether its integer
arguments are divisible by 16 (vLLM warns: "Triton kernel JIT compilation during inference ... consider
extending warmup to cover this"). That put pauses of 0.4-2 s inside about one in three of a MoE model's
measurements. A few short requests do not reach those shapes; this warm-up also sends bursts whose prompts
fill the token budget, then two thirds of it, and so on down to one prompt — each size twice, once in
prompts of ``PROMPT`` tokens and once of ``PROMPT - 1`` (a total not divisible by 16) — so step sizes from
one prompt to a full budget, no two more than 1.5x apart, have run once in both forms.
"""

from __future__ import annotations

from rsi_env.engine.workload import Workload

__all__ = ["PROMPT", "warmup_workloads"]

PROMPT = 256  # tokens per warm-up prompt: each burst holds budget / PROMPT of them


def warmup_workloads(max_num_batched_tokens: int, max_num_seqs: int, max_model_len: int) -> list[Workload]:
    """A few short requests, then bursts of prompts filling the budget, 2/3 of it, ... one prompt, two of each size.

    Each burst is capped at ``max_num_seqs`` prompts (more could not share a step) and its prompts at what
    ``max_model_len`` leaves for two output tokens.
    """
    out = [Workload.from_dict({"name": "warmup", "seed": 999, "requests": 16, "prompt_tokens": 64,
                               "output_tokens": 16})]
    prompt = max(1, min(PROMPT, max_model_len - 2))
    n = max(1, min(max_num_seqs, -(-max_num_batched_tokens // prompt)))
    seed = 1000
    while True:
        for p in sorted({prompt, max(1, prompt - 1)}, reverse=True):
            out.append(Workload.from_dict({"name": f"warmup-{n}x{p}", "seed": seed, "requests": n,
                                           "prompt_tokens": p, "output_tokens": 2,
                                           "arrival": {"process": "burst"}}))
            seed += 1
        if n == 1:
            return out
        n = max(1, n * 2 // 3)
