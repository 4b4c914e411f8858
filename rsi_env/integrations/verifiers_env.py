"""rsi-bench in Prime Intellect's verifiers (0.4): `load_environment(suite=..., instances=...)` returns its env.

verifiers 0.4 builds an environment from parts, each a class of its own: a ``Taskset`` whose ``load()`` yields
``Task`` objects (one per row: the ``TaskData`` with the prompt, the task's tools, its stop conditions and its
rubric, the ``@vf.reward`` methods, weighted, whose sum is the trace's reward), an ``Env`` that plays a task with
its agents, and a harness (the program the model acts in). Here:

- `RsiBenchTaskset` yields a task per suite instance (`rsi_env.suite`, all of them or those named), in suite
  order. Its data is the instance (`RsiBenchData`: id, front, family, difficulty, env id, seed and keyword
  arguments with its budget); its prompt is the task's ``TASK.md`` and the first observation, read from the
  instance's env reset with its seed (made and closed at load), under the system prompt TRL's rows use.
- `RsiBenchTask` gives every rollout a tool server of its own (`rsi_env.integrations.verifiers_tools.RsiTools`):
  the rollout's env, made from the instance and reset with its seed, its tools over MCP, closed when the rollout
  ends. The rollout stops when the episode ends (submitted, or out of steps or measurements). Its rubric is two
  rewards, both weight 1, read from the env's record, never from what the model says: ``passed`` (the verdict at
  submit: 1 or 0) and ``improvement`` (the rest of the episode's reward: improvement paid, minus measurement
  costs), so a trace's reward is the env's own episode reward. Metrics: ``submitted``, ``steps``,
  ``measurements``. A reweighting is verifiers' own: ``--env.taskset.task.rewards.improvement.weight 0``.
- `RsiBenchEnv` is verifiers' single-agent env with the agent's defaults set for this taskset: the ``null``
  harness (verifiers' chat loop with the taskset's MCP tools and no tool of its own: every command the model
  runs goes through ``run_shell`` into the env's sandbox), in the ``subprocess`` runtime, at most 100 model turns.

verifiers finds a taskset by a top-level module name (``vf-eval rsi-env-verifiers`` imports
``rsi_env_verifiers``, which re-exports these classes), so `TASKSET_ID` is that name. The null harness runs its
chat program in an environment ``uv`` makes from PyPI (its ``openai``, ``mcp`` and ``httpx``), so ``uv`` must be
on ``PATH`` (the ``verifiers`` extra installs it).

verifiers 0.4 pins ``mcp==2.0.0`` and OpenEnv 0.10 needs ``mcp<2``: the two cannot share a Python environment
(`.ci/run` gives verifiers a venv of its own). ``import rsi_env`` imports neither.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.harnesses.null import NullHarnessConfig

from rsi_env.integrations.trl_env import PROMPT, RsiTRLEnv, suite_rows
from rsi_env.integrations.verifiers_tools import RsiBenchState, RsiTools
from rsi_env.suite.instance import Suite, load

__all__ = ["TASKSET_ID", "RsiBenchConfig", "RsiBenchData", "RsiBenchEnv", "RsiBenchEnvConfig", "RsiBenchTask",
           "RsiBenchTaskConfig", "RsiBenchTaskset", "load_environment"]

TASKSET_ID = "rsi-env-verifiers"
MAX_TURNS = 100


class RsiBenchData(vf.TaskData):
    """One suite instance as a verifiers task row (``id`` and ``name`` are the instance's id)."""

    suite: str       # the suite's id and content digest (`Suite.digest`), as the suite runner records it
    instance: str
    front: str
    family: str
    difficulty: str
    env_id: str
    seed: int
    env_kwargs: str  # JSON: the instance's keyword arguments with its budget (`Instance.kwargs`)


class RsiBenchTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()
    """Where each rollout's tool server runs (a subprocess on this host by default)."""


class RsiBenchTask(vf.Task[RsiBenchData, RsiBenchState, RsiBenchTaskConfig]):
    """A suite instance: its env's tools per rollout, and the env's verdict and reward as its rubric."""

    @property
    def key(self) -> str:
        return f"{self.data.suite}/{self.data.instance}"  # the suite's id and content digest, the instance's id

    @classmethod
    def toolsets(cls, config: RsiBenchTaskConfig) -> list[vf.Toolset]:
        return [RsiTools(config.tools)]

    @vf.stop
    async def episode_ended(self, trace: vf.Trace) -> bool:
        return bool(trace.state.ended)

    @vf.reward(weight=1.0)
    async def passed(self, trace: vf.Trace) -> float:
        """1.0 when the env's verdict at submit passed, else 0.0."""
        return float(trace.state.binary)

    @vf.reward(weight=1.0)
    async def improvement(self, trace: vf.Trace) -> float:
        """The rest of the env's episode reward: the improvement it paid, minus the measurements' cost."""
        return float(trace.state.continuous)

    @vf.metric
    async def submitted(self, trace: vf.Trace) -> float:
        return float(trace.state.submitted)

    @vf.metric
    async def steps(self, trace: vf.Trace) -> float:
        return float(trace.state.steps)

    @vf.metric
    async def measurements(self, trace: vf.Trace) -> float:
        return float(trace.state.measurements)


class RsiBenchConfig(vf.TasksetConfig):
    suite: str = "rsi-bench-v1"
    """A suite id, or a suite file's path (``….yaml``)."""
    instances: list[str] | None = None
    """The instance ids to load (None: every instance), in suite order."""
    task: RsiBenchTaskConfig = RsiBenchTaskConfig()


class RsiBenchTaskset(vf.Taskset[RsiBenchTask, RsiBenchConfig]):
    """A task per instance of the suite, lazily (``vf-eval -n 5`` makes five)."""

    def load(self) -> Iterator[RsiBenchTask]:
        suite = load(self.config.suite)
        for row in suite_rows(suite, self.config.instances):
            inst = suite.get(row["instance"])
            yield RsiBenchTask(RsiBenchData(
                id=inst.id, name=inst.id, prompt=_first_prompt(row), system_prompt=PROMPT.strip(),
                suite=f"{suite.id}@{suite.digest}", instance=inst.id, front=inst.front, family=inst.family,
                difficulty=inst.difficulty, env_id=inst.env_id, seed=inst.seed, env_kwargs=row["env_kwargs"]),
                self.config.task)


def _first_prompt(row: dict[str, Any]) -> str:
    """What a rollout of ``row`` sees first: the task and the reset's observation (its tool server resets alike)."""
    episode = RsiTRLEnv()
    try:
        return episode.reset(**row)
    finally:
        if episode.env is not None:
            episode.env.close()


class RsiBenchEnvConfig(vf.SingleAgentEnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness=NullHarnessConfig(id="null"), runtime=vf.SubprocessConfig(),
                                           max_turns=MAX_TURNS)
    """The seat: verifiers' tool-calling chat loop (``null``) on this host, the model under evaluation."""


class RsiBenchEnv(vf.SingleAgentEnv, vf.Env[RsiBenchEnvConfig]):
    """verifiers' single-agent env, its seat's defaults those of `RsiBenchEnvConfig`."""


def load_environment(suite: Suite | str = "rsi-bench-v1", instances: Sequence[str] | None = None, *,
                     max_turns: int = MAX_TURNS, runtime: str = "subprocess", **env: Any) -> vf.Env:
    """The verifiers env of ``suite``'s instances (all of them, or those ``instances`` names).

    ``suite`` is a suite id, a suite file's path or a `Suite` loaded from one; ``max_turns`` caps the model's
    turns per rollout and ``runtime`` is the runtime type its harness runs in (verifiers' ``subprocess``,
    ``docker``, ``prime``, ...). Any other keyword goes into verifiers' env config (``retries``, ``timeout``, …).
    Run it with verifiers' own machinery: ``async with env.serving(): await env.run_slot(slot, ctx)``, or
    ``vf-eval rsi-env-verifiers --env.taskset.suite …`` from the command line.
    """
    source = suite if isinstance(suite, str) else (suite.source or suite.id)
    taskset = {"id": TASKSET_ID, "suite": source, "instances": None if instances is None else list(instances)}
    config = vf.resolve_env_config({**env, "taskset": taskset,
                                    "agent": {"max_turns": max_turns, "runtime": {"type": runtime}}})
    return vf.load_environment(config)
