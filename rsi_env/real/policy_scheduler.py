"""vLLM's V1 scheduler under a workspace's scheduling policy: the real tier of ``RSI/Scheduler-v0``.

Passed to vLLM as ``scheduler_cls`` (a ``"module.Class"`` string, resolved in the engine-core process,
which vLLM may spawn) together with ``scheduling_policy="priority"``. That policy already does what a
policy of ``RSI/Scheduler-v0`` says, with one number per request: the waiting queue is a heap ordered
by ``(priority, arrival_time, request_id)``, and when KV-cache blocks run out the running request
with the largest ``(priority, arrival_time)`` is preempted and pushed back onto the heap. A policy has
two numbers per request, so the scheduler swaps which one ``request.priority`` holds:

- on arrival (``add_request``) and when preempted (``_preempt_request``, before the request goes back
  on the heap): its ``waiting_key`` — so the heap, and nothing else, orders the waiting requests;
- at the start of every ``schedule()``, for every running request: its ``victim_key`` — running
  requests' priorities are read only by the victim choice (``max(self.running, …)``) in that step.

Requests admitted during a step keep their waiting key until the next step; the victim choice of a
step only looks at requests that were running when it began, so it never sees them. Nothing of
vLLM's ``schedule()`` is copied. The keys come from a JSON file (`rsi_env.real.policy_keys`) written
before the engine started: the agent's code never runs in this process. They are keyed by the id the
client sent; vLLM (0.26 and later) makes its internal id unique by appending ``-`` and 8 random
characters, which `PolicyScheduler.client_id` strips. Requests without a key (the driver's warm-up)
keep the priority they were sent with.

With ``RSI_POLICY_LOG`` set, every admission and preemption is appended to that JSON-lines file
(what the tests observe): ``{"admitted": [ids], "waiting": [ids]}`` per step that admits, and
``{"victim": id, "running": [ids]}`` per preemption (``running`` includes the victim).
"""

from __future__ import annotations

import json
import os
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler

from rsi_env.real.policy_keys import KEYS_ENV, LOG_ENV, read_policy_keys

__all__ = ["AsyncPolicyScheduler", "PolicyScheduler"]


class PolicyScheduler(Scheduler):
    """`Scheduler` ordering waiting requests by their ``waiting_key`` and preempting by ``victim_key``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.policy != SchedulingPolicy.PRIORITY:
            raise ValueError("rsi-env's PolicyScheduler needs scheduling_policy='priority' "
                             f"(got {self.scheduler_config.policy!r})")
        path = os.environ.get(KEYS_ENV)
        if not path:
            raise ValueError(f"rsi-env's PolicyScheduler needs {KEYS_ENV}: the path of the policy keys file")
        self.policy_keys = read_policy_keys(path)
        log = os.environ.get(LOG_ENV)
        self._log = open(log, "a", buffering=1) if log else None  # noqa: SIM115  # lives as long as the engine

    def client_id(self, request: Any) -> str:
        """The id the client sent: vLLM's internal id without the ``-xxxxxxxx`` it appended, if it did."""
        rid = str(request.request_id)
        if rid in self.policy_keys:
            return rid
        head, _, tail = rid.rpartition("-")
        return head if head in self.policy_keys and len(tail) == 8 else rid

    def _keys(self, request: Any) -> tuple[float, float] | None:
        return self.policy_keys.get(self.client_id(request))

    # ---- the two swaps ---------------------------------------------------------------------------
    def add_request(self, request: Any) -> None:
        keys = self._keys(request)
        if keys is not None:
            request.priority = keys[0]
        super().add_request(request)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        for r in self.running:
            keys = self._keys(r)
            if keys is not None:
                r.priority = keys[1]  # type: ignore[assignment]  # vLLM annotates int; it only compares it
        if self._log is None:
            return super().schedule(*args, **kwargs)
        before = {id(r) for r in self.running}
        waiting = [self.client_id(r) for r in self.requests.values() if id(r) not in before and not r.is_finished()]
        out = super().schedule(*args, **kwargs)
        admitted = [self.client_id(r) for r in self.running if id(r) not in before]
        if admitted:
            self._write({"admitted": admitted, "waiting": waiting})
        return out

    def _preempt_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if self._log is not None:
            running = [self.client_id(r) for r in self.running if r is not request]
            self._write({"victim": self.client_id(request), "running": [*running, self.client_id(request)]})
        keys = self._keys(request)
        if keys is not None:
            request.priority = keys[0]  # back on the waiting heap, where the waiting key orders it
        return super()._preempt_request(request, *args, **kwargs)

    def _write(self, event: dict[str, Any]) -> None:
        assert self._log is not None
        self._log.write(json.dumps(event) + "\n")


class AsyncPolicyScheduler(PolicyScheduler, AsyncScheduler):
    """The same policy on vLLM's `AsyncScheduler`, used when the engine resolves ``async_scheduling`` on."""
