"""A scheduling policy in the simulated engine: the waiting queue's order and the preemption victim.

The interface (what a workspace's ``policy.py`` defines; ``RSI/Scheduler-v0`` documents it to agents):

    def waiting_key(request) -> float   # where the request waits: smaller keys are admitted first
    def victim_key(request) -> float    # when KV blocks run out, the running request with the
                                        # largest key is preempted (by recompute) and waits again

``request`` has ``id``, ``arrival_s``, ``prompt_tokens`` (shared prefix included), ``prefix_group``
(-1 without a shared prefix) and ``prefix_tokens`` — what a server knows when a request arrives; never
its output length. Keys are static per request, as in vLLM's ``priority`` policy, where a request's
``(priority, arrival_time)`` orders the queue and picks victims: a policy here is a choice of those two
keys, which is what lets the real tier run it inside vLLM too. Aging is folded into the key (e.g.
``arrival_s + min(prompt_tokens / 4096, 2.0)`` bounds how long a long prompt can be passed over).

The keys are computed by the agent's code in a sandbox, in a process of its own that is sent one
request at a time, ``REQUEST_FIELDS`` only (`rsi_env.tasks.scheduler.run_policy`); the engine that uses them runs
here, in the env's process, so the agent's code never touches a measurement.

`PolicyEngineSim` plugs the keys into `EngineSim` through its two overridable methods,
``waiting_key(i)`` and ``victim_key(i)``, which ``EngineSim.run`` reads once per request before the run and passes
to the compiled loop as arrays (the keys are static per request; defaults: the arrival time, i.e. vLLM's own priority
order with equal priorities).
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from functools import partial
from typing import Any

from rsi_env.engine.config import EngineConfig, ResolvedConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.policy import PolicyKeys
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Trace, Workload
from rsi_env.errors import PolicyError
from rsi_env.sim import simulate_detailed
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.cost import StepCost
from rsi_env.sim.engine import EngineSim, SimResult

__all__ = ["PolicyEngineSim", "PolicyError", "PolicyKeys", "request_table", "simulate_policy"]

REQUEST_FIELDS = ("id", "arrival_s", "prompt_tokens", "prefix_group", "prefix_tokens")


def request_table(trace: Trace) -> list[dict[str, Any]]:
    """What a policy may know of each request (open-loop traces: arrival times are fixed in advance)."""
    if trace.closed_concurrency:
        raise PolicyError("a scheduling policy is evaluated on open-loop workloads (fixed arrival times)")
    return [{"id": i, "arrival_s": float(trace.arrival_s[i]), "prompt_tokens": int(trace.prompt_len[i]),
             "prefix_group": int(trace.prefix_group[i]), "prefix_tokens": int(trace.prefix_len[i])}
            for i in range(len(trace))]


class PolicyEngineSim(EngineSim):
    """`EngineSim` under the priority policy, ordered by a policy's keys instead of arrival times."""

    def __init__(self, cfg: ResolvedConfig, cost: StepCost, trace: Trace, num_gpu_blocks: int,
                 check_invariants: bool = False, *, keys: PolicyKeys) -> None:
        if not hasattr(EngineSim, "waiting_key") or not hasattr(EngineSim, "victim_key"):
            raise PolicyError("this simulator has no scheduling-policy hooks (EngineSim.waiting_key/victim_key)")
        if len(keys.waiting) != len(trace):
            raise PolicyError(f"{len(keys.waiting)} keys for a trace of {len(trace)} requests")
        super().__init__(replace(cfg, scheduling_policy="priority"), cost, trace, num_gpu_blocks, check_invariants)
        self.keys = keys

    def waiting_key(self, i: int) -> float:
        return float(self.keys.waiting[i])

    def victim_key(self, i: int) -> float:
        return float(self.keys.victim[i])


def simulate_policy(engine_config: EngineConfig, model: ModelSpec, hardware: HardwareSpec, workload: Workload,
                    keys: PolicyKeys, *, engine_version: str = "0.26", calibration: Calibration | None = None,
                    check_invariants: bool = False) -> tuple[Telemetry, list[SimResult]]:
    """Simulate ``workload`` with the waiting order and victims that ``keys`` give (one engine replica)."""
    if "engine_cls" not in inspect.signature(simulate_detailed).parameters:
        raise PolicyError("this simulator cannot take a scheduling policy (simulate_detailed has no engine_cls)")
    if engine_config.data_parallel_size not in (None, 1):
        raise PolicyError("a scheduling policy is simulated on one engine replica (data_parallel_size=1)")
    tel, _, _, results = simulate_detailed(engine_config, model, hardware, workload, engine_version=engine_version,
                                           calibration=calibration, check_invariants=check_invariants,
                                           engine_cls=partial(PolicyEngineSim, keys=keys))
    return tel, results
