"""Spread measurements over Ray workers: `measure_remote` and a `Measurer` for `Evaluator`.

A measurement is a pure function of (tier, vLLM release, configuration, model, hardware,
workloads), so it ships as a Ray task: :func:`measure_remote` submits one and returns its object
ref. A tier that runs the real engine needs a GPU per measurement (``num_gpus=1``, so Ray places
each on its own device); the sim tier needs none (``num_gpus=0``, one CPU). :func:`ray_measurer`
measures a search's whole batch at once this way, and :func:`connect` joins a cluster
(``--address``) or starts a local one. Ray is imported only inside these functions: ``import
rsi_env`` and the in-process baselines never load it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.envs.problem import Problem

__all__ = ["connect", "gpus_per_measurement", "measure_remote", "ray_measurer", "remote_measure"]

_CPU_TIERS = frozenset({"sim"})


def gpus_per_measurement(tier: str) -> int:
    """GPUs one measurement on ``tier`` occupies: none for the simulator, one for a real engine."""
    return 0 if tier in _CPU_TIERS else 1


def _measure(tier: str, engine_version: str, config: EngineConfig, model: ModelSpec, hardware: HardwareSpec,
             workloads: Sequence[Workload]) -> list[Telemetry]:
    """Measure on the worker's own (cached) tier: the body of every remote measurement."""
    from rsi_env.envs.measure import get_tier

    return get_tier(tier, engine_version).measure_all(config, model, hardware, list(workloads))


def remote_measure(tier: str) -> Any:
    """The Ray remote function that measures on ``tier``, asking for :func:`gpus_per_measurement` GPUs."""
    return _remote(gpus_per_measurement(tier))


@cache
def _remote(num_gpus: int) -> Any:
    import ray

    return ray.remote(num_gpus=num_gpus, num_cpus=1, max_retries=0)(_measure)


def measure_remote(tier: str, engine_version: str, config: EngineConfig, model: ModelSpec, hardware: HardwareSpec,
                   workloads: Sequence[Workload]) -> Any:
    """Submit one measurement as a Ray task (``num_gpus`` per :func:`gpus_per_measurement`); returns its ref.

    ``ray.get(ref)`` is the per-workload telemetry, exactly what ``tier.measure_all`` returns in-process.
    """
    return remote_measure(tier).remote(tier, engine_version, config, model, hardware, list(workloads))


def ray_measurer(problem: Problem, configs: Sequence[EngineConfig]) -> list[list[Telemetry]]:
    """`Evaluator`'s measurer: the batch as concurrent Ray tasks, results in order."""
    import ray

    refs = [measure_remote(problem.tier.name, problem.tier.engine_version, c, problem.model, problem.hardware,
                           problem.workloads) for c in configs]
    result: list[list[Telemetry]] = ray.get(refs)
    return result


def connect(address: str | None = None, num_cpus: int | None = None) -> None:
    """Join the Ray cluster at ``address``, or start a local one with ``num_cpus`` workers' worth of CPUs.

    A cluster's workers get this ``baselines`` package shipped with the job (``py_modules``); they
    need rsi-env installed, as every node that measures does.
    """
    import ray

    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 runtime_env={"py_modules": [str(Path(__file__).resolve().parent)]})
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
