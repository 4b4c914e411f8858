"""The engine's scheduling policy: which waiting request is admitted next, which running one is preempted.

The simulated vLLM engine calls two functions, once per request when it arrives; both return a number.

    waiting_key(request) -> float   smaller keys are admitted first (ties: earlier arrival, then id)
    victim_key(request) -> float    when KV-cache blocks run out, the running request with the largest
                                    key is preempted (its KV cache is recomputed when it runs again)

``request`` has: ``id`` (int), ``arrival_s`` (float, seconds), ``prompt_tokens`` (int, shared prefix
included), ``prefix_group`` (int, -1 when the prompt has no shared system prompt) and ``prefix_tokens``
(int). Its output length is not known in advance. This file runs in a process of its own, a fresh one
per workload, which is sent one request at a time. Keys must be finite numbers, and the same request
must always get the same keys. Every request must still be served: a policy that leaves some request
waiting far longer than first-come-first-served would (starvation) fails the task's checks, which run
on the scored workloads as well as on others.

This file starts as vLLM's default, first come, first served.
"""


def waiting_key(request) -> float:
    """First come, first served: the earliest arrival is admitted first."""
    return request.arrival_s


def victim_key(request) -> float:
    """The latest arrival is preempted first."""
    return request.arrival_s
