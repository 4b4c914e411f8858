"""TRL's ``GRPOTrainer(environment_factory=RsiTRLEnv)``: an `RsiEnv` episode per rollout, its actions as tools.

TRL builds one instance per rollout, calls ``reset(**row)`` with the dataset row (`trl_rows` makes rows:
``env_id``, ``seed`` and ``env_kwargs`` as JSON, beside the ``prompt``; `suite_rows` makes them from a suite's
instances, each with its budget and its id), offers every public method as a tool
(its schema read from the type hints and the Google-style docstring), and scores the rollout with
``get_reward()``: the reward of the episode's submit (its binary part and its improvement), 0.0 for an
episode the model did not submit. Each tool is one env step through `rsi_env.wrappers.tool_calls`, so it
takes exactly what the env's tools take and returns the observation's text; a refused call returns the
reason. TRL and its dependencies are needed only by the trainer: this module imports neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from rsi_env.engine.safe_io import load_yaml
from rsi_env.errors import RsiEnvError, SuiteError, YamlError
from rsi_env.suite.instance import Suite, load
from rsi_env.wrappers.ladders import rsi_env_of
from rsi_env.wrappers.tool_calls import parse_tool_call

__all__ = ["RsiTRLEnv", "suite_rows", "trl_rows"]

PROMPT = ("You are an LLM-inference engineer. Use the tools to improve the engine on the task below, then call "
          "submit (an episode that is not submitted scores nothing).\n\n")


def trl_rows(episodes: Iterable[tuple[str, int, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Dataset rows (``datasets.Dataset.from_list``) for ``(env_id, seed, env_kwargs)`` episodes."""
    out = []
    for env_id, seed, kwargs in episodes:
        out.append({"prompt": [{"role": "user", "content": PROMPT}], "env_id": env_id, "seed": int(seed),
                    "env_kwargs": json.dumps(dict(kwargs), sort_keys=True)})
    return out


def suite_rows(suite: Suite | str = "rsi-bench-v1", instances: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Dataset rows (`trl_rows`) for a suite's instances, all of them or those ``instances`` names, in suite order.

    ``suite`` is a `Suite` or what `rsi_env.suite.instance.load` takes (a suite id, or a suite file's path). Each
    row makes the instance's env as the suite runner does: its env id, reset seed and keyword arguments with its
    budget (`Instance.kwargs`: ``max_measurements``, ``max_steps``, and the pass line the env's verdict uses);
    ``instance`` holds its id. Nothing of its reference solution is in a row.
    """
    s = load(suite) if isinstance(suite, str) else suite
    if instances is not None and not list(instances):
        raise SuiteError("instances is empty: leave it out (None) for every instance, or name some")
    chosen = list(s.instances) if instances is None else s.select(ids=list(instances))
    rows = trl_rows((i.env_id, i.seed, i.kwargs()) for i in chosen)
    for row, inst in zip(rows, chosen, strict=True):
        row["instance"] = inst.id
    return rows


class RsiTRLEnv:
    """One rollout's episode; the public methods are its tools (TRL's ``environment_factory`` protocol)."""

    def __init__(self) -> None:
        self._env: gym.Env[Any, Any] | None = None
        self._reward = 0.0
        self._done = False

    @property
    def env(self) -> gym.Env[Any, Any] | None:
        """The episode's env (None before the first ``reset``); a property, so TRL offers it as no tool."""
        return self._env

    def reset(self, env_id: str = "RSI/Batching-v0", seed: int = 0, env_kwargs: str = "{}", **row: Any) -> str:
        """Start the row's episode; returns what the agent sees first (the task and its first observation)."""
        if self._env is not None:
            self._env.close()
        self._env = gym.make(env_id, **json.loads(env_kwargs or "{}"))
        obs, _ = self._env.reset(seed=int(seed))
        self._reward, self._done = 0.0, False
        rsi = rsi_env_of(self._env)
        task = rsi.workspace.read("TASK.md") if rsi.workspace is not None else rsi.task.summary
        return f"{task}\n\n{obs['text']}"

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._env is None:
            return "no episode: reset first"
        if self._done:
            return "the episode has ended"
        try:
            action = parse_tool_call({"name": name, "arguments": arguments}, self._env)
        except RsiEnvError as exc:
            return f"tool call refused: {exc}"
        obs, reward, terminated, truncated, info = self._env.step(action)
        if terminated or truncated:
            self._done = True
            self._reward = float(reward) if info.get("verdict") is not None else 0.0
        return str(obs["text"])

    def set_flag(self, flag: str, value: str) -> str:
        """Set an engine flag to a value on its ladder.

        Args:
            flag: The flag's name, e.g. max_num_seqs.
            value: The value, written as YAML: 512, true, null, fp8 or [1, 2, 4].
        """
        try:
            parsed = load_yaml(value) if isinstance(value, str) else value
        except YamlError as exc:
            return f"tool call refused: set_flag: cannot read the value ({exc})"
        return self._call("set_flag", {"flag": flag, "value": parsed})

    def edit_file(self, path: str, old: str, new: str) -> str:
        """Replace the exact text old with new in a workspace file (old empty: write the whole file).

        Args:
            path: The file, relative to the workspace, e.g. serving.yaml.
            old: The exact text to replace, or empty.
            new: The text to put in its place.
        """
        return self._call("edit_file", {"path": path, "old": old, "new": new})

    def read_file(self, path: str) -> str:
        """Print a workspace file.

        Args:
            path: The file, relative to the workspace.
        """
        return self._call("read_file", {"path": path})

    def list_files(self) -> str:
        """List the workspace's files."""
        return self._call("list_files", {})

    def run_shell(self, command: str) -> str:
        """Run a shell command in the workspace's sandbox (no network, timed).

        Args:
            command: The command line.
        """
        return self._call("run_shell", {"command": command})

    def bench(self) -> str:
        """Measure the current configuration on the task's workloads (spends a measurement)."""
        return self._call("bench", {})

    def submit(self) -> str:
        """End the episode: the final state is verified from a clean start and rewarded."""
        return self._call("submit", {})

    def get_reward(self) -> float:
        """The submit's reward (0.0 if the episode was not submitted)."""
        return self._reward
