"""RSI/VLLMBugFix-v0's hidden checks: the workspace's vLLM serves a hidden job exactly as the clean vLLM does.

One engine start in a fresh sandbox (`rsi_env.tasks.vllm_bugfix.runs.run_engine`) serves the phases of
``catalog/code/vllm_bugfix/hidden/checks.yaml`` (token-id requests drawn from seeds no agent sees); the
same job on the installed vLLM as it is, with the task's clean deployment, is the reference
(`rsi_env.tasks.vllm_bugfix.runs.clean_run`, remembered per vLLM version). The checks:

- ``engine serves the job``: the engine starts with the workspace's ``engine_args.yaml`` (no refusal, no
  out-of-memory, no exception) and every request of every phase gets all its tokens, within the phase's
  step and time budget (a stalled engine is stopped, not waited for);
- ``engine configuration``: the configuration the engine resolved (token budget, batch size, chunked
  prefill and its threshold, block size and count, prefix caching, dtype, ...) equals the clean one;
- ``greedy tokens``: every request's greedy output tokens equal the clean engine's;
- ``prefix cache``: vLLM's own prefix-cache counters (queried and hit tokens) equal the clean engine's in
  every phase;
- ``preemptions``: vLLM's preemption counter equals the clean engine's in every phase;
- ``KV blocks free``: once every request finished, vLLM's block pool holds as many free blocks as the
  clean engine's;
- ``throughput``: on the throughput phase, the engine takes the clean engine's number of steps (as it
  reports them) and makes at least `THROUGHPUT_FLOOR` of its output tokens per engine-second, the
  engine-seconds being the supervisor's own measurement of each repetition (its fastest one,
  `rsi_env.tasks.vllm_bugfix.runs.phase_seconds`; CPU seconds on a CPU build, wall on an accelerator).
  A shortfall is measured again, up to `THROUGHPUT_RETAKES` times, each a fresh clean run beside another
  run of the workspace, in alternating order; it passes if any run of the workspace clears the bar against
  a clean run measured beside it. A co-tenant moves a run's CPU time by ~10 % on a quiet shared host, and
  by up to ~40 % where it takes the other hyperthread of a two-core host (0.63x and 0.70x seen for a
  reference fix in CI, under pytest's second worker); a fix slower in earnest stays slower in every pair.
  A schedule that differs, a best ratio under `RETAKE_FLOOR` (no host's noise goes that far), or a verdict that
  fails another check is not measured again.

What is believed: a report comes back only under the supervisor's HMAC (`rsi_env.tasks.vllm_bugfix.runs.read_report`,
refused otherwise), and its ``measured`` times are taken by the supervisor from outside the engine's
process tree (`rsi_env.tasks.vllm_bugfix.supervisor`), so neither the agent's patched clocks nor a
rewritten report move them. Everything else in it (tokens, steps, counters, the configuration, the KV
blocks free) is what the engine's process, which ran the agent's code, told the supervisor: nothing of
it is believed on its own, each number must equal the clean engine's on requests the agent never saw,
and the reasons name what differs, never the clean values. Not covered: a bug that costs nothing in the
engine's process tree (e.g. a stall the engine waits out asleep) slows wall time only, which a CPU build
does not judge.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import yaml

from rsi_env.engine.workload import Workload
from rsi_env.errors import RsiEnvError
from rsi_env.sandbox.hidden import CODE_DIR, CheckResult
from rsi_env.tasks.vllm_bugfix.runs import (
    ENGINE_ARGS,
    TIMEOUT_S,
    EngineRun,
    clean_run,
    job_for,
    phase_seconds,
    run_engine,
)

__all__ = ["CHECK_NAMES", "CHECKS_FILE", "CLEAN_DEPLOYMENT", "RETAKE_FLOOR", "THROUGHPUT_FLOOR", "THROUGHPUT_RETAKES",
           "check_workspace", "clean_deployment", "hidden_job", "judge", "served", "throughput_ratio"]

CHECKS_FILE = CODE_DIR / "vllm_bugfix" / "hidden" / "checks.yaml"
CLEAN_DEPLOYMENT = CODE_DIR / "vllm_bugfix" / "engine_args.yaml"
CHECK_NAMES = ("engine serves the job", "engine configuration", "greedy tokens", "prefix cache", "preemptions",
               "KV blocks free", "throughput")
THROUGHPUT_FLOOR = 0.95
THROUGHPUT_RETAKES = 3  # fresh pairs (a clean run, the workspace again) measured for a shortfall, at most
RETAKE_FLOOR = 0.5  # a best ratio below it is no host's noise (the worst seen: ~0.56, at a load of 10-12)
_VERDICTS: OrderedDict[str, tuple[CheckResult, ...]] = OrderedDict()


@cache
def _spec() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CHECKS_FILE.read_text())
    return data


def clean_deployment() -> str:
    """The deployment's ``engine_args.yaml`` as the task ships it: the reference every instance is judged against."""
    return CLEAN_DEPLOYMENT.read_text()


@cache
def _hidden_job_text() -> str:
    s = _spec()
    ws = [Workload.from_dict(p["workload"]) for p in s["phases"]]
    return json.dumps(job_for(ws, {p["workload"]["name"]: int(p.get("reps", 1)) for p in s["phases"]}))


def hidden_job() -> dict[str, Any]:
    """The hidden checks' job for the harness (its prompts drawn from the spec's seeds)."""
    job: dict[str, Any] = json.loads(_hidden_job_text())
    return job


def served(run: EngineRun) -> str | None:
    """Why the run did not serve its whole job (an error, a stall, a request short of tokens), or None."""
    if run.error is not None:
        return run.error
    out = run.out
    err = out.get("error")
    if isinstance(err, dict):
        return (f"the engine failed during {err.get('stage')}: {err.get('type')}: {str(err.get('message'))[:600]}\n"
                f"{str(err.get('traceback', ''))[-1500:]}")
    if err is not None:
        return "the engine's report names an error it does not describe"
    return None


def _phase_problems(out: Mapping[str, Any], job: Mapping[str, Any]) -> list[str]:
    """What each phase left undone: a stall, a repetition missing, a request short of its tokens."""
    raw = out.get("phases")
    phases: dict[str, Any] = raw if isinstance(raw, dict) else {}
    bad = []
    for ph in job["phases"]:
        reps = phases.get(ph["name"])
        if not isinstance(reps, list) or len(reps) != len(ph["reps"]):
            bad.append(f"{ph['name']}: not served")
            continue
        for k, (rep, want) in enumerate(zip(reps, ph["reps"], strict=True)):
            if not isinstance(rep, dict):
                bad.append(f"{ph['name']}[{k}]: unreadable")
            elif rep.get("stalled"):
                bad.append(f"{ph['name']}[{k}]: stalled: {str(rep['stalled'])[:200]}")
            else:
                toks = rep.get("tokens")
                short = (sum(1 for t, (_, m) in zip(toks, want, strict=True) if not isinstance(t, list) or len(t) != m)
                         if isinstance(toks, list) and len(toks) == len(want) else len(want))
                if short:
                    bad.append(f"{ph['name']}[{k}]: {short} of {len(want)} requests did not get all their tokens")
    return bad


def _per_rep(out: Mapping[str, Any], key: str) -> dict[str, list[Any]]:
    phases = out.get("phases")
    if not isinstance(phases, dict):
        return {}
    return {name: [r.get(key) if isinstance(r, dict) else None for r in reps] for name, reps in phases.items()
            if isinstance(reps, list)}


def _differing(got: Mapping[str, Any], clean: Mapping[str, Any], key: str) -> list[str]:
    g, c = _per_rep(got, key), _per_rep(clean, key)
    return [f"{name}[{k}]" for name, reps in c.items() for k, v in enumerate(reps)
            if k >= len(g.get(name, [])) or g[name][k] != v]


def throughput_ratio(got: Mapping[str, Any], clean: Mapping[str, Any]) -> float | None:
    """The throughput phase's output tokens per engine-second, the workspace's over the clean engine's (the
    supervisor's times of their repetitions, `phase_seconds`; the clean run's device decides what an
    engine-second is); None where it cannot be read."""
    name = _spec()["throughput_phase"]
    try:
        device = clean.get("device")
        best = [phase_seconds(run["measured"][name], device) for run in (got, clean)]
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):  # a report the agent's code wrote
        return None
    if not all(isinstance(b, float) and b > 0 for b in best):
        return None
    return best[1] / best[0]  # equal tokens on both sides: the rate's ratio is the time's inverse ratio


def judge(got: EngineRun, clean: Mapping[str, Any], job: Mapping[str, Any],
          retakes: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]] = ()) -> list[CheckResult]:
    """The checks on ``got`` against the clean engine's report on the same job (see the module docstring);
    ``retakes`` are the throughput's further measurements, each a fresh clean run and the workspace's run
    beside it (None where that run did not serve the job)."""
    why = served(got)
    problems = [] if why is not None else _phase_problems(got.out, job)
    if why is not None or problems:
        reason = why if why is not None else "; ".join(problems)[:1500]
        return [CheckResult(n, False, reason if n == CHECK_NAMES[0] else "not judged: the engine did not serve "
                            "the job") for n in CHECK_NAMES]
    out = got.out
    res = [CheckResult(CHECK_NAMES[0], True)]
    resolved, want = out.get("resolved"), clean["resolved"]
    differ = sorted(k for k in want if not isinstance(resolved, dict) or resolved.get(k) != want[k])
    res.append(CheckResult("engine configuration", not differ,
                           f"the engine resolved {differ} differently from the clean deployment" if differ else ""))
    tokens = _differing(out, clean, "tokens")
    res.append(CheckResult("greedy tokens", not tokens,
                           f"greedy tokens differ from the clean engine's in {tokens}" if tokens else ""))
    prefix = sorted(set(_differing(out, clean, "prefix_hits") + _differing(out, clean, "prefix_queries")))
    res.append(CheckResult("prefix cache", not prefix,
                           f"prefix-cache queries or hits differ from the clean engine's in {prefix}" if prefix else ""))
    pre = _differing(out, clean, "preemptions")
    res.append(CheckResult("preemptions", not pre, f"preemptions differ from the clean engine's in {pre}" if pre else ""))
    free_ok = out.get("free_blocks") == clean.get("free_blocks") and out.get("num_blocks") == clean.get("num_blocks")
    res.append(CheckResult("KV blocks free", free_ok, "" if free_ok else
                           f"{out.get('free_blocks')} of {out.get('num_blocks')} KV blocks free once every request "
                           "finished: not what the clean engine leaves"))
    res.append(_throughput(out, clean, retakes))
    return res


def _ratios(out: Mapping[str, Any], clean: Mapping[str, Any],
            retakes: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]]) -> list[float]:
    """The throughput ratio of each pair that can be read: the first run against the clean run remembered, each
    retake's workspace run against the clean run measured beside it."""
    pairs = [(out, clean)] + [(again, fresh) for fresh, again in retakes if again is not None]
    return [x for r, c in pairs if (x := throughput_ratio(r, c)) is not None]


def _throughput(out: Mapping[str, Any], clean: Mapping[str, Any],
                retakes: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]]) -> CheckResult:
    name = _spec()["throughput_phase"]
    runs = [out] + [again for _, again in retakes if again is not None]
    if any(any(s.startswith(f"{name}[") for s in _differing(r, clean, "steps")) for r in runs):
        return CheckResult("throughput", False, f"{name} took a different number of engine steps from the clean "
                                                "engine's (a different schedule)")
    ratios = _ratios(out, clean, retakes)
    if not ratios:
        return CheckResult("throughput", False, "the throughput phase's engine time cannot be read")
    best = max(ratios)
    return CheckResult("throughput", best >= THROUGHPUT_FLOOR, "" if best >= THROUGHPUT_FLOOR else
                       f"{best:.2f}x the clean engine's output tokens per engine-second (the bar: "
                       f"{THROUGHPUT_FLOOR:.2f}x)")


def check_workspace(files: Mapping[str, str], shadowed: Sequence[str], backend: str = "bubblewrap",
                    fresh: bool = False, timeout_s: float = TIMEOUT_S) -> list[CheckResult]:
    """The hidden checks on the workspace's ``engine_args.yaml`` and its copies of ``shadowed``.

    A verdict on exact file texts is remembered for the process; ``fresh`` judges anew whatever was
    remembered (a submission is judged from a clean start). `RsiEnvError` where the clean engine itself
    cannot serve the job on this machine.
    """
    job = hidden_job()
    sent = {f: files.get(f) for f in (ENGINE_ARGS, *sorted(shadowed))}
    key = hashlib.sha256(json.dumps([sent, backend], sort_keys=True).encode()).hexdigest()
    if not fresh and key in _VERDICTS:
        return list(_VERDICTS[key])
    clean = _clean(job, backend, fresh=False)
    got = run_engine(files, job, tuple(shadowed), backend, timeout_s)
    verdict = judge(got, clean, job)
    retakes: list[tuple[dict[str, Any], Mapping[str, Any] | None]] = []
    while (_short_of_time(verdict) and len(retakes) < THROUGHPUT_RETAKES  # the host's load moves CPU time
           and max(_ratios(got.out, clean, retakes), default=0.0) >= RETAKE_FLOOR):
        if len(retakes) % 2 == 0:
            fresh_clean = _clean(job, backend, fresh=True)
            again = run_engine(files, job, tuple(shadowed), backend, timeout_s)
        else:
            again = run_engine(files, job, tuple(shadowed), backend, timeout_s)
            fresh_clean = _clean(job, backend, fresh=True)
        retakes.append((fresh_clean, again.out if served(again) is None else None))
        verdict = judge(got, clean, job, retakes)
    if not got.timed_out:  # a timeout says as much about the machine's load as about the text: not remembered
        _VERDICTS[key] = tuple(verdict)
        if len(_VERDICTS) > 128:
            _VERDICTS.popitem(last=False)
    return verdict


def _short_of_time(verdict: Sequence[CheckResult]) -> bool:
    """Whether the throughput's time alone failed the verdict: every other check passed, the schedule was the clean
    one, and the engine-seconds fell short (what a co-tenant's load can do, and a retake can undo; a verdict that
    fails another check fails whatever a retake measures)."""
    return all(c.ok for c in verdict[:-1]) and not verdict[-1].ok and not verdict[-1].reason.endswith("schedule)")


def _clean(job: Mapping[str, Any], backend: str, fresh: bool) -> dict[str, Any]:
    """The clean engine's report on ``job`` (remembered on disk, or run anew where ``fresh``)."""
    run = run_engine({ENGINE_ARGS: clean_deployment()}, job, (), backend, trusted=True) if fresh else \
        clean_run(job, clean_deployment(), backend)
    why = served(run)
    if why is not None:
        raise RsiEnvError(f"the clean vLLM cannot serve the hidden checks' job on this machine: {why[:800]}")
    return run.out
