"""`NewTokenRatio`: SGLang's guess of how much of its ``max_new_tokens`` a running request will still generate.

Read from ``managers/scheduler_components/new_token_ratio_tracker.py`` (0.5.17). Admission reserves each running
request's remaining output times this ratio. It starts at ``init = min(0.7 * schedule_conservativeness, 1)``, falls by
``(init - min) / 600`` every decode step that needs no retraction down to ``min = init * 0.14``, is set after a
retraction to what the remaining batch has generated plus 20 steps each over what it may generate, and returns to
``init`` when the scheduler goes idle (the environment defaults SGLANG_INIT_NEW_TOKEN_RATIO,
SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS, SGLANG_RETRACT_DECODE_STEPS).
"""

from __future__ import annotations

from collections.abc import Sequence

from rsi_env.sim.sglang.request import Req

__all__ = ["INIT_RATIO", "MIN_RATIO_FACTOR", "DECAY_STEPS", "RETRACT_DECODE_STEPS", "NewTokenRatio"]

INIT_RATIO = 0.7
MIN_RATIO_FACTOR = 0.14
DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20


class NewTokenRatio:
    """The ratio, its floor and its decay for one ``schedule_conservativeness``."""

    def __init__(self, schedule_conservativeness: float) -> None:
        self.init = min(INIT_RATIO * schedule_conservativeness, 1.0)
        self.min = min(self.init * MIN_RATIO_FACTOR, 1.0)
        self.decay = (self.init - self.min) / DECAY_STEPS
        self.current = self.init

    def decay_step(self) -> None:
        self.current = max(self.current - self.decay, self.min)

    def reset(self) -> None:
        self.current = self.init

    def after_retract(self, remaining: Sequence[Req]) -> None:
        """The ratio a retraction leaves: the kept requests' output so far, plus a margin, over their budgets."""
        decoded = sum(r.generated for r in remaining)
        budget = sum(r.output_len for r in remaining)
        self.current = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(remaining)) / (budget + 1))
