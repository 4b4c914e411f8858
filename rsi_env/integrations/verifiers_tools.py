"""`RsiTools`: one rollout's rsi-env episode as a verifiers ``Toolset``, the MCP tool server of that rollout.

verifiers (0.4) gives each rollout of a task its own tool servers (``Task.toolsets``) and runs each as a process of
its own (``python -m`` this module), which fetches the rollout's task from verifiers' interception server and
serves its tools over MCP to the harness that talks to the model. Here that task is a suite instance
(`rsi_env.integrations.verifiers_env.RsiBenchData`): the server makes the instance's env, resets it with its
seed, offers its tools (`rsi_env.wrappers.tool_calls`: ``set_flag`` where it has flags, ``edit_file``,
``read_file``, ``list_files``, ``run_shell``, ``bench``, ``submit``; names and descriptions as the env gives
them; each call made through `RsiTRLEnv`, a step or a refusal naming the problem), and closes the env when
verifiers stops the server (SIGTERM: uvicorn, which serves MCP, finishes and raises the signal again, and this
server's handler turns it into an exit that closes the env on the way out, where the default action would kill
the process with the env open).

After every call it writes the episode's standing into the rollout's `RsiBenchState`, the state verifiers keeps
on the trace: the env's verdict at submit, its rewards and its counts. The task's rewards read only that, so
a rollout's reward is the env's own, whatever the model says. The state channel's secret is in this server's
environment (and verifiers' interception server's), never where the agent reaches: its commands run in the env's
sandbox, which sees none of this process's environment and has no network. The env's work runs on one thread of
its own, so MCP keeps answering while a step runs.
"""

# No `from __future__ import annotations`: MCP reads each tool's parameter types off its signature at run time.
import asyncio
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import verifiers.v1 as vf

from rsi_env.integrations.trl_env import RsiTRLEnv
from rsi_env.wrappers.ladders import rsi_env_of
from rsi_env.wrappers.tool_calls import tool_schemas

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["RsiBenchState", "RsiTools"]

_T = TypeVar("_T")
FlagValue = int | float | bool | str | list[Any] | None


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)


class RsiBenchState(vf.State):
    """A rollout's standing, as its env records it (written by `RsiTools` only; the rubric reads it)."""

    started: bool = False
    ended: bool = False         # submitted, or stopped by the env's own bounds (steps, measurements)
    submitted: bool = False
    passed: bool = False        # the submission's verdict
    binary: float = 0.0         # 1.0 when the verdict passed
    continuous: float = 0.0     # the rest of the episode's reward: improvement paid, minus the measurements' cost
    reward: float = 0.0         # the episode's total reward (binary + continuous)
    steps: int = 0
    measurements: int = 0
    verdict: str = ""           # the verdict's summary, for reading a trace


class RsiTools(vf.Toolset[vf.ToolsetConfig, RsiBenchState]):
    """The env's tools for one rollout, bare-named (``set_flag``, not ``rsi_tools_set_flag``)."""

    TOOL_PREFIX = None

    def __init__(self, config: vf.ToolsetConfig) -> None:
        super().__init__(config)
        self.episode = RsiTRLEnv()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rsi-episode")

    async def _on_worker(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    async def setup(self) -> None:
        """SIGTERM exits through the server's cleanup (the env's close) instead of killing the process."""
        signal.signal(signal.SIGTERM, _exit_on_sigterm)

    async def setup_task(self, task: Any) -> None:
        """Make and reset the rollout's env (``task`` is its `RsiBenchData`); it is closed when the server stops."""
        self._exit_stack.callback(self._worker.shutdown)
        self._exit_stack.callback(self._close_env)
        await self._on_worker(lambda: self.episode.reset(env_id=task.env_id, seed=task.seed,
                                                         env_kwargs=task.env_kwargs))

    def _close_env(self) -> None:
        env = self.episode.env
        if env is not None:
            self._worker.submit(env.close).result()

    def register(self, mcp: "MCPServer") -> None:
        env = self.episode.env
        if env is None:
            raise RuntimeError("RsiTools serves one rollout's episode: it has no task (setup_task never ran)")
        for schema in tool_schemas(env):
            spec = schema["function"]
            mcp.add_tool(self._with_state(getattr(self, spec["name"])), name=spec["name"],
                         description=spec["description"], structured_output=False)

    async def _step(self, tool: Callable[..., str], *args: Any) -> str:
        text = await self._on_worker(tool, *args)
        self._record()
        return text

    def _record(self) -> None:
        env = self.episode.env
        assert env is not None, "setup_task makes the env"
        rsi = rsi_env_of(env)
        state = self.state
        total = float(sum(rsi.reward_log))
        binary = 1.0 if rsi.verdict is not None and rsi.verdict.passed else 0.0
        state.started = True
        state.ended = bool(rsi.done or rsi.truncated)
        state.submitted = rsi.verdict is not None
        state.passed = bool(binary)
        state.binary, state.continuous, state.reward = binary, total - binary, total
        state.steps, state.measurements = rsi.steps, rsi.measurements
        state.verdict = "" if rsi.verdict is None else rsi.verdict.summary()

    # The tools: each one step of the episode through the env's own tool calls (their checks and refusals).

    async def set_flag(self, flag: str, value: FlagValue) -> str:
        return await self._step(self.episode.set_flag, flag, value)

    async def edit_file(self, path: str, old: str, new: str) -> str:
        return await self._step(self.episode.edit_file, path, old, new)

    async def read_file(self, path: str) -> str:
        return await self._step(self.episode.read_file, path)

    async def list_files(self) -> str:
        return await self._step(self.episode.list_files)

    async def run_shell(self, command: str) -> str:
        return await self._step(self.episode.run_shell, command)

    async def bench(self) -> str:
        return await self._step(self.episode.bench)

    async def submit(self) -> str:
        return await self._step(self.episode.submit)


if __name__ == "__main__":
    RsiTools.run()
