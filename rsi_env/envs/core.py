"""`RsiEnv`: the one environment class, a template; a `Task` (data) says what each `RSI/*` id is about.

The env is a front end: it keeps the episode's workspace and configuration, turns the action dict
of docs/architecture.md into flag changes, edits, shell commands, measurements and a submission, and asks a
tier to measure. Bad actions never end an episode: they come back as text in the observation.
Nothing the agent leaves in the workspace is trusted: files are read and written through
`rsi_env.engine.safe_io` (no link followed, nothing that blocks, bounded sizes, YAML without aliases).

This module is the lifecycle: reset, step, bench, submit, budget, rewards, promotion and replay, the
same for every family. What an action does is `rsi_env.envs.acting`; what the agent sees,
`rsi_env.envs.observation`. A family supplies only what differs (see "The template" in `RsiEnv`).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import uuid
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import yaml
from gymnasium.utils import RecordConstructorArgs

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.engines import EngineKind, get_engine
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.task import Task, load_task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.tier import Tier
from rsi_env.engine.workload import SLO, Arrival, Workload, load_workload
from rsi_env.envs.acting import Acting
from rsi_env.envs.actions import BENCH, EDIT, FLAG, KIND_NAMES, SHELL, SUBMIT
from rsi_env.envs.measure import get_tier
from rsi_env.envs.observation import OBS_FIELDS, TEXT_MAX, Observing, action_space, clean, observation_space
from rsi_env.envs.problem import Problem
from rsi_env.envs.promotion import Promoter
from rsi_env.errors import ActionError, RsiEnvError, WorkloadError
from rsi_env.reward import MeasureEvent, SubmitEvent, check_submission, default_rewards, score
from rsi_env.reward.guards import GuardResult, Verdict
from rsi_env.sandbox import Workspace
from rsi_env.sandbox.deadline import ACTION_TIMEOUT_S, action_deadline
from rsi_env.sandbox.episode import EpisodeSandbox, resolve_backend
from rsi_env.sandbox.local import UNCONTAINED
from rsi_env.store.cost import CostMeter
from rsi_env.store.record import record_episode, recording

__all__ = ["KIND_NAMES", "OBS_FIELDS", "Measurement", "RsiEnv", "engine_kwargs"]


@dataclass(frozen=True)
class Measurement:
    """What one measurement of the agent's work gives the template: its score, what it cost, what the agent reads.

    ``score`` is the continuous reward's measure (``-inf`` where it failed); ``device_s`` the device-seconds
    the measurement charges; ``report`` the text the observation shows of it.
    """

    score: float
    device_s: float
    report: str


class _Held:
    """What an episode holds outside the process: its workspace folder and its sandbox.

    The env keeps them here, and a finalizer closes this when the env is garbage-collected without
    `RsiEnv.close`; it holds no reference back to the env, so that the env can be collected.
    """

    def __init__(self) -> None:
        self.workspace: Workspace | None = None
        self.sandbox: EpisodeSandbox | None = None

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None
        if self.workspace is not None:
            self.workspace.close()
            self.workspace = None


def engine_kwargs(**given: Any) -> dict[str, Any]:
    """`RsiEnv`'s constructor arguments with their defaults, ``given`` over them (what ``state()`` records).

    ``engine_version`` is the release measured (the engine's default where none is given); ``engine`` is recorded
    only where it is not vLLM, so that a vLLM episode's state reads as it did before there was a choice.
    """
    params = inspect.signature(RsiEnv.__init__).parameters
    out = {k: p.default for k, p in params.items() if p.kind is p.KEYWORD_ONLY and k != "render_mode"}
    out = {**out, **{k: v for k, v in given.items() if k != "render_mode"}}
    out["engine_version"] = get_engine(out["engine"]).version(out["engine_version"])
    if out["engine"] == "vllm":
        del out["engine"]
    return out


class RsiEnv(Observing, Acting, gym.Env[dict[str, Any], dict[str, Any]], RecordConstructorArgs):
    """Base class of every `RSI/*` environment; subclasses carry the task id and their spec sheet.

    The sections every ``RSI/*`` env shares:

    ## Arguments

    ``gym.make(ID, tier="sim"|"real", model=None, hardware=None, workloads=None, max_steps=None,
    auto_bench=None, seed=None, engine="vllm", engine_version=None, num_gpus=None, allow_fp8=None,
    max_measurements=None, improvement_threshold=None, shell_timeout_s=10.0, promote_on_submit=False,
    warm_start=False, sandbox="auto", variant=None)``:
    ``engine="sglang"`` tunes SGLang instead of vLLM, where the task declares an SGLang setting (``engines:`` in
    its data: Batching, KVCache, PrefixCache, Parallelism): SGLang's flags, ladders and defaults in the action
    space, observation and ``serving.yaml``, its refusals in its own words, measured on SGLang's simulator (sim tier
    only for now); ``engine_version`` is the engine's release, its default by default (vLLM ``"0.26"``, SGLang
    ``"sglang-0.5.17"``), and a release of the other engine is refused. The engine is fixed for the env's life.
    ``model``/``hardware`` default to the task's;
    ``workloads`` replaces the task's list (frozen names or YAML paths); ``auto_bench`` (on by default
    on sim) measures after every change; ``seed`` offsets the workloads' seeds (``reset(seed=...)``
    does the same per episode); ``allow_fp8``, ``max_measurements`` and ``improvement_threshold`` (the
    gain over vLLM's defaults that submit needs, 0.05 for +5 %: a suite instance sets it from its
    ceiling, `rsi_env.suite`) override the task's; ``variant`` picks another setting the task's data
    declares under the same id (e.g. ``"l4"``: the task as first defined on an L4, sim tier only);
    ``promote_on_submit`` (sim tier only) re-measures the submitted configuration and vLLM's defaults
    on the real tier at submit, and the binary reward's guards — the output guard among them — are
    judged on those real measurements (`rsi_env.envs.promotion`); the continuous reward stays on sim,
    and ``info["promotion"]`` holds both tiers' scores and the real telemetry.
    ``warm_start=True`` starts each episode from the best configuration the experience store proposes
    for this (model, hardware, workloads) (`rsi_env.store.warm_start`; not measured yet, the reward
    still counts against vLLM's defaults; every proposal is in ``info["warm_start"]``); a dict starts
    from that configuration (``state()`` records the one used, so a replay starts where the episode did).
    Every measurement and episode is recorded in the experience store (``RSI_ENV_STORE``; ``off`` disables).
    Every task runs shell commands in a sandbox of its own per episode, of the backend ``sandbox`` names
    (``"auto"``: the strongest containing one this machine has, never ``"local"``; ``info["sandbox"]``
    says which), showing what the task's `sandbox_profile` allows (`rsi_env.sandbox.profile`). A code
    task (``sandboxed``) also measures in sandboxes, so it refuses to start without a backend; a flag task
    then refuses only its shell commands, with the reason.

    ## Action Space

    docs/architecture.md's ``Dict``: ``kind`` (0 flag, 1 edit, 2 shell, 3 bench, 4 submit), ``flag`` (index into
    ``env.unwrapped.flag_names``), ``value`` in [0, 1] (the nearest value on the flag's ladder),
    ``path``/``old``/``new`` (edit an editable file, ``serving.yaml`` at least; ``old == ""`` writes it
    whole) and ``command`` (run in the workspace's sandbox, with a timeout and capped output).
    ``flag_action(name, value)`` builds a flag action. An action outside this space is refused, never
    coerced: the observation's text names the field, the step counts and pays 0 (`rsi_env.envs.actions`
    has the rules, e.g. ``kind`` 4.0 is refused, ``np.int64(4)`` taken). Once an episode has ended
    (``terminated`` or ``truncated``), ``step`` raises `RsiEnvError` and pays nothing until ``reset``.

    ## Observation Space

    ``telemetry`` (19 fields: rates and latencies as ratios to vLLM's defaults, preemptions as
    ``log1p``, hit rate and KV usage raw, then the profile's seven parts as shares of the engine's time:
    `rsi_env.envs.observation.PROFILE_FIELDS`), ``config`` (each flag's position on its ladder),
    ``budget`` (steps and measurements left, as fractions), ``action_mask`` (bench is masked once the
    measurement budget is spent), ``flag_mask`` (precision flags the task fixes are masked), and
    ``text`` (the last command's output, error or verdict). A task with no engine flags keeps one
    ``flag``/``config``/``flag_mask`` slot, always 0, and masks flag actions.

    ## The template

    The base owns the lifecycle: reset, step, dispatch, the budget, rewards, promotion and replay. A
    family overrides only hooks: `_measure` (one measurement of the agent's work, a `Measurement`) and
    `_guards` (submit's guards: the base's, with the family's added or dropped); where it needs them,
    `_make_tier` (the tier its measurements run on), `_begin_episode` / `_workspace_files` /
    `_after_baseline` (what a reset draws, writes and reads), `_code_state` (what of the agent's code
    is measured), `_verifying` (what submit's clean start turns off), `_verify_charge` and
    `_verdict_score`. Class attributes say the rest: ``measures_engine`` (False: no workloads, flags or
    baseline measurement), ``bench_at_submit`` (a stale submission is benched, paid, before it is
    judged) and ``verify_again`` (a submission already measured is measured once more, from a clean
    start, before it is judged).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # one text frame per step
    task_id: str = ""
    # Whether the real tier measures what the agent changes (False where the change runs on sim only).
    promotable: bool = True
    # Code tasks measure the agent's code in sandboxes: without a sandbox backend they cannot run at all. Every
    # task's shell commands run in an `EpisodeSandbox` (backend from ``sandbox=``), opened at reset over the
    # episode's workspace and closed with the episode.
    sandboxed: bool = False
    # A folder of the task's own workloads (``<name>.yaml``), looked up before the catalog's frozen ones.
    workload_dir: Path | None = None
    # What the observation's ``telemetry`` holds (a task measuring something else declares its own fields).
    telemetry_fields: tuple[str, ...] = OBS_FIELDS
    # False for a task that measures no engine: its reset writes no workloads or serving.yaml, measures nothing.
    measures_engine: bool = True
    # A submission not measured as it stands is benched first (paid, if the budget allows).
    bench_at_submit: bool = True
    # A submission already measured is measured again from a clean start (`_verifying`), unpaid, before it is judged.
    verify_again: bool = False

    def __init__(self, task: Task | str | None = None, *, tier: str = "sim", model: str | None = None,
                 hardware: str | None = None, workloads: list[str] | None = None, max_steps: int | None = None,
                 auto_bench: bool | None = None, seed: int | None = None, engine: str = "vllm",
                 engine_version: str | None = None,
                 num_gpus: int | None = None, allow_fp8: bool | None = None, max_measurements: int | None = None,
                 improvement_threshold: float | None = None, shell_timeout_s: float = 10.0,
                 promote_on_submit: bool = False, warm_start: bool | dict[str, Any] = False, sandbox: str = "auto",
                 variant: str | None = None, render_mode: str | None = None) -> None:
        # What a replay passes back (a family that records its own arguments has done so already: the first wins).
        RecordConstructorArgs.__init__(self, **engine_kwargs(
            tier=tier, model=model, hardware=hardware, workloads=workloads, max_steps=max_steps,
            auto_bench=auto_bench, seed=seed, engine=engine, engine_version=engine_version, num_gpus=num_gpus,
            allow_fp8=allow_fp8, max_measurements=max_measurements, improvement_threshold=improvement_threshold,
            shell_timeout_s=shell_timeout_s,
            promote_on_submit=promote_on_submit, warm_start=warm_start, sandbox=sandbox, variant=variant))
        self._held = _Held()
        weakref.finalize(self, self._held.close)  # an env dropped without close() leaves no workspace behind
        # The engine whose flags the agent tunes (its configuration type, refusals, release): fixed for the env's life.
        self.engine_kind: EngineKind = get_engine(engine)
        engine_version = self.engine_kind.version(engine_version)
        self.task: Task = task if isinstance(task, Task) else load_task(task or self.task_id)
        if variant is not None or engine != self.task.engine:
            self.task = load_task(self.task.id, variant, engine)
        kind = tier.split(":")[0]
        if kind in ("sim", "real", "endpoint") and kind not in self.task.tiers:
            where = f"{self.task.id}" + (f" (variant {self.task.variant!r})" if self.task.variant else "")
            raise RsiEnvError(f"{where} runs on the {' and '.join(self.task.tiers)} tier(s), not {tier!r}")
        self.no_sandbox: str | None = None  # why shell commands are refused (a flag task on a machine without one)
        try:
            self.sandbox_backend = resolve_backend(sandbox)
        except RsiEnvError as exc:
            if self.sandboxed or sandbox != "auto":
                raise
            self.sandbox_backend, self.no_sandbox = "none", str(exc)
        if self.sandbox_backend == "local":
            warnings.warn(f"{self.task.id}: {UNCONTAINED}", RuntimeWarning, stacklevel=2)
        self.episode_sandbox = None
        self._in_reset = False  # True while reset() measures the baseline (a code task's starting code, then)
        if allow_fp8 is not None:
            self.task = replace(self.task, allow_fp8=bool(allow_fp8))
        if max_measurements is not None:
            self.task = replace(self.task, max_measurements=int(max_measurements))
        if improvement_threshold is not None:
            if not math.isfinite(improvement_threshold) or improvement_threshold <= -1.0:
                raise RsiEnvError(f"improvement_threshold must be a finite gain above -1 (e.g. 0.05 for +5 %), "
                                  f"got {improvement_threshold!r}")
            self.task = replace(self.task, improvement_threshold=float(improvement_threshold))
        t = self.task
        self.shell_timeout_s = float(shell_timeout_s)
        # The step's budget for running the agent's code (`rsi_env.sandbox.deadline`): a hanging workspace
        # costs a step seconds, never the sum of every run's own timeout.
        self.action_timeout_s: float | None = ACTION_TIMEOUT_S
        self.warm_start = warm_start
        self.tier_name = tier
        if promote_on_submit and tier != "sim":
            raise RsiEnvError("promote_on_submit promotes a sim-tier search to the real tier: use tier='sim'")
        if promote_on_submit and "real" not in self.task.tiers:
            raise RsiEnvError(f"{self.task.id} (variant {self.task.variant!r}) runs on the sim tier only: nothing to "
                              "promote it to")
        if promote_on_submit and not self.promotable:
            raise RsiEnvError(f"{self.task.id} cannot be promoted: the real tier does not run what its agent edits")
        self.promoter = Promoter(engine=self.engine_kind.name) if promote_on_submit else None
        self.tier: Tier = self._make_tier(tier, engine_version)
        self.model = load_model(model or t.default_model)
        self.hardware = load_hardware(hardware or t.default_hardware)
        self.workload_names = tuple(workloads or t.workloads)
        self.max_steps = int(max_steps or t.max_steps)
        self.auto_bench = (self.tier.name == "sim") if auto_bench is None else bool(auto_bench)
        self.default_seed = seed
        self.num_gpus = int(num_gpus or t.num_gpus)
        self.render_mode = render_mode
        self.flag_names: tuple[str, ...] = t.flags
        self._base_workloads = [self._task_workload(n) for n in self.workload_names]
        self.rewards = default_rewards(t.cost_per_gpu_second)
        n = max(len(self.flag_names), 1)  # a task with no engine flags keeps one slot, always masked
        self.action_space = action_space(n)
        self.observation_space = observation_space(n, len(self.telemetry_fields))
        self.workspace = None
        self._reset_state()

    @property
    def kwargs(self) -> dict[str, Any]:
        """The constructor arguments a replay passes back (`RecordConstructorArgs`)."""
        return self._saved_kwargs

    @property
    def workspace(self) -> Workspace | None:
        """The episode's workspace (None before the first reset and after close)."""
        return self._held.workspace

    @workspace.setter
    def workspace(self, ws: Workspace | None) -> None:
        self._held.workspace = ws

    @property
    def episode_sandbox(self) -> EpisodeSandbox | None:
        """The episode's sandbox over the workspace, where the agent's shell commands run (None without one)."""
        return self._held.sandbox

    @episode_sandbox.setter
    def episode_sandbox(self, sb: EpisodeSandbox | None) -> None:
        self._held.sandbox = sb

    # ---- setup ------------------------------------------------------------------------------------
    @property
    def problem(self) -> Problem:
        """What this episode scores a configuration on (`Problem`): the searches, the demo and evaluate use it too."""
        if not self.measures_engine:
            raise RsiEnvError(f"{self.task.id} scores code, not engine configurations")
        if not self.base_tels:  # emptied by every reset until its baseline is measured
            raise RsiEnvError(f"{self.task.id} has no problem to score before a reset has measured its baseline")
        return Problem(self.task, self.model, self.hardware, tuple(self.workloads), self.tier, tuple(self.base_tels))

    def _make_tier(self, tier: str, engine_version: str) -> Tier:
        """The tier this env measures on: the process's shared one for ``tier`` (a code task wraps its own)."""
        return get_tier(tier, engine_version)

    def _task_workload(self, name: str) -> Workload:
        local = None if self.workload_dir is None else self.workload_dir / f"{name}.yaml"
        w = load_workload(str(local) if local is not None and local.is_file() else name)
        if self.task.load:
            w = replace(w, arrival=Arrival.parse(self.task.load))
        if self.task.slo:
            w = replace(w, slo=SLO.parse(self.task.slo))
        return w

    def _reset_state(self) -> None:
        self.config = self.engine_kind.make(self.task.start)
        self.baseline_config = self.config
        self.steps = 0
        self.measurements = 0
        self.best_score = 0.0
        self.base_tels: list[Telemetry] = []
        self.workloads: list[Workload] = []
        self.last_score: float | None = None
        self.last_tels: list[Telemetry] = []
        self.measured_config: EngineConfig | None = None  # the configuration, and the code, last measured
        self._measured_code: object = None
        self.text = ""
        self.actions: list[dict[str, Any]] = []
        self.reward_log: list[float] = []
        self.episode_seed: int | None = None
        self.done = False  # submitted
        self.truncated = False  # max_steps reached
        self.verdict: Verdict | None = None
        self.promotion: dict[str, Any] | None = None
        self.episode_id = uuid.uuid4().hex  # the store's key of this episode (not drawn from np_random)
        self._recorded = True  # nothing to record until an action is taken
        self.warm_proposals: list[dict[str, Any]] = []
        self.config_at_reset: dict[str, Any] = {}
        self.cost = CostMeter()  # GPU-seconds and USD per tier, the baseline's measurement included

    def _seeded(self, seed: int) -> list[Workload]:
        return [replace(w, seed=w.seed + seed) for w in self._base_workloads]

    def _seed_for(self, seed: int | None) -> int:
        """The episode's seed: ``reset``'s, else the env's ``seed`` argument, else 0."""
        return int(seed if seed is not None else (self.default_seed if self.default_seed is not None else 0))

    def _new_episode(self, seed: int | None) -> None:
        """Record and close the last episode; a fresh state, seed, rewards, workspace and sandbox."""
        super().reset(seed=seed)
        self._close_episode()
        self._reset_state()
        self.episode_seed = self._seed_for(seed)
        self.workloads = self._seeded(self.episode_seed)
        for r in self.rewards:
            r.reset()
        self.workspace = Workspace(self.task.editable_files)
        if self.no_sandbox is None:  # started by its first command: an episode that runs none pays nothing
            self.episode_sandbox = EpisodeSandbox(self.sandbox_backend, self.workspace.root,
                                                  profile=self.sandbox_profile())

    def _close_episode(self) -> None:
        self._record_episode()
        if self.episode_sandbox is not None:
            self.episode_sandbox.close()
            self.episode_sandbox = None
        if self.workspace is not None:
            self.workspace.close()
            self.workspace = None

    # ---- the family's hooks ---------------------------------------------------------------------------
    def _begin_episode(self, seed: int) -> None:
        """Draw what this episode is about from its seed, before its workspace is written (a bug, a feature)."""

    def _workspace_files(self) -> dict[str, str]:
        """The family's files of a fresh workspace, beside serving.yaml, the workloads and TASK.md."""
        return {}

    def _after_baseline(self) -> None:
        """What a reset reads once the baseline is measured (a code task's starting checks, say)."""

    def _measure(self, verify: bool) -> Measurement:
        """Measure the configuration (and the agent's code) as it stands; ``verify``: for a submission's verdict."""
        scored = self.problem.score(self.config)
        tels = scored.tels
        self.cost.add(self.tier_name, tels, self.config, self.hardware)
        self.last_tels = tels
        gpu_s = sum(t.duration_s * max(1, self.config.num_gpus) for t in tels if t.ok)
        return Measurement(scored.score, gpu_s, self._tel_text(tels))

    @contextlib.contextmanager
    def _verifying(self) -> Iterator[None]:
        """The span of a submission's verification: a family turns its caches off here (a clean start)."""
        yield

    def _verify_charge(self, m: Measurement, stale: bool) -> float:
        """The device-seconds submit's verification charges: paid where the submission was not measured yet."""
        return m.device_s if stale else 0.0

    def _guards(self) -> list[GuardResult]:
        """Submit's guards (`rsi_env.reward.guards.check_submission`); a family adds or drops its own."""
        seen = [self._seen_workload(w) for w in self.workloads]
        s = self.last_score if self.last_score is not None else -math.inf
        return list(check_submission(self.task, self.config, self.baseline_config, self.last_tels, self.workloads,
                                     seen, s).guards)

    def _verdict_score(self) -> float:
        """The score a verdict carries: the submission's last measured score."""
        return self.last_score if self.last_score is not None else -math.inf

    # ---- Gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        self._in_reset = True
        try:
            return self._reset(seed)
        finally:
            self._in_reset = False

    def _reset(self, seed: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
        self._new_episode(seed)
        assert self.workspace is not None and self.episode_seed is not None
        self._begin_episode(self.episode_seed)
        if self.measures_engine:
            for w in self.workloads:
                self.workspace.write(f"workloads/{w.name}.yaml", yaml.safe_dump(w.to_dict(), sort_keys=False))
            if self.warm_start is not False:
                self._apply_warm_start()
            self.config_at_reset = self.config.to_dict(only_set=True)
            self._write_serving()
        self.workspace.write("TASK.md", self._task_text())
        for rel, text in self._workspace_files().items():
            self.workspace.write(rel, text)
        self.text = clean(f"{self.task.id}: {self.task.summary}")
        if self.measures_engine:
            with self._recording():
                self.base_tels = self.tier.measure_all(self.baseline_config, self.model, self.hardware,
                                                       self.workloads)
            self.cost.add(self.tier_name, self.base_tels, self.baseline_config, self.hardware)
            self.last_tels = list(self.base_tels)
            self.text = clean(f"{self.text}\nbaseline measured: {self._tel_text(self.base_tels)}")
        self._after_baseline()
        info = self._info()
        if self.warm_start is not False:
            info["warm_start"] = self.warm_proposals
        return self._obs(), info

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        """One action; refused (as text, paying 0) if outside ``action_space``; a finished episode raises."""
        if self.workspace is None:
            raise RsiEnvError("call reset() before step()")
        if self.done:
            raise RsiEnvError("the episode has ended (submitted); call reset()")
        if self.truncated:
            raise RsiEnvError(f"the episode has ended (truncated: max_steps={self.max_steps} reached); call reset()")
        self.steps += 1
        self._recorded = False
        try:
            act = self._normalise(action)
        except ActionError as exc:
            act = {"refused": str(exc)}  # what a replay gets: refused again, for the same reward (0)
            self.text = clean(f"error: action refused: {exc}")
        self.actions.append(act)
        with action_deadline(self.action_timeout_s):
            events = [] if "refused" in act else self._act(act)
        reward = sum(r.update(e) for e in events for r in self.rewards)
        self.reward_log.append(float(reward))
        terminated = self.done
        self.truncated = truncated = not terminated and self.steps >= self.max_steps
        if terminated or truncated:
            self._record_episode()
        return self._obs(), float(reward), terminated, truncated, self._info()

    def _act(self, act: dict[str, Any]) -> list[object]:
        """Carry out a checked action; its events for the rewards. A bad action is reported as text, never raised."""
        events: list[object] = []
        kind = act["kind"]
        try:
            with self._recording():
                if kind == FLAG:
                    events += self._do_flag(act)
                elif kind == EDIT:
                    events += self._do_edit(act)
                elif kind == SHELL:
                    self.text = clean(self._run_shell(act["command"]).summary())
                elif kind == BENCH:
                    events += self._do_bench(explicit=True)
                elif kind == SUBMIT:
                    events += self._do_submit()
        except (RsiEnvError, ValueError) as exc:  # a bad action is reported, never fatal
            self.text = clean(f"error: {exc}")
        return events

    def render(self) -> str | None:  # type: ignore[override]  # ansi mode renders text
        if self.render_mode == "ansi":
            return self.text
        return None

    def close(self) -> None:
        self._close_episode()

    # ---- bench and submit -------------------------------------------------------------------------
    def _take_measurement(self) -> bool:
        """Count a measurement against the budget; False (and the text says so) once the budget is spent."""
        if self.measurements >= self.task.max_measurements:
            self.text = clean(self.text + f"\nno measurement: the budget of {self.task.max_measurements} is spent")
            return False
        self.measurements += 1
        return True

    def _stale(self) -> bool:
        """Whether the configuration or the agent's code changed since the last measurement."""
        return self.measured_config != self.config or self._measured_code != self._code_state()

    def _do_bench(self, explicit: bool) -> list[object]:
        if not self._take_measurement():
            return []
        code = self._code_state()
        m = self._measure(verify=False)  # a measurement that raises leaves the configuration unmeasured
        self.measured_config, self._measured_code = self.config, code
        self.last_score = m.score
        if math.isfinite(m.score):
            self.best_score = max(self.best_score, m.score)
        head = "measured" if explicit else "auto-bench"
        self.text = clean(f"{self.text}\n{head}: score {m.score:+.4f} (best {self.best_score:+.4f}); {m.report}")
        return [MeasureEvent(m.score, m.device_s)]

    def _do_submit(self) -> list[object]:
        """Judge the submission as it stands: measured (a stale one benched first), then its guards."""
        assert self.workspace is not None
        events: list[object] = []
        verified: Measurement | None = None
        with self._verifying():
            stale = self._stale()
            if stale and self.bench_at_submit:
                events += self._do_bench(explicit=True)
            still = self._stale()  # the budget was spent: verified anyway, charged, never paid
            if still or (self.verify_again and not (stale and not still)):
                verified = self._measure(verify=True)
                self.last_score = verified.score
                charge = self._verify_charge(verified, still)
                if charge:
                    events.append(MeasureEvent(-math.inf, charge))
            guards = self._guards()
        self.verdict = Verdict(all(g.ok for g in guards), self._verdict_score(), tuple(guards))
        self.done = True
        self.text = clean(self.verdict.summary(TEXT_MAX) + ("" if verified is None else "\n" + verified.report))
        if self.promoter is not None:
            self.verdict = self._promote(self.verdict)
        return events + [SubmitEvent(self.verdict)]

    def _seen_workload(self, w: Workload) -> Workload | None:
        """The workspace's copy of ``w`` as the agent left it (None if it cannot be read as a workload)."""
        assert self.workspace is not None
        try:
            return Workload.from_yaml(f"workloads/{w.name}.yaml", root=self.workspace.root)
        except (WorkloadError, ValueError, TypeError, KeyError, AttributeError):  # any malformed content: tampered
            return None

    def _promote(self, sim_verdict: Verdict) -> Verdict:
        """Measure the submitted configuration and the defaults on real; the verdict there (see promotion.py)."""
        assert self.promoter is not None
        p = self.promoter
        seen = [self._seen_workload(w) for w in self.workloads]
        fresh = not p.has_baseline(self.baseline_config, self.model, self.hardware, self.workloads)
        base = p.baseline(self.baseline_config, self.model, self.hardware, self.workloads)
        real = base if self.config == self.baseline_config else p.measure(self.config, self.model, self.hardware,
                                                                          self.workloads)
        rs = score(real.tels, base.tels, self.task)
        outputs = None if self.task.allow_fp8 else p.outputs(base, real)
        verdict = check_submission(self.task, self.config, self.baseline_config, real.tels, self.workloads, seen,
                                   rs, outputs)
        gpu_s = (base.gpu_s if fresh else 0.0) + (real.gpu_s if real is not base else 0.0)
        self.promotion = p.info(self.last_score, rs, sim_verdict.passed, real, base, outputs, gpu_s)
        head = f"sim: {sim_verdict.summary(TEXT_MAX // 3)}\npromoted to real ({self._tel_text(real.tels)}):\n"
        self.text = clean(head + verdict.summary(TEXT_MAX - len(head)))
        return verdict

    # ---- text -------------------------------------------------------------------------------------
    def _task_text(self) -> str:
        t = self.task
        return (f"# {t.id}\n\n{t.summary}\n\nModel {self.model.name} on {self.num_gpus} x {self.hardware.name}, "
                f"tier {self.tier_name}. Objective: {'maximise' if t.maximize else 'minimise'} {t.metric} over "
                f"{list(self.workload_names)}, SLO {t.slo}, attainment >= {t.slo_attainment}. Submit beats "
                f"{self.engine_kind.label}'s defaults by {t.improvement_threshold:.0%} to pass. "
                f"Editable: {list(t.editable_files)}.\n")

    # ---- experience ---------------------------------------------------------------------------------
    def _recording(self) -> Any:
        """Label this env's measurements in the experience store: who asked, which episode."""
        return recording(source=f"env:{self.task.id}", episode=self.episode_id)

    def _record_episode(self) -> None:
        """Write the episode so far to the experience store (once per change; a no-op when the store is off)."""
        if self._recorded or not self.actions:
            return
        self._recorded = True
        with self._recording():
            record_episode(self.state(), episode_id=self.episode_id, best_score=self.best_score, steps=self.steps,
                           measurements=self.measurements, extra=self._episode_extra())

    def _episode_extra(self) -> dict[str, Any]:
        """What the store keeps beside an episode's state: its context, warm start and cost."""
        return {"model": self.model.name, "hardware": self.hardware.name, "tier": self.tier_name,
                "warm_start": self.warm_proposals, "cost": self.cost.to_dict()}

    def _apply_warm_start(self) -> None:
        """Start from the given configuration, or from the store's best proposal for this context."""
        if isinstance(self.warm_start, dict):
            start = {**self.task.start, **self.warm_start}
            self.check_config(self.engine_kind.make(start))  # a bad given start is the caller's error
            self.config = self.engine_kind.make(start)
            return
        from rsi_env.store.record import default_store
        from rsi_env.store.warm_start import propose

        store = default_store()
        if store is None:
            self.text = (f"warm start: the experience store is off (RSI_ENV_STORE); starting from "
                         f"{self.engine_kind.label}'s defaults")
            return

        def refuse(cfg: dict[str, Any]) -> str | None:
            try:
                self.check_config(self.engine_kind.make({**self.task.start, **cfg}))
            except (RsiEnvError, ValueError) as exc:
                return str(exc)
            return None

        fixed = self.fixed_flags()
        props = propose(store, self.task, self.model, self.hardware, self.workloads,
                        engine_version=self.tier.engine_version, tier=self.tier_name,
                        flags=[f for f in self.flag_names if f not in fixed], refuse=refuse)
        self.warm_proposals = [{"config": p.config, "estimate": p.estimate, "support": p.support,
                                "distance": p.distance, "sources": list(p.sources)} for p in props]
        if props:
            self.config = self.engine_kind.make({**self.task.start, **props[0].config})

    # ---- replay -----------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The episode so far as data: task, kwargs, seed, actions, rewards (see `rsi_env.envs.state`)."""
        kwargs = dict(self.kwargs)
        if self.warm_start is not False:  # the start actually used, so that a replay starts there too
            kwargs["warm_start"] = self.config_at_reset
        return {"task": self.task.id, "kwargs": kwargs, "seed": self.episode_seed,
                "actions": [dict(a) for a in self.actions], "rewards": list(self.reward_log),
                "final_config": self.config.to_dict(only_set=True),
                "passed": None if self.verdict is None else self.verdict.passed}
