"""The checks of a scheduling policy at submission: no request lost, none starved, the same keys every time.

They run on the episode's scored workloads (the ones its score was measured on, seeded as the
episode's) and on workloads the agent never sees (``catalog/code/scheduler/hidden/checks.yaml``), so a
policy that behaved on the check workloads only and starved requests on the scored ones gains
nothing by telling them apart. The policy's keys for all of them are computed twice, in two fresh
sandboxes and uncached; the engine then runs here with the simulator's invariant checks on. A check
fails when

- the policy cannot be run (``policy runs``), or gives different keys on the two runs, or on a
  scored workload different keys from those its score was measured with (``deterministic``);
- some request does not finish with every output token it asked for (``no request lost``);
- some request waits for its first token more than ``starvation_slack_s`` longer than the longest
  wait under first come, first served on the same workload and engine (``no request starved``).

Nothing of the agent's is remembered between calls: each submission verifies from a clean start.
Only the first come, first served runs (trusted, and the same for every policy) are remembered.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.workload import Workload
from rsi_env.sandbox.hidden import CODE_DIR, CheckResult
from rsi_env.sim.policy_hook import PolicyError, PolicyKeys, request_table, simulate_policy
from rsi_env.tasks.scheduler.sandboxed import policy_keys

__all__ = ["CheckResult", "check_policy"]

CHECKS = CODE_DIR / "scheduler" / "hidden" / "checks.yaml"
_FCFS: OrderedDict[str, tuple[float | None, str]] = OrderedDict()  # the longest FCFS wait, or None and why
_FCFS_SIZE = 64


@dataclass(frozen=True)
class _Case:
    """One workload the checks run on, under the label its failures are reported with."""

    label: str
    workload: Workload
    scored: bool


def _fcfs_wait(w: Workload, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
               engine_version: str) -> tuple[float | None, str]:
    """The longest wait for a first token under first come, first served, or None and the engine's error."""
    key = repr((cfg.to_dict(), model, hw, w.content_hash, engine_version))
    if key not in _FCFS:
        arrival = w.trace().arrival_s.astype(np.float64)
        tel, res = simulate_policy(cfg, model, hw, w, PolicyKeys(arrival, arrival), engine_version=engine_version)
        _FCFS[key] = ((float(np.max(res[0].first_token - res[0].arrival)), "") if tel.ok and res
                      else (None, str(tel.error)))
        if len(_FCFS) > _FCFS_SIZE:
            _FCFS.popitem(last=False)
    return _FCFS[key]


def _same(a: PolicyKeys, b: PolicyKeys) -> bool:
    return np.array_equal(a.waiting, b.waiting) and np.array_equal(a.victim, b.victim)


def _cases(scored: Sequence[Workload], hidden: Sequence[Workload]) -> list[_Case]:
    out = [_Case(w.name, w, True) for w in scored]
    taken = {c.label for c in out}
    out += [_Case(w.name if w.name not in taken else f"{w.name} (hidden)", w, False) for w in hidden]
    return out


def check_policy(source: str, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, *,
                 scored: Sequence[Workload] = (), measured: Mapping[str, PolicyKeys] | None = None,
                 skip_unfit: bool = False, backend: str = "auto", engine_version: str = "0.26",
                 checks: Path = CHECKS) -> list[CheckResult]:
    """Run every check of ``source`` on ``scored`` and the hidden workloads; one result per property.

    ``measured`` holds the keys the score was measured with, by scored workload's name: the keys
    computed here must equal them. With ``skip_unfit``, a scored workload that first come, first
    served cannot run on this engine (one sized for another model, on ``tier="real"``) is left out
    and named in the results; otherwise it fails ``no request lost``.
    """
    spec = yaml.safe_load(checks.read_text())
    cases = _cases(scored, [Workload.from_dict(w) for w in spec["workloads"]])
    tables = {c.label: request_table(c.workload.trace()) for c in cases}
    try:
        first = policy_keys(source, tables, backend, use_cache=False)
        second = policy_keys(source, tables, backend, use_cache=False)
    except PolicyError as exc:
        return [CheckResult("policy runs", False, str(exc))]
    out = [_deterministic(cases, first, second, measured or {})]
    lost: list[str] = []
    starved: list[str] = []
    skipped: list[str] = []
    for c in cases:
        problem = _run_case(c, first[c.label], cfg, model, hw, engine_version, float(spec["starvation_slack_s"]))
        if problem is None:
            continue
        kind, text = problem
        if kind == "unfit" and c.scored and skip_unfit:
            skipped.append(f"{c.label} ({text})")
        else:
            (starved if kind == "starved" else lost).append(f"{c.label}: {text}")
    where = _where(cases, skipped)
    out.append(CheckResult("no request lost", not lost, "; ".join(lost) or where))
    out.append(CheckResult("no request starved", not starved, "; ".join(starved) or where))
    return out


def _deterministic(cases: Sequence[_Case], first: Mapping[str, PolicyKeys], second: Mapping[str, PolicyKeys],
                   measured: Mapping[str, PolicyKeys]) -> CheckResult:
    if not all(_same(first[c.label], second[c.label]) for c in cases):
        return CheckResult("deterministic", False, "two runs of policy.py gave different keys")
    moved = [c.label for c in cases if c.scored and c.label in measured and not _same(first[c.label],
                                                                                       measured[c.label])]
    if moved:
        return CheckResult("deterministic", False, "policy.py gave different keys at submission than when it was "
                                                   f"measured, on {', '.join(moved)}")
    return CheckResult("deterministic", True)


def _run_case(c: _Case, keys: PolicyKeys, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
              engine_version: str, slack: float) -> tuple[str, str] | None:
    """None if the policy passes on ``c``; else ``("unfit" | "lost" | "starved", why)``."""
    longest, error = _fcfs_wait(c.workload, cfg, model, hw, engine_version)
    if longest is None:
        return "unfit", f"first come, first served cannot run it: {error}"
    tel, res = simulate_policy(cfg, model, hw, c.workload, keys, engine_version=engine_version, check_invariants=True)
    if not tel.ok or not res:
        return "lost", str(tel.error)
    r = res[0]
    unfinished = int((~np.isfinite(r.finish)).sum() + (r.generated < r.output_len).sum())
    if unfinished:
        return "lost", f"{unfinished} requests never finished"
    wait = r.first_token - r.arrival
    bound = longest + slack
    over = int((wait > bound).sum())
    if over:
        return "starved", (f"{over} requests waited longer than the bound of {bound:.1f} s for their first token "
                           f"(the longest {float(np.max(wait)):.1f} s)")
    return None


def _where(cases: Sequence[_Case], skipped: Sequence[str]) -> str:
    n_scored = sum(c.scored for c in cases) - len(skipped)
    text = f"on {n_scored} scored and {sum(not c.scored for c in cases)} hidden workloads"
    return text + (f"; not checked on this engine: {', '.join(skipped)}" if skipped else "")
