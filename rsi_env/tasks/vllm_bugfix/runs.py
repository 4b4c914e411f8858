"""Running a VLLMBugFix workspace's engine: the job the harness serves, a fresh sandbox, the clean engine's run.

`job_for` turns workloads into the harness's job (`rsi_env.tasks.vllm_bugfix.harness`: exact token ids,
one phase per workload). `run_engine` runs it in a new sandbox over the given files, the installed vLLM
shown with the workspace's copies of ``shadowed`` modules in place of its own
(`rsi_env.tasks.vllm_bugfix.modules.shadow_profile`): the trusted supervisor
(`rsi_env.tasks.vllm_bugfix.supervisor`) starts the harness as the engine's process, serves the job one
repetition at a time and times each from outside it; its report is believed only under the run's
HMAC (`rsi_env.sandbox.signed.signed_body`). A report's ``measured`` (the supervisor's CPU and wall
seconds per repetition) is the only engine time `engine_seconds` and `phase_seconds` read; the rest is
the harness's word. `clean_run` is the same job on the installed vLLM as it is (the harness and vLLM's
own modules, nothing of the agent's), through the same supervisor, remembered on disk per vLLM version,
harness files (`harness_text`), job and deployment, under ``RSI_ENV_CACHE_DIR`` (default
``~/.cache/rsi-env``), outside every workspace and every sandbox.

Like the real tier's measurements, runs are not serialised here: callers that share a machine wrap their
process in ``flock /tmp/rsi-vllm.lock`` (the tests do).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rsi_env.engine.model import load_model
from rsi_env.engine.workload import Workload
from rsi_env.sandbox import isolation
from rsi_env.sandbox.base import Limits
from rsi_env.sandbox.deadline import untimed
from rsi_env.sandbox.fresh import run_fresh
from rsi_env.sandbox.signed import signed_body
from rsi_env.tasks.vllm_bugfix import harness
from rsi_env.tasks.vllm_bugfix.modules import installed_version, shadow_profile

__all__ = ["DRIVER", "ENGINE_ARGS", "HARNESS", "MODEL", "SUPERVISOR", "EngineRun", "cache_dir", "clean_run",
           "engine_seconds", "harness_text", "job_for", "phase_seconds", "read_report", "run_engine"]

HARNESS = Path(harness.__file__)
DRIVER = "run_engine.py"  # the harness's name in a workspace and in every sandbox that runs it
SUPERVISOR = HARNESS.with_name("supervisor.py")
# What the sandbox of a run holds besides the workspace's files: the supervisor, what it imports, the harness.
_SHIPPED = {"supervisor.py": SUPERVISOR, "isolation.py": Path(isolation.__file__), DRIVER: HARNESS}
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


def harness_text() -> str:
    """The text of every file a run ships besides the workspace's (what a cached report depends on)."""
    return "\0".join(f"{name}\0{path.read_text()}" for name, path in sorted(_SHIPPED.items()))


def engine_seconds(measured: Mapping[str, Any], device: str | None) -> float:
    """A repetition's engine time as the supervisor measured it: CPU seconds on a CPU build (one engine thread;
    what co-tenants of a shared host do not move), wall seconds on an accelerator (whose work is not CPU time)."""
    return float(measured["cpu_s"] if device == "cpu" else measured["wall_s"])


def phase_seconds(measured: Sequence[Mapping[str, Any]], device: str | None) -> float:
    """A phase's engine time: its fastest repetition's `engine_seconds` (noise on a shared host only adds time).

    ``measured`` is the report's ``measured[phase]``, the supervisor's own times, never the harness's.
    """
    return min(engine_seconds(m, device) for m in measured)


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
    secret = secrets.token_hex(32)
    sent |= {name: path.read_text() for name, path in _SHIPPED.items()}
    sent["job.json"] = json.dumps({**job, "secret": secret})
    with untimed() if trusted else contextlib.nullcontext():
        run = run_fresh(sent, "exec {python} -I supervisor.py job.json out.json", backend=backend, timeout_s=timeout_s,
                        max_output=8192, read=["out.json"], limits=LIMITS, profile=shadow_profile(shadowed))
    res = run.result
    log = run.anonymous(res.output)[-4000:]
    if res.timed_out:
        return EngineRun(error=f"the engine did not finish {run.timeout_text()}", timed_out=True, log=log)
    return read_report(run.outputs.get("out.json"), secret, log, res.error or f"exit {res.returncode}")


def read_report(raw: bytes | None, secret: str, log: str = "", why: str = "") -> EngineRun:
    """The supervisor's report ``raw`` as an `EngineRun`, believed only under its HMAC with ``secret``."""
    if raw is None:
        return EngineRun(error=f"the engine left no report ({why}); its log ends:\n{log[-1500:]}", log=log)
    try:
        outer = json.loads(raw)
    except ValueError:
        outer = None
    body = signed_body(outer, secret)
    if body is None:
        return EngineRun(error="the engine's report does not carry the supervisor's signature: something other "
                               "than the supervisor wrote it (the engine's process must leave its files alone)", log=log)
    return EngineRun(body, log=log)


def cache_dir() -> Path:
    """Where clean runs are kept: ``$RSI_ENV_CACHE_DIR/vllm_bugfix/<vLLM version>`` (default ``~/.cache/rsi-env``)."""
    root = Path(os.environ.get("RSI_ENV_CACHE_DIR") or Path.home() / ".cache" / "rsi-env")
    return root / "vllm_bugfix" / installed_version()


def clean_run(job: Mapping[str, Any], engine_args: str, backend: str = "bubblewrap") -> EngineRun:
    """``job`` on the installed vLLM as it is, with the deployment ``engine_args``; remembered on disk.

    A run that failed is not remembered (the clean engine failing is the machine's problem, not the job's).
    """
    key = hashlib.sha256(json.dumps([installed_version(), harness_text(), job, engine_args],
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
