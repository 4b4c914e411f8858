"""Episode states that serialise, and `validate`: replay a state and say whether its reward still holds.

A state is the task id, the env's keyword arguments, the reset seed, the actions and the rewards
they earned (CompilerGym's ``CompilerEnvState``). Replaying it on a fresh env must reproduce every
reward: the sim tier is deterministic, so any difference means the environment, the calibration or
the state changed — and the reported reward cannot be trusted.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ValidationResult", "load_state", "save_state", "validate"]


@dataclass
class ValidationResult:
    ok: bool
    expected_total: float
    replayed_total: float
    mismatches: list[tuple[int, float, float]] = field(default_factory=list)
    error: str | None = None


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


def save_state(state: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(_plain(state), indent=1))


def load_state(path: str | Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(path).read_text())
    return data


def validate(state: dict[str, Any], rel_tol: float = 1e-9) -> ValidationResult:
    """Replay ``state`` on a new env and compare the rewards step by step."""
    import gymnasium as gym

    expected = [float(r) for r in state["rewards"]]
    env = gym.make(state["task"], **{k: v for k, v in state["kwargs"].items() if v is not None})
    try:
        env.reset(seed=state["seed"])
        got = []
        for a in state["actions"]:
            _, r, term, trunc, _ = env.step(a)
            got.append(float(r))
            if term:
                break
    except Exception as exc:  # a state that no longer replays is an invalid state, with the reason
        return ValidationResult(False, sum(expected), math.nan, [], f"{type(exc).__name__}: {exc}")
    finally:
        env.close()
    bad = [(i, e, g) for i, (e, g) in enumerate(zip(expected, got, strict=False))
           if not math.isclose(e, g, rel_tol=rel_tol, abs_tol=1e-12)]
    if len(got) != len(expected):
        bad.append((min(len(got), len(expected)), math.nan, math.nan))
    return ValidationResult(not bad, sum(expected), sum(got), bad)
