"""Hidden checks of a scheduling policy: no request lost, none starved, the same keys every time.

Run at submission on workloads the agent never sees (``catalog/code/scheduler/hidden/checks.yaml``):
the policy's keys are computed twice, in two fresh sandboxes and uncached; the engine then runs here
with the simulator's invariant checks on. A check fails when

- the policy cannot be run, or gives different keys on the two runs (``deterministic``);
- some request does not finish with every output token it asked for (``no request lost``);
- some request waits for its first token more than ``starvation_slack_s`` longer than the longest
  wait under first come, first served on the same workload and engine (``no request starved``).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import yaml

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.workload import Workload
from rsi_env.sandbox.hidden import CODE_DIR, CheckResult
from rsi_env.sim.policy_hook import PolicyError, PolicyKeys, request_table, simulate_policy
from rsi_env.sim.sandboxed_policy import policy_keys

__all__ = ["CheckResult", "check_policy"]

CHECKS = CODE_DIR / "scheduler" / "hidden" / "checks.yaml"
_VERDICTS: OrderedDict[str, tuple[CheckResult, ...]] = OrderedDict()


def _fcfs_keys(arrival: np.ndarray) -> PolicyKeys:
    return PolicyKeys(arrival.astype(np.float64), arrival.astype(np.float64))


def check_policy(source: str, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, *, backend: str = "auto",
                 engine_version: str = "0.26", checks: Path = CHECKS) -> list[CheckResult]:
    """Run the hidden checks on ``source``; one result per property, each with its reason.

    The verdict of an exact policy text on an exact setting is remembered for the process: its two
    uncached sandbox runs already established whether it is deterministic.
    """
    spec_text = checks.read_text()
    key = hashlib.sha256(json.dumps([source, cfg.to_dict(), model.name, hw.name, backend, engine_version, spec_text],
                                    sort_keys=True, default=str).encode()).hexdigest()
    if key not in _VERDICTS:
        _VERDICTS[key] = _run_checks(source, cfg, model, hw, backend, engine_version, spec_text)
        if len(_VERDICTS) > 256:
            _VERDICTS.popitem(last=False)
    return list(_VERDICTS[key])


def _run_checks(source: str, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, backend: str,
                engine_version: str, spec_text: str) -> tuple[CheckResult, ...]:
    spec = yaml.safe_load(spec_text)
    slack = float(spec["starvation_slack_s"])
    workloads = [Workload.from_dict(w) for w in spec["workloads"]]
    tables = {w.name: request_table(w.trace()) for w in workloads}
    try:
        first = policy_keys(source, tables, backend, use_cache=False)
        second = policy_keys(source, tables, backend, use_cache=False)
    except PolicyError as exc:
        return (CheckResult("policy runs", False, str(exc)),)
    same = all(np.array_equal(first[w].waiting, second[w].waiting) and np.array_equal(first[w].victim, second[w].victim)
               for w in tables)
    out = [CheckResult("deterministic", same, "" if same else "two runs of policy.py gave different keys")]
    lost: list[str] = []
    starved: list[str] = []
    for w in workloads:
        tel, res = simulate_policy(cfg, model, hw, w, first[w.name], engine_version=engine_version,
                                   check_invariants=True)
        base_tel, base = simulate_policy(cfg, model, hw, w, _fcfs_keys(w.trace().arrival_s),
                                         engine_version=engine_version)
        if not tel.ok or not res:
            lost.append(f"{w.name}: {tel.error}")
            continue
        r = res[0]
        unfinished = int((~np.isfinite(r.finish)).sum() + (r.generated < r.output_len).sum())
        if unfinished:
            lost.append(f"{w.name}: {unfinished} requests never finished")
        wait = float(np.max(r.first_token - r.arrival))
        bound = float(np.max(base[0].first_token - base[0].arrival)) + slack
        if wait > bound:
            starved.append(f"{w.name}: a request waited {wait:.1f} s for its first token (bound {bound:.1f} s)")
    out.append(CheckResult("no request lost", not lost, "; ".join(lost)))
    out.append(CheckResult("no request starved", not starved, "; ".join(starved)))
    return tuple(out)
