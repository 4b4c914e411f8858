"""The agents a suite run plays: ``null``, ``reference``, ``random``, ``search:<name>`` and ``openai``.

Each plays one attempt of an instance in an env the runner made (`rsi_env.suite.runner`): it resets the env
with the instance's seed, acts through ``step`` only, and reports what the env cannot know (tokens spent,
the conversation, measurements spent outside the episode). Whether the attempt passed is never the agent's
word: the runner reads the env's own verdict.

- ``null`` submits at once: the floor (vLLM's defaults, or the untouched code).
- ``reference`` writes the instance's reference solution (`rsi_env.suite.reference`) and submits: the ceiling
  every instance must reach.
- ``random`` takes uniformly random flag changes and benches within the budget, then submits.
- ``search:<name>`` runs one of `rsi_env.search.SEARCHES` on the instance's flags with one measurement less
  than the budget, writes the best configuration it found and submits (its last measurement): the
  matched-budget searches an agent is compared with.
- ``openai`` is a model behind any OpenAI-compatible chat endpoint, acting through tool calls
  (`rsi_env.suite.chat`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from rsi_env.envs.actions import BENCH, EDIT, FLAG, SUBMIT
from rsi_env.errors import RsiEnvError, SuiteError
from rsi_env.suite.edits import edits_to
from rsi_env.suite.instance import Instance
from rsi_env.suite.reference import reference_files, serving_yaml
from rsi_env.wrappers.ladders import rsi_env_of

__all__ = ["AGENTS", "Played", "SuiteAgent", "make_agent", "submit_unless_ended", "write_files"]


@dataclass
class Played:
    """What an agent reports beside the env's record: tokens, the conversation, why it stopped, work off the env."""

    tokens: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    ended_by: str = ""
    outside_measurements: int = 0      # measurements spent outside the episode's env (a search's own evaluator)
    outside_gpu_seconds: float = 0.0


class SuiteAgent(Protocol):
    """Plays one attempt: resets ``env`` with ``instance.seed`` and acts through ``env.step``."""

    name: str

    def play(self, env: Any, instance: Instance, rng: np.random.Generator) -> Played: ...


def submit_unless_ended(env: Any) -> bool:
    """Submit unless the episode has ended; whether it had."""
    rsi = rsi_env_of(env)
    if rsi.done or rsi.truncated:
        return True
    env.step({"kind": SUBMIT})
    return False


class NullAgent:
    name = "null"

    def play(self, env: Any, instance: Instance, rng: np.random.Generator) -> Played:
        env.reset(seed=instance.seed)
        submit_unless_ended(env)
        return Played(ended_by="submitted")


def write_files(env: Any, files: dict[str, str]) -> None:
    """Bring each file to its text by edit actions (`rsi_env.suite.edits`), stopping if the episode ends."""
    rsi = rsi_env_of(env)
    assert rsi.workspace is not None, "reset the env first"
    for path, text in files.items():
        try:
            current: str | None = rsi.workspace.read(path)
        except RsiEnvError:
            current = None
        for old, new in edits_to(current, text):
            if rsi.done or rsi.truncated:
                return
            env.step({"kind": EDIT, "path": path, "old": old, "new": new})


class ReferenceAgent:
    name = "reference"

    def play(self, env: Any, instance: Instance, rng: np.random.Generator) -> Played:
        env.reset(seed=instance.seed)
        write_files(env, reference_files(instance, env))
        return Played(ended_by="episode ended" if submit_unless_ended(env) else "submitted")


class RandomAgent:
    name = "random"

    def play(self, env: Any, instance: Instance, rng: np.random.Generator) -> Played:
        env.reset(seed=instance.seed)
        rsi = rsi_env_of(env)
        n = len(rsi.flag_names)
        while not (rsi.done or rsi.truncated) and rsi.steps < rsi.max_steps - 1 \
                and rsi.measurements < rsi.task.max_measurements:
            if n and rng.random() < 0.8:
                env.step({"kind": FLAG, "flag": int(rng.integers(n)), "value": np.float32(rng.random())})
            else:
                env.step({"kind": BENCH})
        return Played(ended_by="episode ended" if submit_unless_ended(env) else "submitted")


class SearchAgent:
    """A search of `rsi_env.search.SEARCHES` at the instance's budget (one measurement kept for the submission)."""

    def __init__(self, search: str) -> None:
        from rsi_env.search import SEARCHES

        if search not in SEARCHES:
            raise SuiteError(f"unknown search {search!r}; searches: {sorted(SEARCHES)}")
        self.search, self.name = search, f"search:{search}"

    def play(self, env: Any, instance: Instance, rng: np.random.Generator) -> Played:
        from rsi_env.search import SEARCHES, Evaluator

        env.reset(seed=instance.seed)
        rsi = rsi_env_of(env)
        played = Played()
        if rsi.measures_engine and rsi.flag_names and instance.budget > 1:
            kwargs = {k: v for k, v in instance.kwargs().items() if k not in ("max_measurements", "max_steps")}
            ev = Evaluator(instance.env_id, instance.seed, budget=instance.budget - 1, env_kwargs=kwargs)
            try:
                SEARCHES[self.search](ev, rng, 1)
                best = ev.best_config()
                played.outside_measurements = ev.measurements
                played.outside_gpu_seconds = ev.env.cost.gpu_seconds
            finally:
                ev.close()
            best = {k: v for k, v in best.items() if k in rsi.flag_names}
            if best and ev.progress.best > 0 and math.isfinite(ev.progress.best):
                write_files(env, {"serving.yaml": serving_yaml(best)})
        played.ended_by = "episode ended" if submit_unless_ended(env) else "submitted"
        return played


class ChatAgent:
    """A model behind an OpenAI-compatible chat endpoint, acting through tool calls (`rsi_env.suite.chat`)."""

    name = "openai"

    def __init__(self, base_url: str, model: str, api_key: str | None = None, max_requests: int = 40,
                 max_tokens: int = 200_000, max_seconds: float = 1800.0, timeout_s: float = 120.0) -> None:
        from rsi_env.suite.chat import ChatEndpoint, ChatLimits

        self.endpoint = ChatEndpoint(base_url, model, api_key=api_key, timeout_s=timeout_s)
        self.limits = ChatLimits(max_requests=max_requests, max_tokens=max_tokens, max_seconds=max_seconds)

    def play(self, env: Any, instance: Instance, rng: np.random.Generator) -> Played:
        from rsi_env.suite.chat import play_chat

        ep = play_chat(env, self.endpoint, seed=instance.seed, limits=self.limits, instance=instance.id)
        return Played(tokens=ep.tokens, messages=ep.messages, ended_by=ep.ended_by)


AGENTS: dict[str, Callable[..., SuiteAgent]] = {"null": NullAgent, "reference": ReferenceAgent,
                                                "random": RandomAgent}


def make_agent(spec: str, **options: Any) -> SuiteAgent:
    """The agent ``spec`` names (``null``, ``reference``, ``random``, ``search:<name>``, ``openai``)."""
    if spec.startswith("search:"):
        return SearchAgent(spec.partition(":")[2])
    if spec == "openai":
        if not options.get("base_url") or not options.get("model"):
            raise SuiteError("--agent openai needs --base-url URL and --model NAME")
        return ChatAgent(**{k: v for k, v in options.items() if v is not None})
    if spec not in AGENTS:
        raise SuiteError(f"unknown agent {spec!r}; agents: {sorted(AGENTS)}, search:<name>, openai")
    return AGENTS[spec]()
