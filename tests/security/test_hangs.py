"""The red team's clock: code that hangs, or takes just under each run's own timeout, costs one step seconds.

A step may run the agent's code several times (an auto-bench, each hidden check, a clean-start
submit). Each run has a timeout of its own; an agent whose code waits just under it in every run
would hold the step for their sum, and code that never ends for as long as the longest allows.
Every step must come back within `STEP_BOUND_S` with the reason in its text, and the episode must go
on (a shell command still answers). The bar is 20 s; the test holds each step to the step's deadline
(`rsi_env.sandbox.deadline`) plus a few seconds for the sandboxes' start and the trusted work around
them, so that two runs just under 10 s each (19 s without a deadline) already fail it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.sandbox.deadline import ACTION_TIMEOUT_S
from rsi_env.tasks.bugfix.templates import ENGINE_FILES

BACKEND = "bubblewrap"
STEP_BOUND_S = min(20.0, ACTION_TIMEOUT_S + 4.0)  # the bar: no single action hangs past 20 s
HANG = "import time\ntime.sleep(3600)\n"


def _just_under(timeout_s: float) -> str:
    """Module text that waits just under a run's own timeout, then lets the rest of the module load."""
    return f"import time\ntime.sleep({timeout_s - 0.5})\n"


# Per family: how its episode is made, the file the agent prepends to, and what it prepends.
CASES: dict[str, tuple[str, dict[str, Any], str, str]] = {
    # BugFix's harness run has 20 s: a submit runs it twice (the hidden checks, then the measurement).
    "bugfix: every run just under its timeout": ("RSI/BugFix-v0", {}, ENGINE_FILES[0], _just_under(20.0)),
    # DayZero's loader runs several times per check (10 s each), then the block (60 s).
    "dayzero: the loader just under its timeout": ("RSI/DayZero-v0", {}, "spec.py", _just_under(10.0)),
    "dayzero: a block that never ends": ("RSI/DayZero-v0", {}, "block.py", HANG),
    # The policy's keys get 10 s per run; a submit asks for them on uncached runs, more than once.
    "scheduler: the policy just under its timeout": ("RSI/Scheduler-v0", {}, "policy.py", _just_under(10.0)),
    # The kernel's process has 15 s to start.
    "kernel: a start just under its deadline": ("RSI/Kernel-v0", {"op": "silu_and_mul"}, "kernel.py",
                                                _just_under(15.0)),
}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str, str]]:
    task, kwargs, path, prefix = CASES[request.param]
    env = gym.make(task, sandbox=BACKEND, **kwargs).unwrapped
    env.reset(seed=0)
    try:
        yield env, path, prefix
    finally:
        env.close()


def _timed(env: Any, action: dict[str, Any]) -> tuple[str, float, bool]:
    t0 = time.monotonic()
    obs, reward, terminated, _, _ = env.step(action)
    assert reward == reward  # a number, not NaN
    return str(obs["text"]), time.monotonic() - t0, bool(terminated)


def test_no_step_of_a_hanging_workspace_passes_the_bound(case: tuple[Any, str, str]) -> None:
    env, path, prefix = case
    text = env.workspace.read(path)
    future = "from __future__ import annotations\n"  # must stay first: the wait goes after it
    edit = ({"old": future, "new": future + prefix} if future in text else
            {"old": text.splitlines(keepends=True)[0], "new": prefix + text.splitlines(keepends=True)[0]})
    # The edit auto-benches the workspace (a run of the agent's code), the bench runs it again, and submit
    # judges it from a clean start: each step is held as long as the code can make it.
    steps = [{"kind": 1, "path": path, **edit}, {"kind": 3},
             {"kind": 2, "command": "echo alive"}, {"kind": 4}]
    for action in steps:
        text, took, terminated = _timed(env, action)
        assert took < STEP_BOUND_S, f"{action['kind']}: {took:.1f} s\n{text[-600:]}"
        if action["kind"] == 2:
            assert "alive" in text, text[-600:]
    assert terminated and "FAILED" in text, text[-600:]
    assert any(w in text for w in ("did not finish", "does the kernel hang", "did not answer")), text[-900:]
