"""The action's deadline: one budget of wall time shared by every run of the agent's code within one step.

Each run of the agent's code (a bench's harness, each hidden check, a clean-start submit) has its own
timeout, but one step may start several of them, and code that hangs would then hold the step for the
sum: a step must come back within seconds, whatever the agent wrote. Inside `action_deadline` every
`rsi_env.sandbox.fresh.run_fresh` gets at most what is left of the step's budget (`allowance`), and a run
with nothing left is not started: it reads as timed out, as a run that hung does. The deadline is a
context variable, so it follows the step through every call without being passed along, and a nested
deadline never extends the one around it.

What runs under no deadline: trusted runs that are slow by nature and not the agent's to stretch (a
real vLLM engine start, a hidden reference computed once), which run inside `untimed` and keep their own
timeouts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["ACTION_TIMEOUT_S", "Allowance", "action_deadline", "allowance", "untimed"]

# A step's budget for the agent's code: a hostile step ends within it (plus the sandboxes' start and the
# trusted work around them), under the 20 s a step may take before it counts as hung.
ACTION_TIMEOUT_S = 15.0

_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("rsi_action_deadline", default=None)


@dataclass(frozen=True)
class Allowance:
    """How long a run may take: its own timeout, or less where the step's deadline is nearer (``cut``)."""

    timeout_s: float
    cut: bool = False
    budget_s: float | None = None  # the step's whole budget, when a deadline is in force

    @property
    def spent(self) -> bool:
        """Nothing is left of the step's budget: the run is not started."""
        return self.timeout_s <= 0.0

    def describe(self) -> str:
        """The limit in words, for a message that says a run timed out."""
        if self.cut:
            return f"within what was left of the action's {self.budget_s:.0f} s"
        return f"within {self.timeout_s:.0f} s"


@contextmanager
def action_deadline(seconds: float | None) -> Iterator[None]:
    """Within this block, runs of the agent's code share ``seconds`` of wall time (None: no deadline)."""
    if seconds is None:
        yield
        return
    now = time.monotonic()
    outer = _DEADLINE.get()
    mine = (now + float(seconds), float(seconds))
    token = _DEADLINE.set(mine if outer is None or mine[0] < outer[0] else outer)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@contextmanager
def untimed() -> Iterator[None]:
    """Within this block, runs keep their own timeouts whatever the step's deadline (trusted, slow by nature)."""
    token = _DEADLINE.set(None)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def allowance(timeout_s: float) -> Allowance:
    """The time a run asking for ``timeout_s`` may have now."""
    current = _DEADLINE.get()
    if current is None:
        return Allowance(timeout_s)
    end, budget = current
    left = max(end - time.monotonic(), 0.0)
    if left < timeout_s:
        return Allowance(left, cut=True, budget_s=budget)
    return Allowance(timeout_s, budget_s=budget)
