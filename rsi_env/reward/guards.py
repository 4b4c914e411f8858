"""Guards: what must hold for a submission to count, each with the reason when it does not.

- ``workloads``: the workload files in the workspace still hash to the frozen ones (the env always
  measures its own copy; tampering is flagged, never rewarded);
- ``precision``: precision flags keep the baseline's values unless the task allows fp8;
- ``quality``: the declared accuracy cost of the precision chosen stays within the task's budget;
- ``measured``: every workload was measured without error;
- ``slo``: every workload meets the task's SLO attainment;
- ``improvement``: the objective beats vLLM's defaults by the task's threshold;
- ``outputs`` (real tier, when outputs were recorded): greedy output tokens of a sample of requests
  match those of the baseline configuration (`output_guard`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rsi_env.engine.engines import AnyConfig
from rsi_env.engine.task import Task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.reward.objective import slo_attainment

__all__ = ["GuardResult", "OutputTokens", "Verdict", "check_submission", "output_agreement", "output_guard",
           "quality_cost"]

# Greedy output token ids recorded by the real tier: workload name -> request index (as text) -> token ids.
OutputTokens = Mapping[str, Mapping[str, Sequence[int]]]


@dataclass(frozen=True)
class GuardResult:
    name: str
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class Verdict:
    """The binary part of the reward: passed only if every guard holds."""

    passed: bool
    score: float
    guards: tuple[GuardResult, ...]

    def summary(self, limit: int | None = None) -> str:
        """One line per guard. Within ``limit`` characters every guard keeps its line: the longest reasons are
        clipped first (an observation is bounded, and one guard's traceback must not hide another's verdict)."""
        head = f"submission {'PASSED' if self.passed else 'FAILED'} (score {self.score:+.4f})"
        prefixes = [f"  [{'ok' if g.ok else 'FAIL'}] {g.name}{': ' if g.reason else ''}" for g in self.guards]
        reasons = [g.reason for g in self.guards]
        if limit is not None:
            room = limit - len(head) - sum(len(p) + 1 for p in prefixes)
            reasons = _fit(reasons, room)
        return "\n".join([head] + [p + r for p, r in zip(prefixes, reasons, strict=True)])


_CLIPPED = " ...[clipped]"


def _fit(texts: list[str], room: int) -> list[str]:
    """``texts`` within ``room`` characters in all: the short ones whole, the long ones cut to an equal share."""
    if sum(map(len, texts)) <= room:
        return texts
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = list(texts)
    left = max(room, 0)
    for n, i in enumerate(order):
        share = left // (len(order) - n)
        if len(texts[i]) > share:
            cut = share - len(_CLIPPED)
            out[i] = texts[i][:cut] + _CLIPPED if cut > 0 else texts[i][:share]
        left -= len(out[i])
    return out


def quality_cost(task: Task, cfg: AnyConfig) -> float:
    """The declared quality loss of the precision flags ``cfg`` sets."""
    total = 0.0
    for flag, costs in task.quality_cost.items():
        value = getattr(cfg, flag)
        if value is not None:
            key = "fp8" if str(value).startswith("fp8") else str(value)
            total += float(costs.get(key, 0.0))
    return total


def output_agreement(baseline: OutputTokens, candidate: OutputTokens,
                     prefix_tokens: int | None = None) -> tuple[int, int, list[str]]:
    """How many of the baseline's recorded requests the candidate reproduced exactly (their first ``prefix_tokens``).

    Returns (agreeing, compared, up to three examples of a disagreement). A request the candidate
    did not record, or one shorter than asked, disagrees.
    """
    agree = compared = 0
    examples: list[str] = []
    for wl, reqs in baseline.items():
        got = candidate.get(wl, {})
        for i, base in reqs.items():
            want = list(base[:prefix_tokens] if prefix_tokens else base)
            have = list(got.get(i, ())[: len(want)])
            compared += 1
            if have == want:
                agree += 1
            elif len(examples) < 3:
                at = next((k for k, (a, b) in enumerate(zip(want, have, strict=False)) if a != b), min(len(want), len(have)))
                examples.append(f"{wl}#{i} differs at token {at}")
    return agree, compared, examples


def output_guard(baseline: OutputTokens, candidate: OutputTokens, min_agreement: float = 0.9,
                 prefix_tokens: int | None = None) -> GuardResult:
    """Greedy outputs must match the baseline's on at least ``min_agreement`` of the sampled requests.

    A request agrees when its first ``prefix_tokens`` greedy tokens (all recorded, if ``None``) are
    identical. The tolerance is for engines that are not batch-invariant (a different batch shape can
    flip a near-tie); a precision change alters most sampled outputs (docs/evaluation.md: the numbers measured).
    """
    agree, compared, examples = output_agreement(baseline, candidate, prefix_tokens)
    if compared == 0:
        return GuardResult("outputs", False, "no baseline outputs recorded to compare against")
    frac = agree / compared
    ok = frac >= min_agreement
    why = f"{agree}/{compared} sampled requests match the baseline's greedy tokens (need {min_agreement:.0%})"
    return GuardResult("outputs", ok, why + ("" if ok else "; " + ", ".join(examples)))


def check_submission(task: Task, cfg: AnyConfig, baseline_cfg: AnyConfig, tels: Sequence[Telemetry],
                     workloads: Sequence[Workload], workspace_workloads: Sequence[Workload | None],
                     score: float, outputs: GuardResult | None = None) -> Verdict:
    g: list[GuardResult] = []
    tampered = [w.name for w, seen in zip(workloads, workspace_workloads, strict=True)
                if seen is None or seen.content_hash != w.content_hash]
    g.append(GuardResult("workloads", not tampered, f"changed or removed: {tampered}" if tampered else ""))
    changed = [f for f in task.precision_flags if getattr(cfg, f) != getattr(baseline_cfg, f)]
    prec_ok = task.allow_fp8 or not changed
    g.append(GuardResult("precision", prec_ok, "" if prec_ok else f"precision is fixed in this task: {changed}"))
    qc = quality_cost(task, cfg)
    q_ok = qc <= task.quality_budget + 1e-12
    g.append(GuardResult("quality", q_ok, f"declared quality cost {qc:.4f} vs budget {task.quality_budget:.4f}"))
    errors = [f"{w.name}: {t.error}" for w, t in zip(workloads, tels, strict=True) if not t.ok]
    g.append(GuardResult("measured", not errors, "; ".join(errors)))
    short = [f"{w.name}: {slo_attainment(t):.3f}" for w, t in zip(workloads, tels, strict=True)
             if t.ok and slo_attainment(t) < task.slo_attainment]
    g.append(GuardResult("slo", not short and not errors,
                         f"attainment below {task.slo_attainment}: {short}" if short else ""))
    need = math.log1p(task.improvement_threshold)
    imp_ok = math.isfinite(score) and score >= need
    g.append(GuardResult("improvement", imp_ok,
                         f"score {score:+.4f} vs required {need:+.4f} (+{task.improvement_threshold:.0%})"))
    if outputs is not None:
        g.append(outputs)
    return Verdict(all(x.ok for x in g), score, tuple(g))
