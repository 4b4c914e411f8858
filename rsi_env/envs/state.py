"""Episode states that serialise, and `validate`: replay a state and say whether everything it claims still holds.

A state is the task id, the env's keyword arguments, the reset seed, the actions and the rewards
they earned (CompilerGym's ``CompilerEnvState``), and what the episode ended with: ``final_config``,
``passed`` and, if given, ``guards``. Replaying it on a fresh env must reproduce every one of them:
the sim tier is deterministic, so any difference means the environment, the calibration or the
state changed — and the reported result cannot be trusted.

A state may come from anyone, so `validate` checks it before replaying it: the task must be an
``RSI/*`` id, the keyword arguments the env's own, and (unless ``trusted=True``) the model,
hardware and workloads must be catalog names (a path would make the replay read a host file),
the sandbox not ``local`` and the shell timeout at most `MAX_REPLAY_SHELL_S`. A bad state is a failed
`ValidationResult` whose ``error`` names the field; `validate` never raises.
"""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsi_env.engine.plain import plain
from rsi_env.engine.safe_io import shorten

__all__ = ["MAX_REPLAY_SHELL_S", "ValidationResult", "load_state", "save_state", "validate"]

REQUIRED = ("task", "kwargs", "seed", "actions", "rewards")
OUTCOMES = ("final_config", "passed", "guards")  # recomputed by the replay when the state gives them
MAX_REPLAY_SHELL_S = 60.0


@dataclass
class ValidationResult:
    ok: bool
    expected_total: float
    replayed_total: float
    mismatches: list[tuple[int, float, float]] = field(default_factory=list)
    error: str | None = None


class _Invalid(Exception):
    """A state `validate` refuses before or after the replay; the message names the field."""


def save_state(state: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(plain(state), indent=1))


def load_state(path: str | Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(path).read_text())
    return data


# ---- checking a state before it is replayed -------------------------------------------------------------------
def _env_class(task: Any) -> type:
    """The class behind an ``RSI/*`` id; `_Invalid` for anything else (an id of another package, a module path)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    import rsi_env  # noqa: F401  (registers RSI/*)

    if not isinstance(task, str) or not task.startswith("RSI/") or task not in gym.registry:
        raise _Invalid(f"task: {shorten(task)} is not a registered RSI/* environment")
    ep = gym.registry[task].entry_point
    cls = load_env_creator(ep) if isinstance(ep, str) else ep
    assert isinstance(cls, type)
    return cls


def _parameters(cls: type) -> set[str]:
    """The keyword arguments ``cls`` takes, through the ``**kwargs`` it passes to its base classes."""
    names: set[str] = set()
    for c in cls.__mro__:
        init = c.__dict__.get("__init__")
        if init is None:
            continue
        params = list(inspect.signature(init).parameters.values())
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names - {"self", "task", "render_mode"}


def _check_names(key: str, value: Any, known: set[str]) -> None:
    """``value`` (a list of them, for ``workloads``) names entries of the catalog, never files."""
    if key == "workloads" and not isinstance(value, list):
        raise _Invalid(f"kwargs.workloads: {shorten(value)} is not a list of workload names")
    for n in value if key == "workloads" else [value]:
        if not isinstance(n, str) or n not in known:
            raise _Invalid(f"kwargs.{key}: {shorten(n)} is not a catalog name (a replayed state may not name host "
                           "files; validate(state, trusted=True) replays a state you made yourself)")


def _catalog_names(cls: type) -> dict[str, set[str]]:
    from rsi_env.engine.hardware import list_hardware
    from rsi_env.engine.model import list_models
    from rsi_env.engine.workload import list_workloads

    workloads = set(list_workloads())
    folder = getattr(cls, "workload_dir", None)
    if folder is not None and Path(folder).is_dir():
        workloads |= {p.stem for p in Path(folder).glob("*.yaml")}
    return {"model": set(list_models()), "hardware": set(list_hardware()), "workloads": workloads}


def _check_kwargs(cls: type, kwargs: Any, trusted: bool) -> dict[str, Any]:
    """The keyword arguments to make the env with; `_Invalid` naming the first bad one."""
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise _Invalid(f"kwargs: expected a mapping of argument names, got {shorten(kwargs)}")
    unknown = sorted(set(kwargs) - _parameters(cls))
    if unknown:
        raise _Invalid(f"kwargs: {shorten(unknown)} are not arguments of {cls.__name__}")
    given = {k: v for k, v in kwargs.items() if v is not None}
    if not trusted:
        for key, known in _catalog_names(cls).items():
            if key in given:
                _check_names(key, given[key], known)
        if given.get("sandbox") == "local":
            raise _Invalid("kwargs.sandbox: 'local' contains nothing; validate(state, trusted=True) to replay it")
        t = given.get("shell_timeout_s", 0.0)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= MAX_REPLAY_SHELL_S:
            raise _Invalid(f"kwargs.shell_timeout_s: {shorten(t)} is not a number of seconds in [0, {MAX_REPLAY_SHELL_S:g}]")
    return given


def _check_rewards(rewards: Any, actions: Any) -> list[float]:
    if not isinstance(actions, list):
        raise _Invalid(f"actions: expected a list, got {type(actions).__name__}")
    if not isinstance(rewards, list) or len(rewards) != len(actions):
        raise _Invalid(f"rewards: expected a list of one number per action ({len(actions)}), got {shorten(rewards)}")
    for i, r in enumerate(rewards):
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
            raise _Invalid(f"rewards[{i}]: {shorten(r)} is not a finite number")
    return [float(r) for r in rewards]


def _check_state(state: Any, trusted: bool) -> tuple[type, dict[str, Any], list[float]]:
    if not isinstance(state, dict):
        raise _Invalid(f"state: expected a mapping, got {type(state).__name__}")
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise _Invalid(f"state: missing {missing}")
    unknown = sorted(str(k) for k in set(state) - set(REQUIRED) - set(OUTCOMES))
    if unknown:
        raise _Invalid(f"state: unknown fields {shorten(unknown)} (a replay can vouch only for {[*REQUIRED, *OUTCOMES]})")
    seed = state["seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise _Invalid(f"seed: {shorten(seed)} is not a non-negative integer or null")
    if state.get("passed") is not None and not isinstance(state["passed"], bool):
        raise _Invalid(f"passed: {shorten(state['passed'])} is not true, false or null")
    for key in ("final_config", "guards"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            raise _Invalid(f"{key}: {shorten(state[key])} is not a mapping")
    cls = _env_class(state["task"])
    return cls, _check_kwargs(cls, state["kwargs"], trusted), _check_rewards(state["rewards"], state["actions"])


# ---- replaying ------------------------------------------------------------------------------------------------
def _json(x: Any) -> str:
    return json.dumps(plain(x), sort_keys=True, default=repr)


def _outcomes(env: Any) -> dict[str, Any]:
    """What the replayed episode ended with, in the state's terms."""
    v = env.verdict
    return {"final_config": env.config.to_dict(only_set=True), "passed": None if v is None else v.passed,
            "guards": None if v is None else {g.name: g.ok for g in v.guards}}


def _check_outcomes(state: dict[str, Any], replayed: dict[str, Any]) -> None:
    for key in OUTCOMES:
        if key in state and _json(state[key]) != _json(replayed[key]):
            raise _Invalid(f"{key}: the state says {shorten(state[key])}, the replay ends with {shorten(replayed[key])}")


def _replay(state: dict[str, Any], kwargs: dict[str, Any]) -> tuple[list[float], dict[str, Any]]:
    import gymnasium as gym

    env = gym.make(state["task"], **kwargs)
    try:
        env.reset(seed=state["seed"])
        got = []
        for a in state["actions"]:
            _, r, term, trunc, _ = env.step(a)
            got.append(float(r))
            if term or trunc:
                break
        return got, _outcomes(env.unwrapped)
    finally:
        env.close()


def validate(state: Any, rel_tol: float = 1e-9, *, trusted: bool = False) -> ValidationResult:
    """Replay ``state`` on a new env; compare the rewards step by step, then ``final_config``, ``passed``, ``guards``.

    ``trusted=True`` lets the state's kwargs name host files and the ``local`` sandbox (a state you made yourself).
    """
    try:
        _, kwargs, expected = _check_state(state, trusted)
    except _Invalid as exc:
        return ValidationResult(False, math.nan, math.nan, [], str(exc))
    except Exception as exc:  # a state no check foresaw is still only an invalid state
        return ValidationResult(False, math.nan, math.nan, [], f"state: {type(exc).__name__}: {shorten(str(exc))}")
    try:
        got, replayed = _replay(state, kwargs)
    except Exception as exc:  # a state that no longer replays is an invalid state, with the reason
        return ValidationResult(False, sum(expected), math.nan, [], f"{type(exc).__name__}: {shorten(str(exc), 400)}")
    bad = [(i, e, g) for i, (e, g) in enumerate(zip(expected, got, strict=False))
           if not math.isclose(e, g, rel_tol=rel_tol, abs_tol=1e-12)]
    if len(got) != len(expected):
        bad.append((min(len(got), len(expected)), math.nan, math.nan))
    error = None if not bad else f"rewards: {len(bad)} step(s) differ from the replay, first at step {bad[0][0]}"
    if not bad:
        try:
            _check_outcomes(state, replayed)
        except _Invalid as exc:
            error = str(exc)
    return ValidationResult(error is None, sum(expected), sum(got), bad, error)
