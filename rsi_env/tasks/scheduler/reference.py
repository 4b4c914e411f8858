"""RSI/Scheduler-v0's reference solution: shortest prompt first, with an aging bound of 8 s.

A prompt's key is its arrival time plus one second per thousand prompt tokens, at most 8: short prompts go
ahead of long ones that arrived shortly before them, and no prompt is passed over for more than 8 s, so
the no-starvation check holds. Hidden with the rest of `rsi_env.tasks` (no sandbox sees it).
"""

from __future__ import annotations

from rsi_env.tasks.scheduler.env import POLICY_FILE, SchedulerEnv

__all__ = ["REFERENCE_POLICY", "reference_files"]

REFERENCE_POLICY = '''"""Shortest prompt first, with an aging bound: a prompt is passed over for at most 8 s."""


def waiting_key(request) -> float:
    return request.arrival_s + min(request.prompt_tokens / 1000.0, 8.0)


def victim_key(request) -> float:
    return request.arrival_s
'''


def reference_files(env: SchedulerEnv) -> dict[str, str]:
    """The reference ``policy.py`` (the engine flags stay at vLLM's defaults)."""
    return {POLICY_FILE: REFERENCE_POLICY}
