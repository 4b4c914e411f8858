"""RSI/Scheduler's reference solution (v0 and v1): shortest prompt first, with an aging bound of 4 s.

A prompt's key is its arrival time plus half a second per thousand prompt tokens, at most 4: short prompts go
ahead of long ones that arrived shortly before them, and no prompt is passed over for more than 4 s, so the
no-starvation check holds. Of the bounds tried (1 to 8 s, 0.5 to 1.4 s per thousand tokens) it is the one
that passed on every seed tried on both settings (H200: seeds 0, 1, 1000, +6 % to +15 %; L4: 0, 1, 2, +8 % to
+55 %); the 8 s bound failed the H200's seed 1000. Hidden with the rest of `rsi_env.tasks` (no sandbox sees it).
"""

from __future__ import annotations

from rsi_env.tasks.scheduler.env import POLICY_FILE, SchedulerEnv

__all__ = ["REFERENCE_POLICY", "reference_files"]

REFERENCE_POLICY = '''"""Shortest prompt first, with an aging bound: a prompt is passed over for at most 4 s."""


def waiting_key(request) -> float:
    return request.arrival_s + min(request.prompt_tokens / 2000.0, 4.0)


def victim_key(request) -> float:
    return request.arrival_s
'''


def reference_files(env: SchedulerEnv) -> dict[str, str]:
    """The reference ``policy.py`` (the engine flags stay at vLLM's defaults)."""
    return {POLICY_FILE: REFERENCE_POLICY}
