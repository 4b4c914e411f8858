"""Evaluating an agent's ``policy.py`` in a fresh sandbox: its keys for every request, validated.

The policy file and the harness (`rsi_env.sim.run_policy`, standard library only) are copied into a new
folder with the requests; a new sandbox of the chosen backend runs them there (`run_agent_module`); only
the keys file comes back, and every number in it is checked (`PolicyKeys.parse`). Results are cached by the policy's
exact text, the requests and the backend: a policy must give the same keys every time (the hidden
checks verify that on uncached runs), so a repeated measurement costs nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from rsi_env.sandbox.backends import default_backend
from rsi_env.sandbox.base import Limits
from rsi_env.sandbox.fresh import ReportErrors, run_agent_module
from rsi_env.sandbox.hidden import hidden_paths
from rsi_env.sim.policy_hook import PolicyError, PolicyKeys

__all__ = ["policy_keys"]

HARNESS = Path(__file__).with_name("run_policy.py")
KEYS_TIMEOUT_S = 10.0
_LIMITS = Limits(cpu_s=10, memory_bytes=2 << 30, file_bytes=64 << 20, max_procs=32)
_CACHE: OrderedDict[str, dict[str, PolicyKeys]] = OrderedDict()
_CACHE_SIZE = 256
_ERRORS = ReportErrors(PolicyError, timed_out=f"policy.py did not finish computing its keys within {KEYS_TIMEOUT_S:.0f} s",
                       missing="policy.py produced no keys",
                       not_json="the keys file is not JSON (did policy.py write over it?)",
                       raised="policy.py raised an error")


def policy_keys(source: str, tables: dict[str, list[dict[str, Any]]], backend: str = "auto", *,
                use_cache: bool = True) -> dict[str, PolicyKeys]:
    """The keys ``source`` (a policy.py) gives each request of each table; `PolicyError` says why not."""
    name = default_backend() if backend == "auto" else backend
    blob = json.dumps(tables, sort_keys=True)
    key = hashlib.sha256(f"{name}\0{source}\0{blob}".encode()).hexdigest()
    if use_cache and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    data = run_agent_module(HARNESS, "policy.py", source, blob, _ERRORS, input_file="requests.json",
                            report="keys.json", backend=name, timeout_s=KEYS_TIMEOUT_S, max_output=4096,
                            limits=_LIMITS, hidden=hidden_paths())
    if not isinstance(data, dict) or set(data) != set(tables):
        raise PolicyError("the keys file does not cover exactly the workloads asked for")
    out = {w: PolicyKeys.parse(data[w], len(reqs), f"workload {w}") for w, reqs in tables.items()}
    _CACHE[key] = out
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return out
