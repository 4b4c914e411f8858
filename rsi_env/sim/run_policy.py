"""Run inside a sandbox (by `rsi_env.sandbox.agent_runner`): ``policy.py``'s keys for every request.

Standard library only (it is copied into a fresh sandbox, away from the rsi_env package). The input is
``{workload: [request, ...]}`` (see `rsi_env.sim.policy_hook`); the answer ``{workload: {"waiting":
[...], "victim": [...]}}``. The env validates whatever comes back: nothing here is trusted.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

FUNCTIONS = {"waiting_key": "waiting_key(request) -> float", "victim_key": "victim_key(request) -> float"}


def _keys(policy: Any, requests: list[dict[str, Any]]) -> dict[str, list[float]]:
    waiting, victim = [], []
    for r in requests:  # in arrival order, one request at a time
        req = SimpleNamespace(**r)
        waiting.append(float(policy.waiting_key(req)))
        victim.append(float(policy.victim_key(req)))
    return {"waiting": waiting, "victim": victim}


def answer(policy: Any, tables: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {name: _keys(policy, reqs) for name, reqs in tables.items()}
