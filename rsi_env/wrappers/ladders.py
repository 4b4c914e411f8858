"""Where a configuration sits on a task's flag ladders, and whether the env would refuse a configuration.

Every RL view of a flag task moves along the same ladders (``task.ladder(flag)``), so they share
these few functions: the position of a flag's value on its ladder (a flag left at vLLM's default,
``None``, sits where the value vLLM resolves it to sits), the value one notch up or down, and the
reason the environment would refuse a configuration — a precision flag the task fixes, more GPUs
than the episode has, or a configuration vLLM itself refuses (`EngineConfig.resolve`).
"""

from __future__ import annotations

import bisect
import contextlib
import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from rsi_env.engine.config import EngineConfig
from rsi_env.envs.core import RsiEnv
from rsi_env.errors import InvalidConfigError, RsiEnvError

__all__ = ["config_at", "free_flags", "ladder", "position", "refusal", "rsi_env_of", "step_index"]


def rsi_env_of(env: gym.Env[Any, Any]) -> RsiEnv:
    """The `RsiEnv` under any stack of wrappers; a clear error for anything else."""
    base = env.unwrapped
    if not isinstance(base, RsiEnv):
        raise RsiEnvError(f"this wrapper needs an RSI/* environment, got {type(base).__name__}")
    return base


def ladder(env: RsiEnv, flag: str) -> tuple[Any, ...]:
    """The task's ladder of ``flag`` with list values as tuples (the form `EngineConfig` stores)."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in env.task.ladder(flag))


def free_flags(env: RsiEnv) -> list[str]:
    """The task's flags an agent may change (precision flags are fixed unless the task allows fp8)."""
    fixed = env.fixed_flags()
    return [f for f in env.flag_names if f not in fixed]


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def position(env: RsiEnv, cfg: EngineConfig, flag: str) -> float:
    """The index of ``cfg``'s value of ``flag`` on its ladder; fractional between two rungs.

    A value off the ladder — ``None`` (vLLM's default) or one set by an edit — is placed by the
    value vLLM resolves it to (an unset SGLang flag stays unresolved: SGLang sizes it at start); a number
    between two rungs gets a fractional index, so "one notch up" is the next rung above it; anything else
    off the ladder sits half a notch below the first rung.
    """
    rungs = ladder(env, flag)
    raw = getattr(cfg, flag)
    if raw in rungs:
        return float(rungs.index(raw))
    value = raw
    if isinstance(cfg, EngineConfig):  # SGLang resolves its defaults at start (RESOLVED_AT_START): unknown here
        with contextlib.suppress(InvalidConfigError):
            value = getattr(cfg.resolve(env.model, env.hardware, env.tier.engine_version), flag)
    if value in rungs:
        return float(rungs.index(value))
    if _numeric(value) and all(_numeric(r) for r in rungs):
        ordered = sorted(rungs)
        i = bisect.bisect_left(ordered, value)
        if i == 0:
            return -0.5
        if i == len(ordered):
            return len(ordered) - 0.5
        return rungs.index(ordered[i - 1]) + 0.5
    return -0.5


def step_index(env: RsiEnv, cfg: EngineConfig, flag: str, direction: int) -> int | None:
    """The ladder index one notch above or below ``cfg``'s value of ``flag``, or ``None`` past the end."""
    p = position(env, cfg, flag)
    i = math.floor(p) + 1 if direction > 0 else math.ceil(p) - 1
    return i if 0 <= i < len(ladder(env, flag)) else None


def config_at(env: RsiEnv, indices: Mapping[str, int], base: EngineConfig | None = None) -> EngineConfig:
    """``base`` (default: the env's configuration) with each flag of ``indices`` set to that ladder rung.

    Raises `InvalidConfigError` when a value fails `EngineConfig`'s own validation.
    """
    cfg = env.config if base is None else base
    changes = {f: ladder(env, f)[i] for f, i in indices.items()}
    return cfg.replace(**changes) if changes else cfg


def refusal(env: RsiEnv, cfg: EngineConfig) -> str | None:
    """Why the env would refuse to run ``cfg`` (its own checks, then vLLM's), or ``None`` if it would not."""
    try:
        env.check_config(cfg)
    except RsiEnvError as exc:
        return str(exc)
    return None
