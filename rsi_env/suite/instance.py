"""`Instance` and `Suite`: one frozen benchmark task and the versioned set of them (``rsi-bench-v1`` to ``-v5``).

An instance is an env id with the keyword arguments and reset seed that pin it, the budget an attempt may
spend, the front and family it counts under, its measured difficulty, what passing means, and how its
reference solution is had. A suite is data (``rsi_env/catalog/suites/<id>.yaml``, written by
`rsi_env.suite.build`): its instances, the fraction of a flag instance's ceiling that passes, the simulator
calibrations its ceilings were found with, and the baselines' pass rates at freeze. That file holds every
flag instance's best configuration, so it lives where no sandbox looks (`rsi_env.sandbox.runtime`).

Pass, for every instance, is the env's own verdict at submit: a flag instance's env gets
``improvement_threshold`` from its frozen ceiling (``ceiling_fraction`` of the best objective on its
ladders, as a gain over vLLM's defaults), so the env's binary reward and the suite's pass are one thing;
a code instance passes when every hidden check passes and its task's threshold is met.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from rsi_env.errors import RsiEnvError, SuiteError

__all__ = ["DIFFICULTIES", "FRONTS", "Instance", "Suite", "list_suites", "load", "threshold_for"]

FRONTS = ("day-zero", "optimisation", "bug-fixing")
DIFFICULTIES = ("easy", "medium", "hard")


def threshold_for(ceiling: float, fraction: float) -> float:
    """The gain over the defaults (``improvement_threshold``) that reaches ``fraction`` of a ceiling's objective.

    ``ceiling`` is the best score found (a mean log ratio over the defaults, `rsi_env.reward.objective`), so
    its objective is ``exp(ceiling)`` times the defaults'; ``fraction`` of that is a gain of
    ``fraction * exp(ceiling) - 1``.
    """
    return fraction * math.exp(ceiling) - 1.0


@dataclass(frozen=True)
class Instance:
    """One frozen task of a suite: what to make, how hard it is, what passing means, where its reference is.

    ``criterion`` says what passes: ``{"kind": "ceiling", "ceiling", "fraction", "method", "measured"}`` for a
    flag instance (``method`` is ``exhaustive``, or ``search-20x`` where the ladders' grid was too large to
    measure whole), ``{"kind": "checks"}`` for a code instance. ``reference`` is ``{"config": {...}}`` (the
    configuration that reached the ceiling) or ``{"code": FAMILY}`` (the family's hidden reference solution,
    `rsi_env.suite.reference`). ``baselines`` holds each baseline's pass rate at freeze.
    """

    id: str
    front: str
    family: str
    env_id: str
    env_kwargs: Mapping[str, Any]
    seed: int
    tier: str
    budget: int
    max_steps: int
    difficulty: str
    criterion: Mapping[str, Any]
    reference: Mapping[str, Any]
    baselines: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.front not in FRONTS:
            raise SuiteError(f"instance {self.id}: unknown front {self.front!r}; fronts: {list(FRONTS)}")
        if self.difficulty not in DIFFICULTIES:
            raise SuiteError(f"instance {self.id}: unknown difficulty {self.difficulty!r}; {list(DIFFICULTIES)}")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Instance:
        try:
            return cls(id=str(raw["id"]), front=str(raw["front"]), family=str(raw["family"]),
                       env_id=str(raw["env_id"]), env_kwargs=dict(raw.get("env_kwargs") or {}),
                       seed=int(raw["seed"]), tier=str(raw.get("tier", "sim")), budget=int(raw["budget"]),
                       max_steps=int(raw["max_steps"]), difficulty=str(raw["difficulty"]),
                       criterion=dict(raw["criterion"]), reference=dict(raw["reference"]),
                       baselines={k: float(v) for k, v in (raw.get("baselines") or {}).items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise SuiteError(f"suite instance {raw.get('id', '?')!r} is malformed: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "front": self.front, "family": self.family, "env_id": self.env_id,
                "env_kwargs": dict(self.env_kwargs), "seed": self.seed, "tier": self.tier, "budget": self.budget,
                "max_steps": self.max_steps, "difficulty": self.difficulty, "criterion": dict(self.criterion),
                "reference": dict(self.reference), "baselines": dict(self.baselines)}

    def public(self) -> dict[str, Any]:
        """What an agent, a listing or a task export may show: everything but the reference solution."""
        out = self.to_dict()
        del out["reference"]
        return out

    @property
    def engine_version(self) -> str:
        """The release the instance measures: its ``engine_version``, else its engine's (vLLM's or SGLang's)."""
        from rsi_env.engine.engines import get_engine

        kw = self.env_kwargs
        return get_engine(str(kw.get("engine", "vllm"))).version(kw.get("engine_version"))

    def kwargs(self, **overrides: Any) -> dict[str, Any]:
        """``gym.make``'s keyword arguments for this instance: its own, its budget, ``overrides`` on top."""
        out = {**self.env_kwargs, "max_measurements": self.budget, "max_steps": self.max_steps}
        if self.tier != "sim":
            out["tier"] = self.tier
        return {**out, **overrides}

    def make_env(self, **overrides: Any) -> Any:
        """A fresh env of this instance (reset it with ``seed=instance.seed``)."""
        import gymnasium as gym

        import rsi_env  # noqa: F401  (registers the RSI/* ids)

        try:
            return gym.make(self.env_id, **self.kwargs(**overrides))
        except gym.error.Error as exc:
            raise SuiteError(f"instance {self.id}: cannot make {self.env_id}: {exc}") from None


@dataclass(frozen=True)
class Suite:
    """A frozen, versioned list of instances and the facts they were frozen with."""

    id: str
    instances: tuple[Instance, ...]
    ceiling_fraction: float
    calibrations: Mapping[str, str]
    frozen: str
    baselines: Mapping[str, Any] = field(default_factory=dict)
    notes: str = ""
    source: str = ""  # what `load` was given (a suite id, or a suite file's path): how a worker loads it again

    def __post_init__(self) -> None:
        ids = [i.id for i in self.instances]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise SuiteError(f"suite {self.id}: duplicate instance ids {dup}")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], source: str = "") -> Suite:
        try:
            return cls(id=str(raw["suite"]), instances=tuple(Instance.from_dict(i) for i in raw["instances"]),
                       ceiling_fraction=float(raw["ceiling_fraction"]), calibrations=dict(raw["calibrations"]),
                       frozen=str(raw["frozen"]), baselines=dict(raw.get("baselines") or {}),
                       notes=str(raw.get("notes") or ""), source=source or str(raw["suite"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise SuiteError(f"suite file is malformed: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        return {"suite": self.id, "frozen": self.frozen, "ceiling_fraction": self.ceiling_fraction,
                "calibrations": dict(self.calibrations), "notes": self.notes, "baselines": dict(self.baselines),
                "instances": [i.to_dict() for i in self.instances]}

    @property
    def digest(self) -> str:
        """A hash of the suite's content: two runs report against the same instances only if it matches."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def get(self, instance_id: str) -> Instance:
        for i in self.instances:
            if i.id == instance_id:
                return i
        raise SuiteError(f"suite {self.id} has no instance {instance_id!r}")

    def select(self, *, fronts: Sequence[str] = (), families: Sequence[str] = (), difficulties: Sequence[str] = (),
               ids: Sequence[str] = ()) -> list[Instance]:
        """The instances matching every filter given (an empty filter matches all)."""
        for f in fronts:
            if f not in FRONTS:
                raise SuiteError(f"unknown front {f!r}; fronts: {list(FRONTS)}")
        out = [i for i in self.instances
               if (not fronts or i.front in fronts) and (not families or i.family in families)
               and (not difficulties or i.difficulty in difficulties) and (not ids or i.id in ids)]
        missing = sorted(set(ids) - {i.id for i in out})
        if missing and not (fronts or families or difficulties):
            raise SuiteError(f"suite {self.id} has no instance(s) {missing}")
        return out

    def check_calibrations(self) -> list[str]:
        """Where the simulator in use differs from the one the ceilings were found with (empty: none)."""
        from rsi_env.sim import sim_calibration

        out = []
        for key, frozen in sorted(self.calibrations.items()):
            hardware, _, version = key.partition("@")
            now = sim_calibration(hardware, version).id
            if now != frozen:
                out.append(f"{key}: frozen with calibration {frozen}, this install uses {now}")
        return out


def _suite_dir() -> Any:
    return resources.files("rsi_env") / "catalog" / "suites"


def list_suites() -> list[str]:
    """The suite ids this install ships."""
    d = _suite_dir()
    return sorted(p.name[: -len(".yaml")] for p in d.iterdir() if p.name.endswith(".yaml")) if d.is_dir() else []


@cache
def _load(suite_id: str) -> Suite:
    import yaml

    if suite_id.endswith(".yaml"):  # a suite file of one's own
        path = Path(suite_id)
        if not path.is_file():
            raise SuiteError(f"no suite file {suite_id!r}")
        return Suite.from_dict(yaml.safe_load(path.read_text()), source=suite_id)
    res = _suite_dir() / f"{suite_id}.yaml"
    if not res.is_file():
        raise SuiteError(f"unknown suite {suite_id!r}; this install ships {list_suites()} (or give a suite .yaml)")
    return Suite.from_dict(yaml.safe_load(res.read_text()), source=suite_id)


def load(suite_id: str = "rsi-bench-v1") -> Suite:
    """The frozen suite ``suite_id`` (``rsi_env.suite.load("rsi-bench-v1")``), or a suite file's (``….yaml``)."""
    if not isinstance(suite_id, str) or not suite_id:
        raise RsiEnvError(f"a suite id is a name such as 'rsi-bench-v1', got {suite_id!r}")
    return _load(suite_id)
