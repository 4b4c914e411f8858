"""Evaluating an agent's ``policy.py`` in a fresh sandbox: its keys for every request, validated.

The policy file, its driver (`rsi_env.tasks.scheduler.run_policy`) and its server (`rsi_env.tasks.scheduler.policy_server`),
both standard library only, are copied into a new folder with the requests (and a fresh secret); a
new sandbox of the chosen backend runs the driver there (`run_harness`), which asks the policy for
its keys in a process of its own, one request at a time, and signs what it got. Only the signed
keys file comes back: its signature and every number in it are checked (`PolicyKeys.parse`).
Results are cached by the policy's exact text, the requests and the backend: a policy must give the
same keys every time (submit verifies that on uncached runs), so a repeated measurement costs
nothing.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections import OrderedDict
from pathlib import Path
from typing import Any

from rsi_env.sandbox.backends import default_backend
from rsi_env.sandbox.base import Limits
from rsi_env.sandbox.fresh import ReportErrors, run_harness
from rsi_env.sandbox.signed import signed_body
from rsi_env.sim.policy_hook import REQUEST_FIELDS, PolicyError, PolicyKeys

__all__ = ["policy_keys"]

DRIVER = Path(__file__).with_name("run_policy.py")
SERVER = Path(__file__).with_name("policy_server.py")
POLICY_FILE = "policy.py"
KEYS_TIMEOUT_S = 10.0
_LIMITS = Limits(cpu_s=10, memory_bytes=2 << 30, file_bytes=64 << 20, max_procs=32)
_CACHE: OrderedDict[str, dict[str, PolicyKeys]] = OrderedDict()
_CACHE_SIZE = 256
_ERRORS = ReportErrors(PolicyError, timed_out="policy.py did not finish computing its keys",
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
    raw = _signed_keys(source, list(tables.values()), name)
    out = {w: PolicyKeys.parse(k, len(reqs), f"workload {w}") for (w, reqs), k in zip(tables.items(), raw, strict=True)}
    _CACHE[key] = out
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return out


def _signed_keys(source: str, tables: list[list[dict[str, Any]]], backend: str) -> list[Any]:
    """The driver's keys for ``tables`` (sent unnamed, contract fields only), its signature checked."""
    secret = secrets.token_hex(32)
    request = {"secret": secret, "tables": [[{f: r[f] for f in REQUEST_FIELDS} for r in t] for t in tables]}
    files = {POLICY_FILE: source, DRIVER.name: DRIVER.read_text(), SERVER.name: SERVER.read_text(),
             "requests.json": json.dumps(request)}
    report = run_harness(files, f"{{python}} -I {DRIVER.name} {POLICY_FILE} requests.json keys.json", "keys.json",
                         _ERRORS, backend=backend, timeout_s=KEYS_TIMEOUT_S, max_output=4096, limits=_LIMITS)
    body = _verified(report, secret)
    if "error" in body:
        raise PolicyError(f"{_ERRORS.raised}:\n{str(body['error'])[-1200:]}")
    keys = body.get("keys")
    if not isinstance(keys, list) or len(keys) != len(tables):
        raise PolicyError("the keys file does not cover exactly the workloads asked for")
    return keys


def _verified(report: Any, secret: str) -> dict[str, Any]:
    """The body of the driver's report, if it carries the driver's signature; `PolicyError` if not."""
    body = signed_body(report, secret)
    if body is None:
        raise PolicyError("the keys file does not carry the driver's signature: something other than the driver "
                          "wrote keys.json (policy.py must leave the driver's files alone)")
    return body
