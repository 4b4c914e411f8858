"""`RsiOpenEnv`: an rsi-env episode as an OpenEnv ``Environment``, one per client session of ``rsi-env serve``.

OpenEnv (``openenv`` 0.10) serves an ``Environment`` over HTTP and WebSocket: a client's session gets an instance
of its own, and ``reset`` / ``step`` / ``state`` act on it. This one plays a suite instance, or any ``RSI/*`` env,
through the env's tools (`rsi_env.wrappers.tool_calls`) or its own action dict; the same tools are offered over
MCP (``tools/list``, ``tools/call``), each call one step of the session's episode. Its models are in
`rsi_env.integrations.openenv_models`; the server and the CLI in `rsi_env.integrations.openenv_server`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from fastmcp import FastMCP
from fastmcp.tools.base import Tool, ToolResult
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation
from pydantic import PrivateAttr

from rsi_env.engine.safe_io import shorten
from rsi_env.envs.actions import check_action
from rsi_env.errors import ActionError, RsiEnvError, SuiteError
from rsi_env.integrations.openenv_models import RsiAction, RsiObservation, RsiState, finite
from rsi_env.suite.instance import FRONTS, Instance, Suite, load
from rsi_env.wrappers.ladders import rsi_env_of
from rsi_env.wrappers.masked import StepResult
from rsi_env.wrappers.tool_calls import TOOL_NAMES, ToolCalls, parse_tool_call, tool_schemas

__all__ = ["SPLITS", "RsiOpenEnv"]

# OpenEnv's Task API splits: "test" holds every instance of the suite, each front its own.
SPLITS = ("test", *FRONTS)
_HOW = ("reset(instance=ID) plays a suite instance, reset(split=S, index=I) the I-th of a split "
        f"({', '.join(SPLITS)}), reset(env_id='RSI/...', env_kwargs={{...}}, seed=N) any RSI/* env")
_CLOSED = ("this session is closed (its client went away, or it was idle longer than the server's "
           "--idle-timeout): open a new session")
_T = TypeVar("_T")


class _EpisodeTool(Tool):
    """One of the episode's tools over MCP: a ``tools/call`` is one step of the session's episode."""

    _session: RsiOpenEnv = PrivateAttr()

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        obs = await self._session.call_tool_async(self.name, arguments)
        # A refused call is an MCP tool error (its text names the problem); the step it spent is in the episode.
        return ToolResult(content=obs.text, structured_content=obs.model_dump(), is_error=obs.error is not None)


class RsiOpenEnv(MCPEnvironment):
    """An rsi-env episode behind OpenEnv's ``reset`` / ``step`` / ``state``, one per client session.

    ## Reset

    ``reset(instance=ID)`` plays a suite instance: its env, keyword arguments, budget and seed (a ``seed`` given
    must be the instance's). ``reset(split=S, index=I)`` plays the I-th instance of split S (OpenEnv's Task API:
    ``list_splits``, ``list_tasks``, ``get_task``; ``test`` holds every instance, each front is a split).
    ``reset(env_id="RSI/...", env_kwargs={...}, seed=N)`` plays any registered ``RSI/*`` env (its kwargs are
    the caller's: ``sandbox="local"``, which contains nothing, is refused). A reset of the same env and kwargs
    reuses the env; another closes it first. Anything else raises `RsiEnvError` naming what reset takes. The
    reset observation's ``text`` is the task (``TASK.md``) and the first observation; its ``tools`` the episode's.

    ## Action (`RsiAction`)

    A tool call (``tool_name``, ``arguments``: the tools of `rsi_env.wrappers.tool_calls`), the env's own
    action dict (``action``), or ``type: "list_tools"``. A malformed action spends one step, pays 0 and comes
    back with ``error`` (and ``text``) naming the problem; nothing reaches the engine. ``list_tools`` spends
    nothing.

    ## Observation (`RsiObservation`)

    The text, ``reward`` (the env's step reward), ``done`` (submitted, or ``truncated`` at ``max_steps``), the
    telemetry (named ratios to vLLM's defaults, and the raw measurement per workload), the flags set, the
    budget left, the verdict (``passed``) and the tools allowed now.

    ## Episode end

    After ``done`` every step comes back with ``error`` saying so, ``reward`` 0, until a reset.

    ## Sessions

    Every session has its own env, workspace and sandbox (``SUPPORTS_CONCURRENT_SESSIONS``). The env's work
    (reset, steps, MCP tool calls) runs on one thread of the session's own, in order, so that a long bench
    never holds the server's event loop or another session. ``close`` (the client went away, or the server
    reaped it idle) waits for a step in progress, then removes the workspace and sandbox; a step after it
    returns an error observation.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, suite: str | None = "rsi-bench-v1") -> None:
        super().__init__(FastMCP("rsi-env"))
        self._suite_id = suite
        self._env: gym.Env[Any, Any] | None = None
        self._tools: ToolCalls | None = None
        self._playing: tuple[str | None, str, dict[str, Any]] = (None, "", {})  # instance, env id, kwargs
        self._episode_id: str | None = None
        self._last: RsiObservation | None = None
        self._served: list[str] = []
        self._closed = False
        self._lock = threading.RLock()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="rsi-openenv")

    # ---- reset ----------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> RsiObservation:
        obs = self._locked_reset(seed, episode_id, options)
        self._serve_tools()
        return obs

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None,
                          **options: Any) -> RsiObservation:
        if self._closed:
            raise RsiEnvError(_CLOSED)
        obs = await self._on_worker(self._locked_reset, seed, episode_id, options)
        self._serve_tools()  # on the event loop, where MCP reads the tools
        return obs

    def _locked_reset(self, seed: int | None, episode_id: str | None, options: dict[str, Any]) -> RsiObservation:
        with self._lock:
            if self._closed:
                raise RsiEnvError(_CLOSED)
            inst, env_id, kwargs, seed = self._choose(seed, options)
            if self._env is None or self._playing[1:] != (env_id, kwargs):
                self._close_env()
                self._env = _make(env_id, kwargs)
                self._tools = ToolCalls(self._env)
            self._playing = (None if inst is None else inst.id, env_id, kwargs)
            assert self._tools is not None
            obs, info = self._tools.reset(seed=seed)
            rsi = rsi_env_of(self._env)
            self._episode_id = episode_id or rsi.episode_id
            task = rsi.workspace.read("TASK.md") if rsi.workspace is not None else rsi.task.summary
            return self._observation((obs, 0.0, False, False, info), reset=True, text=f"{task}\n\n{obs['text']}")

    def _choose(self, seed: int | None, options: dict[str, Any]) -> tuple[Instance | None, str, dict[str, Any],
                                                                           int | None]:
        """What ``reset``'s options ask to play: (instance or None, env id, kwargs, seed); `RsiEnvError` if unclear."""
        unknown = sorted(set(options) - {"instance", "split", "index", "env_id", "env_kwargs"})
        if unknown:
            raise RsiEnvError(f"reset takes no {shorten(unknown)}: {_HOW}")
        given = [k for k in ("instance", "split", "env_id") if options.get(k) is not None]
        if len(given) != 1:
            raise RsiEnvError(f"reset needs one of instance, split, env_id{f' (got {given})' if given else ''}: {_HOW}")
        if given == ["env_id"]:
            return None, *_env_request(options["env_id"], options.get("env_kwargs")), seed
        if options.get("env_kwargs") is not None:
            raise RsiEnvError("env_kwargs go with env_id: a suite instance's kwargs are frozen")
        if given == ["split"]:
            index = options.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                raise RsiEnvError(f"reset(split=...) needs index=I, an integer; got {shorten(index)}")
            try:
                inst = self._split(str(options["split"]))[index]
            except IndexError as exc:
                raise RsiEnvError(f"reset: {exc}") from None
        else:
            if options.get("index") is not None:
                raise RsiEnvError("index goes with split, not with instance")
            inst = self._suite().get(str(options["instance"]))
        if seed is not None and seed != inst.seed:
            raise RsiEnvError(f"instance {inst.id} is played with its own seed {inst.seed}: leave seed out")
        return inst, inst.env_id, inst.kwargs(), inst.seed

    # ---- step -----------------------------------------------------------------------------------------
    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        if isinstance(action, (ListToolsAction, CallToolAction)):  # OpenEnv's MCP actions: through MCP
            return await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if self._closed:
            return _no_episode(_CLOSED)
        return await self._on_worker(self._step_impl, action)

    async def call_tool_async(self, name: str, arguments: Any) -> RsiObservation:
        """One tool call as a step of the episode, on the session's thread (what an MCP ``tools/call`` does)."""
        if self._closed:
            return _no_episode(_CLOSED)
        return await self._on_worker(self._step_impl, RsiAction(tool_name=name, arguments=arguments))

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> RsiObservation:
        with self._lock:
            if self._closed:
                return _no_episode(_CLOSED)
            if self._env is None or self._tools is None:
                return _no_episode(f"no episode yet: reset first ({_HOW})")
            rsi = rsi_env_of(self._env)
            if rsi.done or rsi.truncated:
                why = "submitted" if rsi.done else f"truncated at max_steps={rsi.max_steps}"
                return _no_episode(f"the episode has ended ({why}): reset to play again", passed=self._passed())
            try:
                kind, payload = _parse(action)
            except RsiEnvError as exc:
                return self._observation(self._tools.refuse(f"action refused: {exc}"), error=f"action refused: {exc}")
            if kind == "list_tools":
                assert self._last is not None
                return self._last.model_copy(update={"tools": tool_schemas(self._env), "reward": 0.0, "error": None})
            if kind == "tool":
                error = _refusal(parse_tool_call, payload, self._env)
                return self._observation(self._tools.step(payload),
                                         error=None if error is None else f"tool call refused: {error}")
            error = _refusal(_check_action, payload, self._env)
            out = self._env.step(payload)
            self._tools.kind_mask = np.asarray(out[0]["action_mask"], dtype=np.int8)  # the env's own kinds
            return self._observation(out, error=None if error is None else f"action refused: {error}")

    # ---- state ----------------------------------------------------------------------------------------
    @property
    def state(self) -> RsiState:
        """The session's episode (read without waiting for a step in progress: the server asks from its loop)."""
        env = self._env
        if env is None:
            return RsiState(episode_id=self._episode_id)
        rsi = rsi_env_of(env)
        instance, env_id, kwargs = self._playing
        return RsiState(
            episode_id=self._episode_id, step_count=rsi.steps, instance=instance, env_id=env_id,
            env_kwargs=finite(kwargs), seed=rsi.episode_seed, task=rsi.task.id, max_steps=rsi.max_steps,
            measurements=rsi.measurements, max_measurements=rsi.task.max_measurements,
            total_reward=float(sum(rsi.reward_log)), done=bool(rsi.done or rsi.truncated), passed=self._passed(),
            sandbox=rsi.sandbox_backend, replay=finite(rsi.state()))

    def get_metadata(self) -> EnvironmentMetadata:
        from rsi_env import __version__

        return EnvironmentMetadata(
            name="rsi-env", version=__version__,
            description="An LLM-inference engineer's job on vLLM (flags, code, bugs, day-zero models, kernels) with "
                        "measured rewards; reset(instance=ID) plays an rsi-bench instance.")

    # ---- OpenEnv's Task API: the suite's instances by split ------------------------------------------
    def list_splits(self) -> list[dict[str, str]]:
        self._task_suite()
        return [{"name": s, "type": "test"} for s in SPLITS]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return [i.public() for i in self._split(split)]

    def num_tasks(self, split: str) -> int:
        return len(self._split(split))

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        return self._split(split)[index].public()

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        return [i.public() for i in self._split(split)[start:stop]]

    # ---- closing --------------------------------------------------------------------------------------
    def close(self) -> None:
        """End the session: wait for a step in progress, then remove the env's workspace and sandbox."""
        self._closed = True
        self._worker.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._close_env()
        super().close()

    # ---- helpers --------------------------------------------------------------------------------------
    def _suite(self) -> Suite:
        if not self._suite_id:
            raise SuiteError("this server plays no suite (start it with --suite ID or FILE.yaml); reset(env_id=...) "
                             "plays any RSI/* env")
        return load(self._suite_id)

    def _task_suite(self) -> Suite:
        """The suite for the Task API; without one the API is 'not supported' (HTTP 501), with the reason."""
        try:
            return self._suite()
        except SuiteError as exc:
            raise NotImplementedError(str(exc)) from None

    def _split(self, split: str) -> list[Instance]:
        suite = self._task_suite()
        if split == "test":
            return list(suite.instances)
        if split in FRONTS:
            return suite.select(fronts=[split])
        raise IndexError(f"unknown split {shorten(split)!r}; splits: {list(SPLITS)}")

    def _passed(self) -> bool | None:
        verdict = None if self._env is None else rsi_env_of(self._env).verdict
        return None if verdict is None else bool(verdict.passed)

    def _close_env(self) -> None:
        if self._env is not None:
            self._env.close()
        self._env, self._tools, self._last = None, None, None

    async def _on_worker(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._worker, functools.partial(fn, *args))

    def _serve_tools(self) -> None:
        """Offer the episode's tools over MCP, replacing the last episode's (a code task has no ``set_flag``)."""
        server = self.mcp_server
        if server is None or self._env is None:
            return
        for name in self._served:
            server.remove_tool(name)
        self._served = []
        for schema in tool_schemas(self._env):
            fn = schema["function"]
            tool = _EpisodeTool(name=fn["name"], description=fn["description"], parameters=fn["parameters"])
            tool._session = self
            server.add_tool(tool)
            self._served.append(fn["name"])

    def _observation(self, out: StepResult, *, error: str | None = None, text: str | None = None,
                     reset: bool = False) -> RsiObservation:
        """The observation of a step's (or a reset's) result ``out``, from the env's own obs and info."""
        assert self._env is not None and self._tools is not None
        obs, step_reward, terminated, truncated, info = out
        rsi = rsi_env_of(self._env)
        verdict = info.get("verdict")
        self._last = RsiObservation(
            done=bool(terminated or truncated), reward=None if reset else finite(float(step_reward)),
            text=str(obs["text"]) if text is None else text, error=error, truncated=bool(truncated),
            passed=None if verdict is None else bool(verdict["passed"]), score=finite(info.get("score")),
            best_score=finite(info.get("best_score")),
            telemetry=finite(dict(zip(rsi.telemetry_fields, np.asarray(obs["telemetry"]).tolist(), strict=True))),
            measured=finite(info.get("telemetry") or []), config=finite(info.get("config") or {}),
            steps_left=max(rsi.max_steps - rsi.steps, 0),
            measurements_left=max(rsi.task.max_measurements - rsi.measurements, 0),
            allowed_tools=[n for n, ok in zip(TOOL_NAMES, self._tools.mask(), strict=True) if ok],
            tools=tool_schemas(self._env) if reset else [])
        return self._last


def _env_request(env_id: Any, env_kwargs: Any) -> tuple[str, dict[str, Any]]:
    """A caller's ``env_id`` and ``env_kwargs``, checked: an ``RSI/*`` id, a kwargs object, a containing sandbox."""
    if not isinstance(env_id, str) or not env_id.startswith("RSI/"):
        raise RsiEnvError(f"env_id must name an RSI/* environment, got {shorten(env_id)}")
    kwargs = {} if env_kwargs is None else env_kwargs
    if isinstance(kwargs, str):  # JSON text, as TRL's dataset rows carry it
        try:
            kwargs = json.loads(kwargs)
        except json.JSONDecodeError as exc:
            raise RsiEnvError(f"env_kwargs is not JSON ({exc.msg})") from None
    if not isinstance(kwargs, dict):
        raise RsiEnvError(f"env_kwargs must be an object of keyword arguments, got {type(kwargs).__name__}")
    if kwargs.get("sandbox") == "local":
        raise RsiEnvError("env_kwargs.sandbox 'local' contains nothing: a served env runs its agent's commands in "
                          "bubblewrap or Docker (sandbox='auto')")
    return env_id, dict(kwargs)


def _make(env_id: str, kwargs: dict[str, Any]) -> gym.Env[Any, Any]:
    import rsi_env  # noqa: F401  (registers the RSI/* ids)

    try:
        return gym.make(env_id, **kwargs)
    except gym.error.Error as exc:
        raise RsiEnvError(f"cannot make {env_id}: {exc}") from None
    except TypeError as exc:
        raise RsiEnvError(f"{env_id} does not take those env_kwargs: {exc}") from None


def _parse(action: Any) -> tuple[str, Any]:
    """What an action asks for: ``("tool", call)``, ``("action", dict)`` or ``("list_tools", None)``."""
    if isinstance(action, dict):
        action = RsiAction.model_validate(action)
    if not isinstance(action, RsiAction):
        raise ActionError(f"an action is an RsiAction, got {type(action).__name__}")
    extra = sorted(action.model_extra or {})
    if extra:
        raise ActionError(f"unknown action field(s) {shorten(extra)}: an action has tool_name and arguments, or "
                          "action, or type 'list_tools'")
    if action.type not in (None, "call_tool", "list_tools"):
        raise ActionError(f"action type {shorten(action.type)!r} is neither 'call_tool' nor 'list_tools'")
    if action.type == "list_tools":
        if action.tool_name is not None or action.arguments is not None or action.action is not None:
            raise ActionError("type 'list_tools' takes no tool_name, arguments or action")
        return "list_tools", None
    if action.action is not None:
        if action.tool_name is not None or action.arguments is not None or action.type is not None:
            raise ActionError("an action is a tool call (tool_name, arguments) or the env's action dict (action), "
                              "not both")
        return "action", action.action
    if action.tool_name is None:
        raise ActionError(f"an action names a tool (tool_name: {', '.join(TOOL_NAMES)}) or gives the env's "
                          "action dict (action)")
    return "tool", {"name": action.tool_name, "arguments": action.arguments}


def _check_action(action: Any, env: gym.Env[Any, Any]) -> None:
    space = rsi_env_of(env).action_space
    assert isinstance(space, gym.spaces.Dict), "an RSI/* action space is a Dict"
    check_action(action, space)


def _refusal(check: Callable[[Any, Any], Any], payload: Any, env: Any) -> str | None:
    """Why ``check`` refuses ``payload`` (the env refuses it alike, spending the step), or None."""
    try:
        check(payload, env)
    except RsiEnvError as exc:
        return str(exc)
    return None


def _no_episode(reason: str, passed: bool | None = None) -> RsiObservation:
    """An observation for a step that could not be taken: no episode, an ended one, a closed session."""
    return RsiObservation(done=True, reward=0.0, text=f"error: {reason}", error=reason, passed=passed)
