"""rsi-env's action, observation and state as OpenEnv's models (``openenv.core``'s pydantic ``Action``,
``Observation`` and ``State``): what an OpenEnv client sends and gets back from `RsiOpenEnv`.

The action's fields are typed loosely on purpose: OpenEnv refuses a payload that fails its model before the
env sees it, with a bare "Invalid message", so every check that can name the problem is made by the env
instead (`RsiOpenEnv.step`), which spends a step on the refusal and says why in ``error`` and ``text``. The JSON
schema (``/schema``) still states each field's type.
"""

from __future__ import annotations

import math
from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import ConfigDict, Field

from rsi_env.engine.plain import plain
from rsi_env.wrappers.tool_calls import TOOL_NAMES

__all__ = ["RsiAction", "RsiObservation", "RsiState", "finite"]


def finite(value: Any) -> Any:
    """``value`` as JSON holds it (`rsi_env.engine.plain`), every non-finite float as None (JSON has no NaN or inf:
    a best score of -inf before any measurement, a failed measurement's latencies)."""
    value = plain(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


class RsiAction(Action):
    """One step of an episode: a tool call, the env's own action dict, or a request for the tools.

    - a tool call: ``tool_name`` (``set_flag``, ``edit_file``, ``read_file``, ``list_files``, ``run_shell``,
      ``bench``, ``submit``) and ``arguments`` (a JSON object, or its text), as in OpenEnv's ``CallToolAction``
      (whose payloads, ``type: "call_tool"``, are taken as they are);
    - ``action``: the env's ``Dict`` action, ``{"kind": 0..4, "flag", "value", "path", "old", "new", "command"}``
      (docs/architecture.md);
    - ``type: "list_tools"`` (OpenEnv's ``ListToolsAction``): the episode's tools, spending no step.
    """

    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)

    type: Any = Field(default=None, description="'call_tool' (or left out) for a tool call, 'list_tools' for the "
                                                "episode's tools", json_schema_extra={"enum": ["call_tool", "list_tools",
                                                                                               None]})
    tool_name: Any = Field(default=None, description="the tool to call", json_schema_extra={
        "enum": [*TOOL_NAMES, None]})
    arguments: Any = Field(default=None, description="the tool's arguments: a JSON object or its text",
                           json_schema_extra={"type": ["object", "string", "null"]})
    action: Any = Field(default=None, description="the env's own action dict (instead of a tool call)",
                        json_schema_extra={"type": ["object", "null"]})


class RsiObservation(Observation):
    """What the agent sees after a reset or a step; ``reward`` and ``done`` (terminated or truncated) as OpenEnv's.

    ``text`` is the tool's result (the command's output, an error, the verdict); ``error`` says why an action was
    refused (None when it was taken). ``telemetry`` is the observation's telemetry by field (rates and latencies
    as ratios to vLLM's defaults), ``measured`` the last measurement's raw `Telemetry` per workload (seconds,
    tokens). ``tools`` holds the episode's tools (OpenAI's ``tools=`` form) after a reset or a ``list_tools``;
    ``allowed_tools`` names those that may be called now.
    """

    text: str = ""
    error: str | None = None
    truncated: bool = False
    passed: bool | None = Field(default=None, description="the submission's verdict (None before submit)")
    score: float | None = Field(default=None, description="the last measurement's objective (a log ratio to the "
                                                          "defaults)")
    best_score: float | None = None
    telemetry: dict[str, float | None] = Field(default_factory=dict)
    measured: list[dict[str, Any]] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict, description="the flags set, as vLLM names them")
    steps_left: int = 0
    measurements_left: int = 0
    allowed_tools: list[str] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)


class RsiState(State):
    """The session's episode: what it plays (a suite instance, or an env id with its kwargs and seed) and how far
    it has got. ``episode_id`` and ``step_count`` are OpenEnv's; ``replay`` is the env's own ``state()``
    (task, kwargs, seed, actions, rewards), which `rsi_env.envs.state.validate` replays."""

    instance: str | None = None
    env_id: str | None = None
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None
    task: str | None = None
    max_steps: int = 0
    measurements: int = 0
    max_measurements: int = 0
    total_reward: float = 0.0
    done: bool = False
    passed: bool | None = None
    sandbox: str | None = None
    replay: dict[str, Any] = Field(default_factory=dict)
