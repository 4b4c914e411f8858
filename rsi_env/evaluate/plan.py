"""`EvalPlan`: a two-tier evaluation declared as data (``configs/eval/<plan>.yaml``).

```yaml
name: batching_h200
env: RSI/Batching-v0            # the task; searched on the sim tier
env_kwargs: {}                  # gym.make keywords (model, hardware, workloads, ...); tier is always sim here
seed: 1000                      # the env's reset seed: the workloads' seeds, the same on both tiers
search: {method: optuna_tpe, budget: 60, seed: 0}   # a search of baselines/ (or any searcher, in Python)
promote:
  top_k: 5                      # candidates promoted to real, besides vLLM's defaults
  min_gap: 0.15                 # each promoted candidate's sim score is this far (log ratio) below the ones before
  record_tokens: 8              # greedy outputs kept of the first N requests of each workload (output guard)
  per_run_timeout_s: 300        # one configuration's engine start + every workload
  deadline_s: 480               # the whole promote stage
  startup_s: 75                 # an engine start, for the time estimate of each configuration
  min_agreement: 0.9            # output guard: share of sampled requests whose greedy tokens match the defaults'
  gc: frozen                    # the real drivers' --gc: live, or frozen (their heaps frozen after the warm-up);
                                # left out: the engine's default (SGLang frozen, vLLM live: rsi_env.real.gc_pauses)
  probes: [{name: kv_fp8, flags: {kv_cache_dtype: fp8}}]   # measured last, outside the fidelity numbers:
                                # (a probe may instead or also name ``policy: reference``: a scheduling task's
                                # reference policy, its keys computed on sim and run by the real engine's scheduler)
                                # changes the output guard should catch
candidates: configs/eval/batching_h200.candidates.json   # search stage's output (committed for GPU runs)
out: results/eval/batching_h200                          # promote's real.jsonl, report's report.{json,md}
```

Relative paths are read from the current directory (run from the repository root). Loading a plan
imports nothing heavy: the promote stage runs where only the engine, the real tier and the
simulator's vocabulary are installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rsi_env.errors import RsiEnvError
from rsi_env.real.gc_pauses import GC_MODES

__all__ = ["EvalPlan", "PromoteSpec", "SearchSpec", "load_plan"]


@dataclass(frozen=True)
class SearchSpec:
    method: str = "optuna_tpe"
    budget: int = 60
    seed: int = 0


@dataclass(frozen=True)
class PromoteSpec:
    top_k: int = 5
    min_gap: float = 0.1
    record_tokens: int = 8
    per_run_timeout_s: float = 300.0
    deadline_s: float = 480.0
    startup_s: float = 75.0
    min_agreement: float = 0.9
    gc: str | None = None
    probes: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class EvalPlan:
    name: str
    env: str
    candidates: Path
    out: Path
    seed: int = 1000
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    search: SearchSpec = SearchSpec()
    promote: PromoteSpec = PromoteSpec()
    source: str = ""

    @classmethod
    def from_dict(cls, raw: Any, source: str = "") -> EvalPlan:
        if not isinstance(raw, dict):
            raise RsiEnvError(f"eval plan {source}: expected a mapping, got {type(raw).__name__}")
        missing = [k for k in ("name", "env", "candidates", "out") if k not in raw]
        if missing:
            raise RsiEnvError(f"eval plan {source}: missing keys {missing}")
        known = {"name", "env", "env_kwargs", "seed", "search", "promote", "candidates", "out"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise RsiEnvError(f"eval plan {source}: unknown keys {unknown}; known: {sorted(known)}")
        try:
            search = SearchSpec(**(raw.get("search") or {}))
            praw = dict(raw.get("promote") or {})
            probes = tuple(praw.pop("probes", None) or ())
            bad = [p for p in probes if not isinstance(p, dict) or "name" not in p
                   or not set(p) <= {"name", "flags", "policy"} or not ({"flags", "policy"} & set(p))]
            if bad:
                raise RsiEnvError(f"eval plan {source}: each probe is {{name: ..., flags: {{...}}, policy: "
                                  f"reference (a scheduling task's)}}, with flags or a policy, got {bad[0]!r}")
            promote = PromoteSpec(**praw, probes=probes)
        except TypeError as exc:
            raise RsiEnvError(f"eval plan {source}: {exc}") from None
        kwargs = dict(raw.get("env_kwargs") or {})
        if "tier" in kwargs:
            raise RsiEnvError(f"eval plan {source}: env_kwargs may not set tier (the search is on sim, promote on real)")
        if promote.gc is not None and promote.gc not in GC_MODES:
            raise RsiEnvError(f"eval plan {source}: promote.gc is one of {list(GC_MODES)}, got {promote.gc!r}")
        if promote.top_k < 1 or search.budget < promote.top_k:
            raise RsiEnvError(f"eval plan {source}: need 1 <= promote.top_k <= search.budget")
        return cls(name=str(raw["name"]), env=str(raw["env"]), candidates=Path(raw["candidates"]),
                   out=Path(raw["out"]), seed=int(raw.get("seed", 1000)), env_kwargs=kwargs, search=search,
                   promote=promote, source=source)


def load_plan(path: str | Path) -> EvalPlan:
    """Read an eval plan YAML; a clear `RsiEnvError` for a missing file or a malformed plan."""
    p = Path(path)
    if not p.is_file():
        raise RsiEnvError(f"no eval plan at {p} (plans live in configs/eval/)")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise RsiEnvError(f"eval plan {p}: not YAML ({exc})") from None
    return EvalPlan.from_dict(raw, source=str(p))
