"""RSI/BugFix-v0.

Fix the bugs a seeded generator injected into the engine's own code — the KV block pool, the
scheduler loop, the config resolution — until hidden checks pass and throughput is back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.task import Task, load_task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.tier import Tier
from rsi_env.envs.core import Measurement, RsiEnv
from rsi_env.envs.observation import clean
from rsi_env.errors import RsiEnvError
from rsi_env.reward.guards import GuardResult
from rsi_env.sandbox.profile import Profile
from rsi_env.sandbox.workspace import EditError
from rsi_env.sim import simulate_detailed
from rsi_env.tasks.bugfix.checks import THROUGHPUT_FLOOR, check_workspace, workspace_profile
from rsi_env.tasks.bugfix.generator import WORKLOAD_DIR, Instance, instance_for
from rsi_env.tasks.bugfix.templates import ENGINE_FILES, clean_modules
from rsi_env.tasks.bugfix.tier import WorkspaceTier, files_hash

__all__ = ["BugFixEnv"]

CRASHED_BASE = 0.01  # a workload the bugged engine could not serve counts as 1 % of the clean engine's tok/s
_DROPPED_GUARDS = {"slo", "improvement"}  # a fix is judged against the clean engine, not vLLM's defaults


class BugFixEnv(RsiEnv):
    """Fix bugs injected into vLLM's engine code: the KV block pool, the scheduler, the config resolution.

    ## Description

    Qwen2.5-7B on a 24 GB L4 serves shared-prefix chat (``bugfix_chat``) and bursty retrieval-augmented
    prompts with long answers (``bugfix_rag``), 300 requests each. The workspace holds three modules of
    the simulated vLLM 0.26 engine — ``kv_cache.py`` (the paged block pool and prefix cache),
    ``engine.py`` (the scheduler loop: token budget, admission, preemption) and ``config.py`` (flag
    validation and default resolution) — copied from the engine the other tasks run, with one or two
    bugs injected by a seeded generator: KV blocks that leak, an off-by-one token budget, a wrong
    preemption order, a request that gets lost, a silent throughput collapse. Every instance is
    verified to fail at least one hidden check. ``tests/`` holds visible tests (``python -m pytest -q
    tests/`` in a shell), weaker than the hidden checks. A bench runs the workspace's engine on the
    workloads and shows its telemetry and symptoms (blocks left allocated, requests never finished,
    a traceback).

    The workspace's code runs only in fresh sandboxes (the strongest backend the machine has;
    ``env.unwrapped.sandbox_backend`` says which), never in the env's process; what comes back are
    observations, and the verdicts are made here by comparing them with the clean engine. Every
    sandbox — the shell's included (`sandbox_profile`) — sees the package only as a runtime in which
    the three engine modules are the workspace's own: the clean originals, the bug catalogue and the
    hidden checks are nowhere to be read.

    ## Arguments

    ``gym.make("RSI/BugFix-v0", tier="sim", model=None, hardware=None, workloads=None, max_steps=None,
    auto_bench=None, seed=None, engine_version="0.26", sandbox="auto", shell_timeout_s=10.0)``: the
    others are `RsiEnv`'s; ``seed`` (or ``reset(seed=...)``) picks the instance (the bugs) and offsets
    the workloads' seeds. ``auto_bench`` (on by default) measures after every change of ``serving.yaml``
    or an engine file.

    ## Action Space

    docs/architecture.md's ``Dict``: ``kind`` (0 flag, 1 edit, 2 shell, 3 bench, 4 submit), ``flag``/``value``
    (``max_num_seqs``, ``max_num_batched_tokens``), ``path``/``old``/``new`` (edit ``kv_cache.py``,
    ``engine.py``, ``config.py`` or ``serving.yaml``) and ``command`` (10 s, 16 KiB of output).

    ## Observation Space

    As every `RSI/*` env; rates and latencies are ratios to the bugged engine measured at reset, and
    ``text`` carries the bench's symptoms.

    ## Rewards

    Continuous: the log-ratio gain of output tokens/s over the best so far, the bugged engine scoring 0
    (a workload it could not serve counts as 1 % of the clean engine's rate), minus each measurement's
    simulated GPU-seconds x 0.0002. A workload whose requests are served exactly as the clean engine
    serves them (every first-token and finish time) counts the clean engine's rate; any other counts the
    rate the engine reported, at most 97 % of the clean engine's (the report is the agent's code's word).
    Binary, on submit, judged afresh on the editable files alone (a new bench and new hidden checks,
    nothing remembered): +1 if the workloads are untouched, every workload measured without error, each
    keeps >= 98 % of the clean engine's output tokens/s on the same configuration, and every hidden check
    passes — the block pool replays random operation sequences into the clean pool's states, every
    configuration resolves to the clean values, no KV block is left allocated (and where the requests
    were served as the clean engine serves them, the pool ends as the clean engine's does) and no request
    lost, and every request's first-token and finish times equal the clean engine's, on six workloads
    the agent never sees (preemption under KV pressure, the priority policy, shared prefixes, chunked
    prefill off, a long-prefill threshold, a closed loop).

    ## Starting State

    The instance of the seed (``env.unwrapped.instance``: its bugs, the checks they fail, its
    difficulty) in the workspace; vLLM 0.26's defaults in ``serving.yaml``; the bugged engine measured
    as the baseline.

    ## Episode End

    Terminates on submit; truncates after ``max_steps`` (40) steps. At most 30 measurements.

    ## Version History

    * v0: first release.
    """

    task_id = "RSI/BugFix-v0"
    sandboxed = True
    workload_dir = WORKLOAD_DIR
    verify_again = True  # a submission already measured is measured once more, from a clean start

    def __init__(self, task: Task | str | None = None, **kwargs: Any) -> None:
        base = task if isinstance(task, Task) else load_task(task or self.task_id)
        missing = [f for f in ENGINE_FILES if f not in base.editable_files]
        if missing:
            raise RsiEnvError(f"{base.id}: the task must list {missing} in editable_files")
        self.instance: Instance | None = None
        self._start_files: dict[str, str] = {}
        self.clean_tels: list[Telemetry] = []
        super().__init__(base, **kwargs)

    def _make_tier(self, tier: str, engine_version: str) -> Tier:
        """The workspace's engine, run in a fresh sandbox (sim only: the real engine is not the workspace's)."""
        if tier != "sim":
            raise RsiEnvError(f"{self.task.id} runs on tier 'sim' only (the workspace's engine), not {tier!r}")
        self.workspace_tier = WorkspaceTier(engine_version, self.engine_files, self.sandbox_backend)
        return self.workspace_tier

    # ---- the workspace's engine -----------------------------------------------------------------
    def engine_files(self) -> dict[str, str]:
        """The engine files to measure: the instance's while the baseline is measured, then the workspace's."""
        if self._in_reset or self.workspace is None:
            return {f: self._start_files[f] for f in ENGINE_FILES}
        out = {}
        for f in ENGINE_FILES:
            with contextlib.suppress(EditError):  # a missing file is reported by the harness's runner
                out[f] = self.workspace.read(f)
        return out

    def sandbox_profile(self) -> Profile:
        """What the episode's shell shows besides the workspace: the visible tests' numpy, PyYAML, pytest, runtime."""
        return workspace_profile()

    # ---- the episode ------------------------------------------------------------------------------
    def _begin_episode(self, seed: int) -> None:
        self.instance = instance_for(seed, self.sandbox_backend)
        self._start_files = self.instance.files()

    def _workspace_files(self) -> dict[str, str]:
        return dict(self._start_files)

    def _after_baseline(self) -> None:
        """The clean engine's telemetry; a workload the bugged engine could not serve counts `CRASHED_BASE`."""
        self.clean_tels = self._clean_tels(self.baseline_config)
        self.base_tels = [b if b.ok else replace(c, out_tok_per_s=c.out_tok_per_s * CRASHED_BASE)
                          for b, c in zip(self.base_tels, self.clean_tels, strict=True)]
        self.text = clean(self.text + self._symptoms())

    def _clean_tels(self, cfg: EngineConfig) -> list[Telemetry]:
        """The clean engine (`clean_modules`: BugFix-v0's engine loop, trusted) on the episode's workloads."""
        engine = clean_modules()[1]
        return [simulate_detailed(cfg, self.model, self.hardware, w, engine_version=self.tier.engine_version,
                                  engine_cls=engine.EngineSim)[0] for w in self.workloads]

    def _info(self) -> dict[str, Any]:
        inst = self.instance
        return {**super()._info(), "difficulty": dict(inst.difficulty) if inst is not None else {}}

    def _task_text(self) -> str:
        return super()._task_text() + (
            "\nThe engine modules kv_cache.py (KV block pool), engine.py (scheduler) and config.py (config "
            "resolution) are vLLM 0.26's, as the docstrings describe them, with bugs injected. Fix them. "
            "`python -m pytest -q tests/` runs the visible tests; a bench shows telemetry and symptoms. "
            "Hidden checks compare the engine's behaviour with vLLM 0.26's on other workloads.\n")

    def _symptoms(self) -> str:
        tier = self.workspace_tier
        if tier.last is None or not tier.last.symptoms:
            return ""
        return "\nsymptoms:\n" + "\n".join(tier.last.symptoms)

    # ---- actions ----------------------------------------------------------------------------------
    def _code_state(self) -> str:
        return files_hash(self.engine_files())

    def _measure(self, verify: bool) -> Measurement:
        m = super()._measure(verify)
        return replace(m, report=m.report + self._symptoms())

    @contextlib.contextmanager
    def _verifying(self) -> Iterator[None]:
        """A submission is judged from a clean start: measured anew and checked anew, nothing remembered."""
        self.workspace_tier.fresh = True
        try:
            yield
        finally:
            self.workspace_tier.fresh = False

    def _guards(self) -> list[GuardResult]:
        """The base's guards but ``slo`` and ``improvement``, the throughput of the clean engine, the hidden checks."""
        guards = [g for g in super()._guards() if g.name not in _DROPPED_GUARDS]
        files = self.engine_files()
        clean_tels = self._clean_tels(self.config)
        slow = [f"{w.name}: {t.out_tok_per_s / c.out_tok_per_s:.3f}x"
                for w, t, c in zip(self.workloads, self.last_tels, clean_tels, strict=True)
                if c.ok and (not t.ok or t.out_tok_per_s < THROUGHPUT_FLOOR * c.out_tok_per_s)]
        guards.append(GuardResult("throughput", not slow, f"below {THROUGHPUT_FLOOR:.0%} of the clean engine: {slow}"
                                  if slow else ""))
        for c in check_workspace(files, self.sandbox_backend, self.model.name, self.hardware.name, fresh=True):
            guards.append(GuardResult(f"hidden: {c.name}", c.ok, c.reason))
        return guards
