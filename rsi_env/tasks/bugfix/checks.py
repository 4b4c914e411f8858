"""Running a BugFix workspace's engine code in a fresh sandbox, and judging what it did against the clean engine.

The workspace's code runs only inside a new sandbox (`rsi_env.sandbox.fresh.run_fresh`), through
`rsi_env.tasks.bugfix.harness`, which reports observations (pool states, resolved configurations, each
request's timings). Verdicts are made here, in the env's process, by comparing those observations
with the same job run on the clean modules (`rsi_env.tasks.bugfix.templates.clean_modules`) — so code in
the sandbox cannot pass a check by saying so; it has to behave like the clean engine. The hidden checks
(``catalog/code/bugfix/hidden/checks.yaml``) are:

- ``workspace runs``: the three modules load and the job finishes within its time limit;
- ``block pool``: random, valid sequences of block-pool operations leave the workspace's pool in
  exactly the clean pool's state after every operation;
- ``config resolution``: every configuration resolves to the clean values (or is refused on the same flag);
- ``no KV block leaked``: once every request finished, no block is owned or referenced and every
  block is free or evictable;
- ``no request lost``: every request finishes with all of its output tokens;
- ``scheduler matches vLLM``: every request's first-token and finish times equal the clean engine's.

Everything the harness reports was written by a process that ran the agent's code, which can rewrite any
of it. So every check, and every number the reward reads, is tied to the clean engine's own run here:
a final pool counts as clean only if it shows no leak and, where the requests were served exactly as
the clean engine serves them, it is the clean engine's final pool; a bench's telemetry is the clean
engine's where the workload was served exactly so (`BenchResult.trusted`), and is otherwise the
report, its output rate held below the throughput floor. Forging a pass thus needs the clean
behaviour itself. The sandboxes show the package only as `rsi_env.tasks.bugfix.templates.engine_runtime`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rsi_env.engine import profile as step_profile
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.sandbox.base import Limits
from rsi_env.sandbox.fresh import run_fresh
from rsi_env.sandbox.hidden import CODE_DIR, CheckResult
from rsi_env.sandbox.profile import Profile
from rsi_env.tasks.bugfix import harness
from rsi_env.tasks.bugfix.kv_cache import BlockPool
from rsi_env.tasks.bugfix.templates import ENGINE_FILES, clean_modules, engine_runtime

__all__ = ["CHECK_NAMES", "CHECKS_FILE", "THROUGHPUT_FLOOR", "UNVERIFIED_RATE", "BenchResult", "CheckResult",
           "WorkspaceRun", "bench", "check_workspace", "harness_profile", "hidden_job", "pool_ops", "reference",
           "run_workspace", "workspace_profile"]

CHECKS_FILE = CODE_DIR / "bugfix" / "hidden" / "checks.yaml"
HARNESS = Path(harness.__file__)
TIMEOUT_S = 20.0
_LIMITS = Limits(cpu_s=60, memory_bytes=4 << 30, max_procs=64)
CHECK_NAMES = ("workspace runs", "block pool", "config resolution", "no KV block leaked", "no request lost",
               "scheduler matches vLLM")
_VERDICTS: OrderedDict[str, tuple[CheckResult, ...]] = OrderedDict()
THROUGHPUT_FLOOR = 0.98  # output tok/s a fix keeps, per workload, relative to the clean engine on the same config
# A workload not served exactly as the clean engine serves it counts at most this share of the clean
# engine's output rate: its rate is the engine's own report, so it must stay below the floor.
UNVERIFIED_RATE = 0.97


def harness_profile() -> Profile:
    """What the harness's sandbox shows: numpy, PyYAML and the engine runtime (the harness imports nothing else)."""
    return Profile(packages=("numpy", "PyYAML"), paths=(str(engine_runtime()),))


def workspace_profile() -> Profile:
    """What a sandbox over the workspace shows (the agent's shell, the visible tests): the harness's and pytest."""
    return Profile(packages=("numpy", "PyYAML", "pytest"), paths=(str(engine_runtime()),))


@dataclass(frozen=True)
class WorkspaceRun:
    """What the harness reported (``out``), or why it reported nothing (``error``)."""

    out: dict[str, Any]
    error: str | None = None
    timed_out: bool = False


def pool_ops(seed: int, sequences: int, ops: int, num_blocks: int) -> list[list[list[Any]]]:
    """Random sequences of valid block-pool operations (chosen while driving the clean pool)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(sequences):
        pool = BlockPool(num_blocks)
        seq: list[list[Any]] = [["init", num_blocks]]
        while len(seq) <= ops:
            kind = int(rng.integers(7))
            shared = [c for c in range(4) if pool.refs.get(c)]
            private = [c for c in range(100, 104) if c in pool.cached and c not in pool.refs]
            if kind == 0 and pool.num_free:
                op: list[Any] = ["take", int(rng.integers(1, min(pool.num_free, 9) + 1))]
            elif kind == 1 and pool.owned:
                op = ["release", int(rng.integers(1, min(pool.owned, 9) + 1))]
            elif kind == 2:
                op = ["acquire", int(rng.integers(4))]
            elif kind == 3 and shared and pool.owned:
                op = ["extend", int(rng.choice(shared)), int(rng.integers(1, min(pool.owned, 5) + 1))]
            elif kind == 4 and shared:
                op = ["unacquire", int(rng.choice(shared))]
            elif kind == 5 and private:
                op = ["claim", int(rng.choice(private))]
            elif kind == 6 and pool.owned:
                op = ["park", int(rng.integers(100, 104)), int(rng.integers(1, min(pool.owned, 5) + 1))]
            else:
                continue
            getattr(pool, op[0])(*op[1:])
            seq.append(op)
        out.append(seq)
    return out


@cache
def _spec() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CHECKS_FILE.read_text())
    return data


def hidden_job(model: str, hardware: str) -> dict[str, Any]:
    """The hidden checks' job: its pool sequences, configurations and runs (on ``model``/``hardware``)."""
    s = _spec()
    ver = str(s["engine_version"])
    runs = [{"name": r["name"], "config": r["config"], "model": model, "hardware": hardware, "engine_version": ver,
             "workload": Workload.from_dict(r["workload"]).to_dict()} for r in s["runs"]]
    resolve = [{"engine_version": ver, **c} for c in s["resolve"]]
    return {"pkg_root": str(engine_runtime()), "pool_ops": pool_ops(**s["pool_ops"]), "resolve": resolve,
            "runs": runs}


def _plain(x: Any) -> Any:
    return json.loads(json.dumps(x))


_REFERENCE: OrderedDict[str, dict[str, Any]] = OrderedDict()


def reference(job: Mapping[str, Any]) -> dict[str, Any]:
    """The job run on the clean modules (`clean_modules`), here (trusted), as plain JSON data; remembered."""
    key = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()
    if key not in _REFERENCE:
        _REFERENCE[key] = _plain(harness.run_job(dict(job), *clean_modules()))
        if len(_REFERENCE) > 64:
            _REFERENCE.popitem(last=False)
    return _REFERENCE[key]


def run_workspace(files: Mapping[str, str], job: Mapping[str, Any], backend: str,
                  timeout_s: float | None = None) -> WorkspaceRun:
    """Run ``job`` on the workspace's engine modules in a fresh sandbox; never raises for what they do."""
    timeout_s = TIMEOUT_S if timeout_s is None else timeout_s
    missing = [f for f in ENGINE_FILES if f not in files]
    if missing:
        return WorkspaceRun({}, f"{missing} missing from the workspace (write them again with an edit, old='')")
    sent = {f: files[f] for f in ENGINE_FILES} | {"harness.py": HARNESS.read_text(), "job.json": json.dumps(job)}
    run = run_fresh(sent, "{python} -I harness.py job.json out.json", backend=backend, timeout_s=timeout_s,
                    max_output=4096, read=["out.json"], limits=_LIMITS, profile=harness_profile())
    res, raw = run.result, run.outputs.get("out.json")
    if res.timed_out:
        return WorkspaceRun({}, f"the engine did not finish {run.timeout_text()} (an endless loop?)", True)
    if raw is None:
        return WorkspaceRun({}, f"the engine produced no report ({res.summary().strip()[-600:]})")
    try:
        out = json.loads(raw)
    except ValueError:
        return WorkspaceRun({}, "the engine's report is not JSON (did the workspace write over it?)")
    if not isinstance(out, dict):
        return WorkspaceRun({}, "the engine's report is not a mapping")
    if "load_error" in out:
        err = out["load_error"]
        tb = err.get("traceback", "") if isinstance(err, dict) else ""
        return WorkspaceRun({}, f"the workspace's engine does not load:\n{str(tb)[-1200:]}")
    return WorkspaceRun(out)


def _same_times(a: Any, b: Any) -> bool:
    if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if not isinstance(x, (int, float)) or isinstance(x, bool):
            return False
        if math.isnan(y):
            if not math.isnan(x):
                return False
        elif not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9):
            return False
    return True


def _served_as_clean(got: Mapping[str, Any], clean: Mapping[str, Any]) -> bool:
    """Whether a run's every request got its first token and finished exactly when the clean engine's did."""
    return _same_times(got.get("first"), clean.get("first")) and _same_times(got.get("finish"), clean.get("finish"))


def _leak(pool: Any) -> str | None:
    """Why the pool state (after every request finished) is not clean, or None."""
    try:
        lru = sum(n for c, n in pool["cached"] if c in pool["lru"])
        if pool["owned"] or pool["refs"]:
            return f"{pool['owned']} blocks still owned, {len(pool['refs'])} chains still referenced"
        if pool["free_plain"] + pool["evictable"] != pool["num_blocks"] or lru != pool["evictable"]:
            return (f"free {pool['free_plain']} + evictable {pool['evictable']} != {pool['num_blocks']} blocks "
                    f"(cached in LRU: {lru})")
    except (KeyError, TypeError, ValueError):
        return "the pool's state could not be read"
    return None


def _judge(got: WorkspaceRun, ref: dict[str, Any], job: Mapping[str, Any]) -> tuple[CheckResult, ...]:
    if got.error is not None:
        return tuple(CheckResult(n, False, got.error if n == "workspace runs" else "not run")
                     for n in CHECK_NAMES)
    out = got.out
    crashed = [f"{r['name']}: {o.get('error')}" for r, o in zip(job["runs"], out.get("runs", []), strict=False)
               if isinstance(o, dict) and "error" in o]
    complete = all(len(out.get(k, [])) == len(job[k]) for k in ("pool_ops", "resolve", "runs"))
    res = [CheckResult("workspace runs", complete and not crashed,
                       "; ".join(crashed) if crashed else "" if complete else "the report is incomplete")]
    bad = [k for k, (a, b) in enumerate(zip(out.get("pool_ops", []), ref["pool_ops"], strict=False)) if a != b]
    bad += list(range(len(out.get("pool_ops", [])), len(ref["pool_ops"])))
    res.append(CheckResult("block pool", not bad, f"{len(bad)} of {len(ref['pool_ops'])} operation sequences "
                                                   "end in a different pool state" if bad else ""))
    bad = [c for c, a, b in zip(job["resolve"], out.get("resolve", []), ref["resolve"], strict=False) if a != b]
    bad += job["resolve"][len(out.get("resolve", [])):]
    res.append(CheckResult("config resolution", not bad, f"{len(bad)} configurations resolve differently"
                           if bad else ""))
    leaks, lost, differ = [], [], []
    runs = out.get("runs", [])
    for k, (r, b) in enumerate(zip(job["runs"], ref["runs"], strict=True)):
        o = runs[k] if k < len(runs) and isinstance(runs[k], dict) else {"error": "not reported"}
        name = r["name"]
        if "error" in o or "first" not in o:
            lost.append(f"{name}: the engine failed")
            differ.append(name)
            continue
        served_clean = _served_as_clean(o, b)
        if (why := _leak(o.get("pool"))) is not None:
            leaks.append(f"{name}: {why}")
        elif served_clean and o.get("pool") != b.get("pool"):
            leaks.append(f"{name}: the pool ends unlike the clean engine's after serving the same requests the same way")
        n_lost = o.get("unfinished")
        if not isinstance(n_lost, int) or n_lost:
            lost.append(f"{name}: {n_lost} requests never finished")
        if not served_clean:
            differ.append(name)
    res.append(CheckResult("no KV block leaked", not leaks, "; ".join(leaks)))
    res.append(CheckResult("no request lost", not lost, "; ".join(lost)))
    res.append(CheckResult("scheduler matches vLLM", not differ,
                           f"request timings differ from vLLM's scheduler on {len(differ)} workloads" if differ else ""))
    return tuple(res)


def check_workspace(files: Mapping[str, str], backend: str, model: str = "qwen2.5-7b",
                    hardware: str = "l4", fresh: bool = False) -> list[CheckResult]:
    """The hidden checks on a workspace; the verdict on exact file texts is remembered for the process.

    ``fresh`` runs them anew whatever was remembered (a submission is judged from a clean start: the
    agent's code may not behave the same twice).
    """
    job = hidden_job(model, hardware)
    key = hashlib.sha256(json.dumps([{f: files.get(f) for f in ENGINE_FILES}, backend, job],
                                    sort_keys=True).encode()).hexdigest()
    if not fresh and key in _VERDICTS:
        return list(_VERDICTS[key])
    got = run_workspace(files, job, backend)
    verdict = _judge(got, reference(job), job)
    if not got.timed_out:  # a timeout says as much about the machine's load as about the text: not remembered
        _VERDICTS[key] = verdict
        if len(_VERDICTS) > 256:
            _VERDICTS.popitem(last=False)
    return list(verdict)


@dataclass(frozen=True)
class BenchResult:
    """A bench of the workspace: telemetry per workload and the symptoms an engineer would see.

    ``telemetry`` is what the harness reported (validated, not believed); ``clean`` the clean engine's on
    the same job, run here; ``verified`` whether each workload's requests were served exactly as the
    clean engine serves them.
    """

    telemetry: list[Telemetry]
    symptoms: list[str]
    clean: list[Telemetry] = field(default_factory=list)
    verified: list[bool] = field(default_factory=list)
    timed_out: bool = False  # the run was stopped: its verdict says as much about the step as about the text

    def trusted(self) -> list[Telemetry]:
        """Per workload, what the reward may read: the clean engine's telemetry where verified, else the report
        with its output rate at most `UNVERIFIED_RATE` of the clean engine's (a report's rate is the agent's word)."""
        out = []
        for t, c, ok in zip(self.telemetry, self.clean, self.verified, strict=True):
            if ok:
                t = c
            elif t.ok and c.ok:
                t = replace(t, out_tok_per_s=min(t.out_tok_per_s, UNVERIFIED_RATE * c.out_tok_per_s))
            out.append(t)
        return out


_NUMERIC = {f.name for f in fields(Telemetry)} - {"error", "tier", "calibration", "profile"}


def _telemetry(raw: Any) -> Telemetry:
    """Telemetry from the sandbox, validated: finite numbers, an error that is text or None."""
    if not isinstance(raw, dict):
        return Telemetry.failed("crash: the engine reported no telemetry")
    vals: dict[str, Any] = {}
    for k in _NUMERIC:
        v = raw.get(k, 0.0)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            return Telemetry.failed(f"crash: the engine reported {k}={v!r}")
        vals[k] = int(v) if k in ("num_preemptions", "num_gpu_blocks") else float(v)
    try:
        profile = step_profile.Profile.from_dict(raw.get("profile"))
    except (TypeError, ValueError) as exc:
        return Telemetry.failed(f"crash: the engine reported a profile that is not one: {exc}"[:300])
    err = raw.get("error")
    return Telemetry(**vals, error=None if err is None else str(err)[:300], tier="sim", profile=profile,
                     calibration=None if raw.get("calibration") is None else str(raw.get("calibration"))[:80])


def bench(files: Mapping[str, str], cfg: EngineConfig, model: str, hardware: str, workloads: Sequence[Workload],
          backend: str, engine_version: str = "0.26") -> BenchResult:
    """Measure the workspace's engine on ``workloads`` in a fresh sandbox, beside the clean engine here."""
    job = {"pkg_root": str(engine_runtime()), "runs": [
        {"name": w.name, "config": cfg.to_dict(only_set=True), "model": model, "hardware": hardware,
         "engine_version": engine_version, "workload": w.to_dict()} for w in workloads]}
    ref = reference(job)["runs"]
    clean = [Telemetry.from_dict(r["telemetry"]) if "telemetry" in r else Telemetry.failed("the clean engine refused")
             for r in ref]
    got = run_workspace(files, job, backend)
    if got.error is not None:
        head = got.error.splitlines()[0]
        return BenchResult([Telemetry.failed(f"crash: {head}") for _ in workloads], [got.error], clean,
                           [False] * len(workloads), got.timed_out)
    tels, symptoms, verified = [], [], []
    runs = got.out.get("runs", [])
    for k, w in enumerate(workloads):
        o = runs[k] if k < len(runs) and isinstance(runs[k], dict) else {"error": "not reported"}
        verified.append("telemetry" in o and o.get("resolved") == ref[k].get("resolved") and _served_as_clean(o, ref[k]))
        if "refused" in o:
            tels.append(Telemetry.failed(f"invalid_config: refused by config.py on {o['refused']}"))
        elif "error" in o:
            tels.append(Telemetry.failed(f"crash: {o['error']}"))
            symptoms.append(f"{w.name}: {str(o.get('traceback', ''))[-900:]}")
        else:
            tels.append(_telemetry(o.get("telemetry")))
            if (why := _leak(o.get("pool"))) is not None and tels[-1].ok:
                symptoms.append(f"{w.name}: KV cache after every request finished: {why}")
            if isinstance(o.get("unfinished"), int) and o["unfinished"]:
                symptoms.append(f"{w.name}: {o['unfinished']} requests never finished")
    return BenchResult(tels, symptoms, clean, verified)
