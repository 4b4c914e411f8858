"""A scheduling policy's keys on their way to the real engine: one JSON file, keyed by vLLM request id.

The keys are computed before the engine starts, by the workspace's ``policy.py`` in a fresh sandbox
(`rsi_env.tasks.scheduler.sandboxed.policy_keys`); only these numbers reach the engine. The driver names
request ``i`` of workload ``w`` ``f"{w}-{i}"`` (`request_id`); the file maps each such id to its
``[waiting_key, victim_key]``. vLLM may run its engine core in a separate (spawned) process, so the
file's path travels in the environment variable `KEYS_ENV`, which `PolicyScheduler` reads there.
This module imports neither vLLM nor the sandbox: the driver and the tier both use it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["KEYS_ENV", "LOG_ENV", "SCHEDULER_CLS", "ASYNC_SCHEDULER_CLS", "read_policy_keys", "request_id",
           "write_policy_keys"]

KEYS_ENV = "RSI_POLICY_KEYS"  # path of the keys file, read by the engine core's scheduler
LOG_ENV = "RSI_POLICY_LOG"  # optional: a JSON-lines file where the scheduler records admissions and preemptions
SCHEDULER_CLS = "rsi_env.real.policy_scheduler.PolicyScheduler"
ASYNC_SCHEDULER_CLS = "rsi_env.real.policy_scheduler.AsyncPolicyScheduler"


def request_id(workload: str, i: int) -> str:
    """The vLLM request id the driver gives request ``i`` of ``workload``."""
    return f"{workload}-{i}"


def write_policy_keys(path: str | Path, keys: Mapping[str, Any]) -> int:
    """Write ``{workload name: PolicyKeys}`` as ``{request id: [waiting, victim]}``; returns the count."""
    out: dict[str, list[float]] = {}
    for name, k in keys.items():
        for i, (w, v) in enumerate(zip(k.waiting, k.victim, strict=True)):
            out[request_id(name, i)] = [float(w), float(v)]
    Path(path).write_text(json.dumps(out))
    return len(out)


def read_policy_keys(path: str | Path) -> dict[str, tuple[float, float]]:
    """Read a keys file back, checking every entry; `ValueError` says what is wrong."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the policy keys file {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected {{request id: [waiting_key, victim_key]}}")
    out = {}
    for rid, pair in raw.items():
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in pair)):
            raise ValueError(f"{path}: request {rid!r} needs [waiting_key, victim_key] as two finite numbers")
        out[str(rid)] = (float(pair[0]), float(pair[1]))
    return out
