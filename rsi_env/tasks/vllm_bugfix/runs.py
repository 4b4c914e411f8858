"""Running a VLLMBugFix workspace's engine: the job the harness serves, a fresh sandbox, the clean engine's run.

`job_for` turns workloads into the harness's job (`rsi_env.tasks.vllm_bugfix.harness`: exact token ids,
one phase per workload). `run_engine` runs the harness in a new sandbox over the given files, the
installed vLLM shown with the workspace's copies of ``shadowed`` modules in place of its own
(`rsi_env.tasks.vllm_bugfix.modules.shadow_profile`), and reads its JSON report back. `clean_run` is
the same job on the installed vLLM as it is (trusted: the harness and vLLM's own modules, nothing of the
agent's), remembered on disk per vLLM version, harness, job and deployment, under ``RSI_ENV_CACHE_DIR``
(default ``~/.cache/rsi-env``), outside every workspace and every sandbox.

Like the real tier's measurements, runs are not serialised here: callers that share a machine wrap their
process in ``flock /tmp/rsi-vllm.lock`` (the tests do).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rsi_env.engine.model import load_model
from rsi_env.engine.workload import Workload
from rsi_env.sandbox.base import Limits
from rsi_env.sandbox.deadline import untimed
from rsi_env.sandbox.fresh import run_fresh
from rsi_env.tasks.vllm_bugfix import harness
from rsi_env.tasks.vllm_bugfix.modules import installed_version, shadow_profile

__all__ = ["DRIVER", "ENGINE_ARGS", "HARNESS", "MODEL", "EngineRun", "cache_dir", "clean_run", "engine_seconds",
           "job_for", "phase_seconds", "run_engine"]

HARNESS = Path(harness.__file__)
DRIVER = "run_engine.py"  # the harness's name in a workspace and in every sandbox that runs it
ENGINE_ARGS = harness.ENGINE_ARGS
MODEL = "tiny-llama"
TIMEOUT_S = 300.0
# One engine thread's process: 4 GiB holds vLLM, torch and a small KV cache; more is a memory error.
LIMITS = Limits(cpu_s=900, memory_bytes=4 << 30, file_bytes=64 << 20, max_procs=256)
_STEP_SLACK = 64


@dataclass(frozen=True)
class EngineRun:
    """What the harness reported (``out``), or why it reported nothing (``error``); ``log`` is its output's tail."""

    out: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    timed_out: bool = False
    log: str = ""


@cache
def model_config() -> dict[str, Any]:
    """The tiny model's ``config.json`` (dummy weights: its architecture's speed, no checkpoint)."""
    return load_model(MODEL).to_hf_config()


def job_for(workloads: Sequence[Workload], reps: Mapping[str, int] | None = None,
            deadline_s: float = 150.0) -> dict[str, Any]:
    """The harness's job: one phase per workload, in order; ``reps[name]`` repetitions of it, each on its own prompts.

    Repetition ``k`` draws its prompts from the workload's seed + ``k``. A phase may take as many engine
    steps as it has prompt and output tokens (every step of a working engine makes progress), plus slack.
    """
    vocab = int(model_config()["vocab_size"])
    phases = []
    for w in workloads:
        rounds: list[list[list[Any]]] = []
        budget = 0
        for k in range(int((reps or {}).get(w.name, 1))):
            trace = Workload.from_dict({**w.to_dict(), "seed": w.seed + k}).trace()
            rounds.append([[trace.prompt_token_ids(i, vocab), int(trace.output_len[i])] for i in range(len(trace))])
            budget = max(budget, int(trace.prompt_len.sum() + trace.output_len.sum()) + _STEP_SLACK)
        phases.append({"name": w.name, "max_steps": budget, "deadline_s": deadline_s, "reps": rounds})
    return {"model_config": model_config(), "phases": phases}


def engine_seconds(rep: Mapping[str, Any], device: str | None) -> float:
    """A repetition's engine time: its CPU seconds on a CPU build (one engine thread; what co-tenants of a shared
    host do not move), its wall seconds on an accelerator (whose work is not this process's CPU time)."""
    return float(rep["cpu_s"] if device == "cpu" else rep["wall_s"])


def phase_seconds(reps: Sequence[Mapping[str, Any]], device: str | None) -> float:
    """A phase's engine time over its repetitions: where they took the same number of steps, the sum over step
    positions of the fastest repetition's time at that position (a co-tenant's burst slows some steps of some
    repetitions, rarely the same step of all); else the fastest repetition's `engine_seconds`."""
    key = "step_cpu" if device == "cpu" else "step_wall"
    per_step: list[list[Any]] = [r[key] for r in reps if isinstance(r.get(key), list) and r[key]]
    n = len(per_step[0]) if per_step else 0
    if per_step and len(per_step) == len(reps) and all(len(s) == n for s in per_step):
        return float(sum(min(float(s[k]) for s in per_step) for k in range(n)))
    return min(engine_seconds(r, device) for r in reps)


def run_engine(files: Mapping[str, str], job: Mapping[str, Any], shadowed: Sequence[str], backend: str = "bubblewrap",
               timeout_s: float = TIMEOUT_S, trusted: bool = False) -> EngineRun:
    """Run ``job`` on the engine of ``files`` (``engine_args.yaml`` and the copies of ``shadowed``) in a fresh sandbox.

    Never raises for what the engine does. The harness is the package's, whatever ``files`` hold under its name.
    A run of the agent's code gets at most what is left of the step's deadline (`rsi_env.sandbox.deadline`);
    a ``trusted`` one (the clean vLLM, nothing of the agent's) keeps its own timeout.
    """
    missing = [f for f in (ENGINE_ARGS, *shadowed) if f not in files]
    if missing:
        return EngineRun(error=f"{missing} missing from the workspace (write them again with an edit, old='')")
    sent = {f: files[f] for f in (ENGINE_ARGS, *shadowed)}
    sent |= {DRIVER: HARNESS.read_text(), "job.json": json.dumps(job)}
    with untimed() if trusted else contextlib.nullcontext():
        run = run_fresh(sent, f"{{python}} -s {DRIVER} job.json out.json > engine.log 2>&1; tail -c 4000 engine.log",
                        backend=backend, timeout_s=timeout_s, max_output=8192, read=["out.json"], limits=LIMITS,
                        profile=shadow_profile(shadowed))
    res, raw = run.result, run.outputs.get("out.json")
    log = run.anonymous(res.output)[-4000:]
    if res.timed_out:
        return EngineRun(error=f"the engine did not finish {run.timeout_text()}", timed_out=True, log=log)
    if raw is None:
        why = res.error or f"exit {res.returncode}"
        return EngineRun(error=f"the engine left no report ({why}); its log ends:\n{log[-1500:]}", log=log)
    try:
        out = json.loads(raw)
    except ValueError:
        return EngineRun(error="the engine's report is not JSON (did the workspace's code write over it?)", log=log)
    if not isinstance(out, dict):
        return EngineRun(error="the engine's report is not a mapping", log=log)
    return EngineRun(out, log=log)


def cache_dir() -> Path:
    """Where clean runs are kept: ``$RSI_ENV_CACHE_DIR/vllm_bugfix/<vLLM version>`` (default ``~/.cache/rsi-env``)."""
    root = Path(os.environ.get("RSI_ENV_CACHE_DIR") or Path.home() / ".cache" / "rsi-env")
    return root / "vllm_bugfix" / installed_version()


def clean_run(job: Mapping[str, Any], engine_args: str, backend: str = "bubblewrap") -> EngineRun:
    """``job`` on the installed vLLM as it is, with the deployment ``engine_args``; remembered on disk.

    A run that failed is not remembered (the clean engine failing is the machine's problem, not the job's).
    """
    key = hashlib.sha256(json.dumps([installed_version(), HARNESS.read_text(), job, engine_args],
                                    sort_keys=True).encode()).hexdigest()[:32]
    path = cache_dir() / f"clean-{key}.json"
    if path.is_file():
        return EngineRun(json.loads(path.read_text()))
    got = run_engine({ENGINE_ARGS: engine_args}, job, (), backend, trusted=True)
    if got.error is None and "error" not in got.out:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(got.out))
        tmp.replace(path)
    return got
