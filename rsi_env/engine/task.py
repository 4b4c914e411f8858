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

from rsi_env.engine.config import FLAGS
from rsi_env.errors import CatalogError, RsiEnvError

__all__ = ["Task", "list_tasks", "load_task"]

_METRICS_MAX = {"goodput_req_per_s", "out_tok_per_s", "total_tok_per_s", "req_per_s"}
_METRICS_MIN = {"ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99",
                "cost_per_mtok_usd", "good_cost_per_mtok_usd"}
_METRICS_CODE = {"speedup_vs_reference"}  # RSI/Kernel-v0: eager reference time / kernel time


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

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Task:
        try:
            obj = raw["objective"]
            flags = tuple(raw["flags"])
            unknown = [f for f in flags if f not in FLAGS]
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
            )
        except KeyError as exc:
            raise RsiEnvError(f"task definition is missing {exc.args[0]!r}") from None

    def ladder(self, flag: str) -> tuple[Any, ...]:
        """The values an agent's ``value`` in [0, 1] steps along for ``flag``."""
        return self.ladders.get(flag) or FLAGS[flag].ladder


def _task_dir() -> Any:
    return resources.files("rsi_env") / "catalog" / "tasks"


@cache
def _all() -> dict[str, Task]:
    out = {}
    for p in sorted(_task_dir().iterdir(), key=lambda q: q.name):
        if p.name.endswith(".yaml"):
            t = Task.from_dict(yaml.safe_load(p.read_text()))
            out[t.id] = t
    return out


def list_tasks() -> list[Task]:
    return list(_all().values())


def load_task(task_id: str) -> Task:
    try:
        return _all()[task_id]
    except KeyError:
        raise CatalogError(f"unknown task {task_id!r}; known: {sorted(_all())}") from None
