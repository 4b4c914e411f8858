"""`TextActions`: drive an `RsiEnv` with lines of text, the way an LLM agent writes them.

The action is a string in the syntax of :data:`TEXT_SYNTAX` (``set max_num_seqs 512``, an ``edit``
with a SEARCH/REPLACE block, ``run CMD``, ``bench``, ``submit``), parsed into the env's ``Dict``
action by :func:`parse_text_action`. Text that does not parse spends a step and comes back as an
error naming the problem, followed by the syntax; nothing reaches the engine. The observation and
its ``action_mask`` (over the env's five kinds) are the env's own.
"""

from __future__ import annotations

import shlex
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rsi_env.engine.safe_io import load_yaml, shorten
from rsi_env.envs.actions import BENCH, EDIT, KIND_NAMES, SHELL, SUBMIT, check_action
from rsi_env.envs.observation import CHARSET
from rsi_env.errors import ActionError, RsiEnvError, TextActionError, YamlError
from rsi_env.wrappers.masked import MaskedActions, StepResult

__all__ = ["TEXT_SYNTAX", "TextActionError", "TextActions", "parse_text_action"]

TEXT_SYNTAX = """\
One action per message:
  set FLAG VALUE      set an engine flag to a value on its ladder (VALUE as YAML: 512, true, null, fp8, [1, 2, 4])
  edit PATH           replace text in a workspace file; the lines after it are one block:
<<<<<<< SEARCH
exact text to find (leave empty to write the whole file)
=======
text to put in its place
>>>>>>> REPLACE
  run COMMAND         run a shell command in the workspace (e.g. run cat serving.yaml)
  bench               measure the current configuration
  submit              end the episode; the final configuration is verified"""

_SEARCH, _DIVIDER, _REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
_MAX_TEXT = 2 * 8192 + 512


def _parse_edit(head: str, body: list[str]) -> dict[str, Any]:
    try:
        parts = shlex.split(head)
    except ValueError as exc:
        raise TextActionError(f"edit: cannot read the path ({exc})") from None
    if len(parts) != 1:
        raise TextActionError("edit takes one PATH on its first line, then a SEARCH/REPLACE block")
    path = shorten(parts[0])
    lines = [ln.rstrip("\r") for ln in body]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or lines[0].strip() != _SEARCH:
        raise TextActionError(f"edit {path}: the line after it must be {_SEARCH!r}")
    if lines[-1].strip() != _REPLACE:
        raise TextActionError(f"edit {path}: the block must end with {_REPLACE!r}")
    dividers = [i for i, ln in enumerate(lines) if ln.strip() == _DIVIDER]
    if len(dividers) != 1:
        raise TextActionError(f"edit {path}: the block needs exactly one {_DIVIDER!r} line, found {len(dividers)}")
    old = "\n".join(lines[1:dividers[0]])
    new = "\n".join(lines[dividers[0] + 1:-1])
    return {"kind": EDIT, "path": parts[0], "old": old, "new": new + "\n" if old == "" else new}


def parse_text_action(text: str, env: Any) -> dict[str, Any]:
    """The env action ``text`` stands for (``env`` builds flag actions), or `TextActionError` saying why not.

    What it returns is inside ``env.action_space`` (checked by `rsi_env.envs.actions.check_action`).
    """
    action = _parse(text, env)
    try:
        check_action(action, env.action_space)
    except ActionError as exc:
        raise TextActionError(str(exc)) from None
    return action


def _parse(text: str, env: Any) -> dict[str, Any]:
    if not isinstance(text, str):
        raise TextActionError(f"an action is a string, got {type(text).__name__}")
    lines = text.strip().splitlines()
    if not lines:
        raise TextActionError("empty action")
    verb, _, rest = lines[0].strip().partition(" ")
    verb, rest = verb.lower(), rest.strip()
    if verb in ("bench", "submit"):
        if rest or len(lines) > 1:
            raise TextActionError(f"{verb} takes no arguments")
        return {"kind": BENCH if verb == "bench" else SUBMIT}
    if verb == "run":
        command = "\n".join([rest, *lines[1:]]).strip()
        if not command:
            raise TextActionError("run needs a COMMAND, e.g. run cat serving.yaml")
        return {"kind": SHELL, "command": command}
    if verb == "set":
        name, _, raw = rest.partition(" ")
        if not name or not raw.strip() or len(lines) > 1:
            raise TextActionError("set takes a FLAG and a VALUE on one line, e.g. set max_num_seqs 512")
        try:
            value = load_yaml(raw)
        except YamlError as exc:
            raise TextActionError(f"set {shorten(name)}: cannot read the value {shorten(raw.strip())!r} ({exc})") from None
        try:
            result: dict[str, Any] = env.flag_action(name, value)
        except RsiEnvError as exc:
            raise TextActionError(str(exc)) from None
        return result
    if verb == "edit":
        return _parse_edit(rest, lines[1:])
    shown = ascii(lines[0][:60])
    raise TextActionError(f"unknown action {shown}: start with one of set, edit, run, bench, submit")


class TextActions(MaskedActions, gym.utils.RecordConstructorArgs):
    """``Text`` actions (:data:`TEXT_SYNTAX`) parsed into the env's ``Dict``; parse errors come back as text."""

    def __init__(self, env: gym.Env[dict[str, Any], dict[str, Any]]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env, spaces.Text(_MAX_TEXT, min_length=0, charset=CHARSET), len(KIND_NAMES))

    def apply(self, action: Any) -> StepResult:
        try:
            act = parse_text_action(action, self.rsi)
        except RsiEnvError as exc:
            return self.refuse(f"{exc}\n{TEXT_SYNTAX}")
        return self.env.step(act)

    def mask(self) -> np.ndarray:
        return self.kind_mask.copy()
