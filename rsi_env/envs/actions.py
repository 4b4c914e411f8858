"""Checking an action against the env's ``Dict`` action space: refused, naming the field, never coerced.

An action outside ``action_space`` is an `ActionError` whose message names the field and what it
allows; the env reports it as text and the episode goes on (`rsi_env.envs.core`). The rules:

- the action is a ``dict`` whose keys are fields of the space (an unknown key is refused by name);
- ``kind`` is always needed; the fields its kind uses are needed too (a flag action needs ``flag``
  and ``value``, an edit ``path``, ``old`` and ``new``, a shell action ``command``); fields a kind
  does not use may be left out (docs/architecture.md: they are ignored), or given as ``""`` (how `RsiEnv.state`
  records them), but any other value given must be inside the field's space;
- a ``Discrete`` field takes a Python ``int`` or a NumPy integer (a scalar or a 0-d array, what
  ``space.sample()`` returns) in range; a ``bool`` or a float, even ``4.0``, is refused;
- ``value`` takes a finite real number (Python or NumPy, a scalar or a 0-d array) inside the Box's
  bounds; a ``bool``, a string or an array of another shape is refused;
- a ``Text`` field takes a ``str`` within the space's lengths and character set.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

from rsi_env.engine.safe_io import shorten
from rsi_env.errors import ActionError

__all__ = ["BENCH", "DEFAULTS", "EDIT", "FLAG", "KIND_NAMES", "NEEDS", "SHELL", "SUBMIT", "check_action"]

# The action kinds, as ``kind`` takes them (``rsi_env.SUBMIT`` etc. from the package's top).
FLAG, EDIT, SHELL, BENCH, SUBMIT = range(5)
KIND_NAMES = ("flag", "edit", "shell", "bench", "submit")
# The fields each kind uses (in KIND_NAMES order), and what an unused field left out stands for.
NEEDS: tuple[tuple[str, ...], ...] = (("flag", "value"), ("path", "old", "new"), ("command",), (), ())
DEFAULTS: dict[str, Any] = {"flag": 0, "value": 0.0, "path": "", "old": "", "new": "", "command": ""}


def check_action(action: Any, space: spaces.Dict) -> dict[str, Any]:
    """Every field of ``action`` as a plain value (fields left out at `DEFAULTS`), or `ActionError` naming the field."""
    if not isinstance(action, dict):
        raise ActionError(f"an action is a dict with fields {list(space.spaces)}; got {type(action).__name__}")
    unknown = [k for k in action if k not in space.spaces]
    if unknown:
        raise ActionError(f"unknown action field(s) {shorten(unknown)}; the fields are {list(space.spaces)}")
    if "kind" not in action:
        raise ActionError(f"action field 'kind' is missing: {_kinds()}")
    out = {"kind": _field("kind", action["kind"], space["kind"]), **DEFAULTS}
    needs = NEEDS[out["kind"]]
    for name in space.spaces:
        if name == "kind" or name not in action:
            continue
        value = action[name]
        if name not in needs and isinstance(value, str) and value == DEFAULTS[name]:
            continue  # an unused field recorded empty
        out[name] = _field(name, value, space[name])
    missing = [f for f in needs if f not in action]
    if missing:
        raise ActionError(f"action field {missing[0]!r} is missing: a {KIND_NAMES[out['kind']]} action needs "
                          f"{list(needs)}")
    return out


def _kinds() -> str:
    return ", ".join(f"{k} {n}" for k, n in enumerate(KIND_NAMES))


def _field(name: str, value: Any, space: spaces.Space[Any]) -> Any:
    if isinstance(space, spaces.Discrete):
        return _index(name, value, space)
    if isinstance(space, spaces.Box):
        return _number(name, value, space)
    if isinstance(space, spaces.Text):
        return _text(name, value, space)
    raise ActionError(f"action field {name!r}: no check for a {type(space).__name__} space")  # a new field's space


def _refuse(name: str, allowed: str, value: Any) -> ActionError:
    return ActionError(f"action field {name!r} must be {allowed}; got {shorten(value)} ({type(value).__name__})")


def _index(name: str, value: Any, space: spaces.Discrete) -> int:
    lo, hi = int(space.start), int(space.start) + int(space.n) - 1
    allowed = f"an integer in {lo}..{hi}" + (f" ({_kinds()})" if name == "kind" else "")
    integral = isinstance(value, (int, np.integer)) or (
        isinstance(value, np.ndarray) and value.shape == () and np.issubdtype(value.dtype, np.integer))
    if isinstance(value, (bool, np.bool_)) or not integral:
        raise _refuse(name, allowed, value)
    i = int(value)
    if not lo <= i <= hi:
        raise _refuse(name, allowed, value)
    return i


def _number(name: str, value: Any, space: spaces.Box) -> float:
    lo, hi = float(space.low.min()), float(space.high.max())
    allowed = f"a finite number in [{lo:g}, {hi:g}]"
    real = isinstance(value, (int, float, np.integer, np.floating)) or (
        isinstance(value, np.ndarray) and value.shape == () and
        (np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer)))
    if isinstance(value, (bool, np.bool_)) or not real:
        raise _refuse(name, allowed, value)
    try:
        x = float(value)
    except OverflowError:
        raise _refuse(name, allowed, value) from None
    if not math.isfinite(x) or abs(x) > 1e30 or not lo <= float(np.float32(x)) <= hi:  # the Box holds float32
        raise _refuse(name, allowed, value)
    return x


def _text(name: str, value: Any, space: spaces.Text) -> str:
    allowed = f"text of {space.min_length} to {space.max_length} printable ASCII characters"
    if not isinstance(value, str) or not space.min_length <= len(value) <= space.max_length:
        raise _refuse(name, allowed, value)
    bad = set(value) - space.character_set
    if bad:
        raise ActionError(f"action field {name!r} must be {allowed}; it holds {ascii(''.join(sorted(bad))[:20])}")
    return str(value)
