"""`Evaluator`: measure whole configurations of one task at one seed, against a budget of measurements.

Black-box searches (random, vLLM's auto-tune, coordinate descent, Optuna) propose configurations
as ladder indices of the task's free flags; the evaluator turns them into an `EngineConfig`,
refuses what the environment would refuse (without spending a measurement, as the env does),
measures the rest on the episode's tier — in-process, or as Ray tasks through a `Measurer` — and
scores them with the env's own objective against the env's own baseline (`RsiEnv.problem`). So a search's number is
the number an agent stepping through the env would have been shown. A configuration measured
before is answered from memory and costs nothing; every new one costs one measurement.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

import rsi_env  # noqa: F401  (registers the RSI/* ids)
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.telemetry import Telemetry
from rsi_env.envs.core import RsiEnv
from rsi_env.envs.problem import Problem
from rsi_env.errors import InvalidConfigError
from rsi_env.wrappers.ladders import config_at, free_flags, ladder, refusal, rsi_env_of

__all__ = ["Evaluator", "Measurer", "Progress", "Trial", "local_measurer"]

# Measures a batch of configurations of one `Problem` (its tier, model, hardware and workloads): one list of
# per-workload telemetry per configuration, in order.
Measurer = Callable[[Problem, Sequence[EngineConfig]], list[list[Telemetry]]]


def local_measurer(problem: Problem, configs: Sequence[EngineConfig]) -> list[list[Telemetry]]:
    """Measure in this process, one configuration after another, on the problem's own tier."""
    return [problem.measure(c) for c in configs]


@dataclass
class Progress:
    """The best score measured so far, after each measurement (``-inf`` until one succeeds).

    Not floored at vLLM's defaults (the env's ``best_score`` is): where every configuration tried
    scores below the defaults, the curve still says which search came closest.
    """

    history: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return self.history[-1] if self.history else -math.inf

    def record(self, score: float | None) -> None:
        """One measurement's score (``None`` or ``-inf`` for a failed one)."""
        s = -math.inf if score is None or math.isnan(score) else score
        self.history.append(max(self.best, s))


@dataclass(frozen=True)
class Trial:
    """One proposed configuration: its ladder indices, score (``None`` if refused) and why refused."""

    indices: dict[str, int]
    score: float | None
    measured: bool
    refused: str | None = None


@dataclass
class Evaluator:
    """Scores configurations of ``env_id`` at reset seed ``seed``; at most ``budget`` measurements."""

    env_id: str
    seed: int
    budget: int
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    measurer: Measurer = local_measurer
    # Proposals from experience (`baselines.warm_start.warm_indices`) that searches try first; empty: a cold start.
    warm: list[dict[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.env: RsiEnv = rsi_env_of(gym.make(self.env_id, **dict(self.env_kwargs)))
        self.env.reset(seed=self.seed)
        self.flags: list[str] = free_flags(self.env)
        self.sizes: dict[str, int] = {f: len(ladder(self.env, f)) for f in self.flags}
        self.progress = Progress()
        self.trials: list[Trial] = []
        self.best_indices: dict[str, int] | None = None
        self._seen: dict[tuple[tuple[str, int], ...], float] = {}
        self._t0 = time.perf_counter()

    @property
    def measurements(self) -> int:
        return len(self.progress.history)

    @property
    def left(self) -> int:
        return self.budget - self.measurements

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self._t0

    def config(self, indices: Mapping[str, int]) -> EngineConfig:
        """The configuration of ``indices`` (flags not named stay at the task's start)."""
        return config_at(self.env, indices, self.env.baseline_config)

    def check(self, indices: Mapping[str, int]) -> str | None:
        """Why the env would refuse ``indices``' configuration, or ``None``."""
        try:
            return refusal(self.env, self.config(indices))
        except InvalidConfigError as exc:
            return str(exc)

    def evaluate(self, batch: Sequence[Mapping[str, int]]) -> list[float | None]:
        """Scores of a batch (measured together, e.g. in parallel); ``None`` for a refused or unaffordable one.

        Refused configurations and ones seen before cost nothing; new ones are measured while the
        budget lasts, in batch order.
        """
        out: list[float | None] = [None] * len(batch)
        todo: list[tuple[int, dict[str, int], EngineConfig]] = []
        planned: set[tuple[tuple[str, int], ...]] = set()
        for k, raw in enumerate(batch):
            idx = {f: int(raw[f]) for f in self.flags if f in raw}
            key = tuple(sorted(idx.items()))
            if key in self._seen:
                out[k] = self._seen[key]
                continue
            why = self.check(idx)
            if why is not None:
                self.trials.append(Trial(idx, None, False, why))
                continue
            if key in planned or len(todo) >= self.left:
                continue
            planned.add(key)
            todo.append((k, idx, self.config(idx)))
        if not todo:
            return out
        problem = self.env.problem
        tels = self.measurer(problem, [c for _, _, c in todo])
        for (k, idx, cfg), t in zip(todo, tels, strict=True):
            self.env.cost.add(self.env.tier_name, t, cfg, self.env.hardware)  # GPU-seconds per tier, with the env's
            s = problem.judge(t)
            self._seen[tuple(sorted(idx.items()))] = s
            self.trials.append(Trial(idx, s, True))
            if math.isfinite(s) and s > self.progress.best:
                self.best_indices = idx
            self.progress.record(s)
            out[k] = s
        for k, raw in enumerate(batch):  # repeats inside the batch get the score measured for the first
            key = tuple(sorted((f, int(raw[f])) for f in self.flags if f in raw))
            if out[k] is None and key in self._seen:
                out[k] = self._seen[key]
        return out

    def best_config(self) -> dict[str, Any]:
        """The best configuration measured, as the flags it sets differently from `EngineConfig`'s defaults."""
        if self.best_indices is None:
            return {}
        return self.config(self.best_indices).to_dict(only_set=True)

    def close(self) -> None:
        self.env.close()
