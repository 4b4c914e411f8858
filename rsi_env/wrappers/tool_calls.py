"""`ToolCalls`: drive an `RsiEnv` with OpenAI-style tool calls, the way chat-trained LLM agents act.

`tool_schemas` gives the env's actions as tools whose parameters are JSON Schema: ``set_flag``,
``edit_file``, ``read_file``, ``list_files``, ``run_shell``, ``bench`` and ``submit``. An action is one
call, ``{"name": ..., "arguments": ...}`` (what a chat completion's ``tool_calls[i].function`` holds,
arguments as a JSON string or an object), given as that dict or as its JSON text; the observation's text
is the tool's result. ``read_file`` and ``list_files`` run in the episode's sandbox (``cat``, ``find``), so
they see exactly what the agent's shell sees and spend a step as a shell command does. A call that names no
tool, leaves out an argument, adds one, or gives one of the wrong type spends a step and comes back as an
error naming the problem, followed by the tools' names; nothing reaches the engine.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rsi_env.engine.safe_io import shorten
from rsi_env.envs.actions import BENCH, EDIT, FLAG, SHELL, SUBMIT, check_action
from rsi_env.envs.core import RsiEnv
from rsi_env.envs.observation import CHARSET
from rsi_env.errors import ActionError, RsiEnvError, ToolCallError
from rsi_env.wrappers.ladders import rsi_env_of
from rsi_env.wrappers.masked import MaskedActions, StepResult

__all__ = ["TOOL_NAMES", "ToolCallError", "ToolCalls", "parse_tool_call", "tool_schemas"]

# Each tool, the action kind it becomes, and its arguments (name -> JSON Schema), all of them required.
_TEXT = {"type": "string"}
_TOOLS: dict[str, tuple[int, str, dict[str, dict[str, Any]]]] = {
    "set_flag": (FLAG, "Set an engine flag to a value on its ladder; the change is measured on the next bench "
                       "(or at once where the env benches after every change).",
                 {"flag": _TEXT, "value": {"type": ["number", "integer", "boolean", "string", "null", "array"]}}),
    "edit_file": (EDIT, "Replace the exact text `old` with `new` in a workspace file; old='' writes the whole "
                        "file.", {"path": _TEXT, "old": _TEXT, "new": _TEXT}),
    "read_file": (SHELL, "Print a workspace file.", {"path": _TEXT}),
    "list_files": (SHELL, "List the workspace's files.", {}),
    "run_shell": (SHELL, "Run a shell command in the workspace's sandbox (no network, timed).", {"command": _TEXT}),
    "bench": (BENCH, "Measure the current configuration on the task's workloads (spends a measurement).", {}),
    "submit": (SUBMIT, "End the episode: the final state is verified from a clean start and rewarded.", {}),
}
TOOL_NAMES = tuple(_TOOLS)
_MAX_CALL = 2 * 8192 + 1024
_JSON_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "number": (int, float), "integer": (int,),
                                             "boolean": (bool,), "null": (type(None),), "array": (list,)}


def _ladders(env: RsiEnv) -> str:
    fixed = env.fixed_flags()
    return "; ".join(f"{name}: {shorten(list(env.task.ladder(name)), 120)}" for name in env.flag_names
                     if name not in fixed)


def tool_schemas(env: gym.Env[Any, Any]) -> list[dict[str, Any]]:
    """The env's tools in the chat completions API's form (``tools=``); ``set_flag`` only where it has flags."""
    rsi = rsi_env_of(env)
    out = []
    for name, (kind, text, args) in _TOOLS.items():
        if kind == FLAG and not rsi.flag_names:
            continue
        props = {k: dict(v) for k, v in args.items()}
        if name == "set_flag":
            props["flag"]["enum"] = [f for f in rsi.flag_names if f not in rsi.fixed_flags()]
            text = f"{text} Ladders: {_ladders(rsi)}."
        if name in ("edit_file", "read_file") and rsi.task.editable_files:
            text = f"{text} Editable: {', '.join(rsi.task.editable_files)}."
        out.append({"type": "function", "function": {
            "name": name, "description": text,
            "parameters": {"type": "object", "properties": props, "required": list(props),
                           "additionalProperties": False}}})
    return out


def _arguments(name: str, raw: Any) -> dict[str, Any]:
    if raw is None or raw == "":
        raw = {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ToolCallError(f"{name}: the arguments are not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(raw, dict):
        raise ToolCallError(f"{name}: the arguments must be a JSON object, got {type(raw).__name__}")
    spec = _TOOLS[name][2]
    extra = sorted(set(raw) - set(spec))
    if extra:
        raise ToolCallError(f"{name}: unknown argument(s) {shorten(extra)}; it takes {list(spec) or 'none'}")
    missing = [k for k in spec if k not in raw]
    if missing:
        raise ToolCallError(f"{name}: argument {missing[0]!r} is missing; it takes {list(spec)}")
    for key, schema in spec.items():
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        value = raw[key]
        ok = any(isinstance(value, _JSON_TYPES[k]) for k in kinds)
        if isinstance(value, bool) and "boolean" not in kinds:  # JSON's true is no number
            ok = False
        if not ok:
            raise ToolCallError(f"{name}: argument {key!r} must be {' or '.join(kinds)}, "
                                f"got {type(value).__name__} {shorten(value)}")
    return raw


def _workspace_path(name: str, path: str) -> str:
    """``path`` for the sandbox's shell: relative, inside the workspace by its spelling (the sandbox holds no more)."""
    if not path.strip() or "\x00" in path:
        raise ToolCallError(f"{name}: the path is empty or holds a NUL byte")
    if path.startswith("/") or ".." in path.split("/"):
        raise ToolCallError(f"{name}: {shorten(path)!r} is outside the workspace; give a path relative to it")
    return shlex.quote(path)


def parse_tool_call(call: Any, env: gym.Env[Any, Any]) -> dict[str, Any]:
    """The env action a tool call stands for, or `ToolCallError` saying why there is none."""
    rsi = rsi_env_of(env)
    if isinstance(call, str):
        try:
            call = json.loads(call)
        except json.JSONDecodeError as exc:
            raise ToolCallError(f"a tool call is JSON {{\"name\": ..., \"arguments\": ...}} ({exc.msg})") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ToolCallError('a tool call is an object {"name": ..., "arguments": {...}}')
    unknown = sorted(set(call) - {"name", "arguments"})
    if unknown:
        raise ToolCallError(f"a tool call has only 'name' and 'arguments', not {shorten(unknown)}")
    name = call["name"]
    offered = [t["function"]["name"] for t in tool_schemas(rsi)]
    if name not in offered:
        raise ToolCallError(f"unknown tool {shorten(name)!r}")
    args = _arguments(name, call.get("arguments"))
    if name == "set_flag":
        try:
            action = rsi.flag_action(args["flag"], args["value"])
        except RsiEnvError as exc:
            raise ToolCallError(f"set_flag: {exc}") from None
    elif name == "edit_file":
        action = {"kind": EDIT, **args}
    elif name == "read_file":
        action = {"kind": SHELL, "command": f"cat -- {_workspace_path(name, args['path'])}"}
    elif name == "list_files":
        action = {"kind": SHELL, "command": "find . -type f | sed 's|^\\./||' | sort"}
    elif name == "run_shell":
        action = {"kind": SHELL, "command": args["command"]}
    else:
        action = {"kind": _TOOLS[name][0]}
    space = rsi.action_space
    assert isinstance(space, spaces.Dict), "an RSI/* action space is a Dict"
    try:
        check_action(action, space)
    except ActionError as exc:
        raise ToolCallError(f"{name}: {exc}") from None
    return action


class ToolCalls(MaskedActions, gym.utils.RecordConstructorArgs):
    """Tool calls (`tool_schemas`) as actions; the mask is over `TOOL_NAMES`, from the env's own kinds."""

    def __init__(self, env: gym.Env[dict[str, Any], dict[str, Any]]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env, spaces.Text(_MAX_CALL, min_length=0, charset=CHARSET), len(TOOL_NAMES))
        self.tools = tool_schemas(env)

    def apply(self, action: Any) -> StepResult:
        try:
            act = parse_tool_call(action, self.rsi)
        except RsiEnvError as exc:
            offered = ", ".join(t["function"]["name"] for t in self.tools)
            return self.refuse(f"tool call refused: {exc}\ntools: {offered}")
        return self.env.step(act)

    def mask(self) -> np.ndarray:
        offered = {t["function"]["name"] for t in self.tools}
        return np.array([int(n in offered and self.kind_mask[_TOOLS[n][0]]) for n in TOOL_NAMES], dtype=np.int8)
