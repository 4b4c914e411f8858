"""`RsiEnv`: the one environment class; a `Task` (data) says what each `RSI/*` id is about.

The env is a front end: it keeps the episode's workspace and configuration, turns the action dict
of docs/architecture.md into flag changes, edits, shell commands, measurements and a submission, and asks a
tier to measure. Bad actions never end an episode: they come back as text in the observation.
Nothing the agent leaves in the workspace is trusted: files are read and written through
`rsi_env.engine.safe_io` (no link followed, nothing that blocks, bounded sizes, YAML without aliases).
"""

from __future__ import annotations

import math
import string
import uuid
import warnings
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
import yaml
from gymnasium import spaces

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.safe_io import ECHO_MAX, load_yaml, shorten
from rsi_env.engine.task import Task, load_task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Arrival, Workload, load_workload
from rsi_env.envs.actions import BENCH, EDIT, FLAG, KIND_NAMES, SHELL, SUBMIT, check_action
from rsi_env.envs.measure import get_tier
from rsi_env.envs.promotion import Promoter
from rsi_env.errors import ActionError, InvalidConfigError, RsiEnvError, WorkloadError, YamlError
from rsi_env.reward import MeasureEvent, SubmitEvent, check_submission, default_rewards, score
from rsi_env.reward.guards import Verdict
from rsi_env.sandbox import EditError, ShellResult, Workspace
from rsi_env.sandbox.deadline import ACTION_TIMEOUT_S, action_deadline
from rsi_env.sandbox.episode import EpisodeSandbox, resolve_backend
from rsi_env.sandbox.local import UNCONTAINED
from rsi_env.sandbox.profile import Profile
from rsi_env.store.cost import CostMeter
from rsi_env.store.record import record_episode, recording

__all__ = ["RsiEnv", "KIND_NAMES", "OBS_FIELDS"]

OBS_FIELDS = ("out_tok_per_s", "goodput_req_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p99",
              "num_preemptions", "prefix_cache_hit_rate", "kv_cache_usage_peak", "mean_batch_size",
              "cost_per_mtok_usd")
_RATIO = {"out_tok_per_s", "goodput_req_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p99",
          "mean_batch_size", "cost_per_mtok_usd"}
TEXT_MAX = 2048
CHARSET = string.printable
_TEXT_FIELD_MAX = 8192
_OBS_HIGH = 1e3


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


def _clean(text: str) -> str:
    """Text fit for the observation space: printable ASCII, at most TEXT_MAX characters."""
    s = "".join(c if c in CHARSET else "?" for c in text)
    return s if len(s) <= TEXT_MAX else s[: TEXT_MAX - 15] + "\n...[truncated]"


class RsiEnv(gym.Env[dict[str, Any], dict[str, Any]]):
    """Base class of every `RSI/*` environment; subclasses carry the task id and their spec sheet.

    The sections every ``RSI/*`` env shares:

    ## Arguments

    ``gym.make(ID, tier="sim"|"real", model=None, hardware=None, workloads=None, max_steps=None,
    auto_bench=None, seed=None, engine_version="0.26", num_gpus=None, allow_fp8=None,
    max_measurements=None, shell_timeout_s=10.0, promote_on_submit=False, warm_start=False,
    sandbox="auto")``:
    ``model``/``hardware`` default to the task's;
    ``workloads`` replaces the task's list (frozen names or YAML paths); ``auto_bench`` (on by default
    on sim) measures after every change; ``seed`` offsets the workloads' seeds (``reset(seed=...)``
    does the same per episode); ``allow_fp8`` and ``max_measurements`` override the task's;
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

    ``telemetry`` (12 fields: rates and latencies as ratios to vLLM's defaults, preemptions as
    ``log1p``, hit rate and KV usage raw), ``config`` (each flag's position on its ladder),
    ``budget`` (steps and measurements left, as fractions), ``action_mask`` (bench is masked once the
    measurement budget is spent), ``flag_mask`` (precision flags the task fixes are masked), and
    ``text`` (the last command's output, error or verdict). A task with no engine flags keeps one
    ``flag``/``config``/``flag_mask`` slot, always 0, and masks flag actions.
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

    def __init__(self, task: Task | str | None = None, *, tier: str = "sim", model: str | None = None,
                 hardware: str | None = None, workloads: list[str] | None = None, max_steps: int | None = None,
                 auto_bench: bool | None = None, seed: int | None = None, engine_version: str = "0.26",
                 num_gpus: int | None = None, allow_fp8: bool | None = None, max_measurements: int | None = None,
                 shell_timeout_s: float = 10.0, promote_on_submit: bool = False,
                 warm_start: bool | dict[str, Any] = False, sandbox: str = "auto",
                 render_mode: str | None = None) -> None:
        self._held = _Held()
        weakref.finalize(self, self._held.close)  # an env dropped without close() leaves no workspace behind
        self.task: Task = task if isinstance(task, Task) else load_task(task or self.task_id)
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
        t = self.task
        self.shell_timeout_s = float(shell_timeout_s)
        # The step's budget for running the agent's code (`rsi_env.sandbox.deadline`): a hanging workspace
        # costs a step seconds, never the sum of every run's own timeout.
        self.action_timeout_s: float | None = ACTION_TIMEOUT_S
        self.kwargs = {"tier": tier, "model": model, "hardware": hardware, "workloads": workloads,
                       "max_steps": max_steps, "auto_bench": auto_bench, "seed": seed,
                       "engine_version": engine_version, "num_gpus": num_gpus, "allow_fp8": allow_fp8,
                       "max_measurements": max_measurements,
                       "shell_timeout_s": shell_timeout_s, "promote_on_submit": promote_on_submit,
                       "warm_start": warm_start, "sandbox": sandbox}
        self.warm_start = warm_start
        self.tier_name = tier
        if promote_on_submit and tier != "sim":
            raise RsiEnvError("promote_on_submit promotes a sim-tier search to the real tier: use tier='sim'")
        if promote_on_submit and not self.promotable:
            raise RsiEnvError(f"{self.task.id} cannot be promoted: the real tier does not run what its agent edits")
        self.promoter = Promoter() if promote_on_submit else None
        self.tier = get_tier(tier, engine_version)
        self.model = load_model(model or t.default_model)
        self.hardware = load_hardware(hardware or t.default_hardware)
        self.workload_names = tuple(workloads or t.workloads)
        self.max_steps = int(max_steps or t.max_steps)
        self.auto_bench = (tier == "sim") if auto_bench is None else bool(auto_bench)
        self.default_seed = seed
        self.num_gpus = int(num_gpus or t.num_gpus)
        self.render_mode = render_mode
        self.flag_names: tuple[str, ...] = t.flags
        self._base_workloads = [self._task_workload(n) for n in self.workload_names]
        self.rewards = default_rewards(t.cost_per_gpu_second)
        n = max(len(self.flag_names), 1)  # a task with no engine flags keeps one slot, always masked
        self.action_space = spaces.Dict({
            "kind": spaces.Discrete(len(KIND_NAMES)),
            "flag": spaces.Discrete(n),
            "value": spaces.Box(0.0, 1.0, shape=(), dtype=np.float32),
            "path": spaces.Text(256, charset=CHARSET),
            "old": spaces.Text(_TEXT_FIELD_MAX, min_length=0, charset=CHARSET),
            "new": spaces.Text(_TEXT_FIELD_MAX, min_length=0, charset=CHARSET),
            "command": spaces.Text(1024, charset=CHARSET),
        })
        self.observation_space = spaces.Dict({
            "telemetry": spaces.Box(0.0, _OBS_HIGH, shape=(len(self.telemetry_fields),), dtype=np.float32),
            "config": spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32),
            "budget": spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32),
            "action_mask": spaces.MultiBinary(len(KIND_NAMES)),
            "flag_mask": spaces.MultiBinary(n),
            "text": spaces.Text(TEXT_MAX, min_length=0, charset=CHARSET),
        })
        self.workspace = None
        self._reset_state()

    @property
    def workspace(self) -> Workspace | None:
        """The episode's workspace (None before the first reset and after close)."""
        return self._held.workspace

    @workspace.setter
    def workspace(self, ws: Workspace | None) -> None:
        self._held.workspace = ws

    @property
    def episode_sandbox(self) -> EpisodeSandbox | None:
        """A code task's sandbox over the workspace, for this episode (None on flag tasks)."""
        return self._held.sandbox

    @episode_sandbox.setter
    def episode_sandbox(self, sb: EpisodeSandbox | None) -> None:
        self._held.sandbox = sb

    # ---- setup ------------------------------------------------------------------------------------
    def _task_workload(self, name: str) -> Workload:
        local = None if self.workload_dir is None else self.workload_dir / f"{name}.yaml"
        w = load_workload(str(local) if local is not None and local.is_file() else name)
        if self.task.load:
            w = replace(w, arrival=Arrival.parse(self.task.load))
        if self.task.slo:
            from rsi_env.engine.workload import SLO

            w = replace(w, slo=SLO.parse(self.task.slo))
        return w

    def _reset_state(self) -> None:
        self.config = EngineConfig.from_dict(self.task.start)
        self.baseline_config = self.config
        self.steps = 0
        self.measurements = 0
        self.best_score = 0.0
        self.last_score: float | None = None
        self.last_tels: list[Telemetry] = []
        self.measured_config: EngineConfig | None = None
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
        """Record and close the last episode; a fresh state, seed, rewards, workspace (and sandbox, if sandboxed)."""
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
        assert self.workspace is not None
        for w in self.workloads:
            self.workspace.write(f"workloads/{w.name}.yaml", yaml.safe_dump(w.to_dict(), sort_keys=False))
        if self.warm_start is not False:
            self._apply_warm_start()
        self.config_at_reset = self.config.to_dict(only_set=True)
        self._write_serving()
        self.workspace.write("TASK.md", self._task_text())
        with self._recording():
            self.base_tels = self.tier.measure_all(self.baseline_config, self.model, self.hardware, self.workloads)
        self.cost.add(self.tier_name, self.base_tels, self.baseline_config, self.hardware)
        self.last_tels = list(self.base_tels)
        self.text = _clean(f"{self.task.id}: {self.task.summary}\nbaseline measured: "
                           + self._tel_text(self.base_tels))
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
            self.text = _clean(f"error: action refused: {exc}")
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
                    self.text = _clean(self._run_shell(act["command"]).summary())
                elif kind == BENCH:
                    events += self._do_bench(explicit=True)
                elif kind == SUBMIT:
                    events += self._do_submit()
        except (RsiEnvError, ValueError) as exc:  # a bad action is reported, never fatal
            self.text = _clean(f"error: {exc}")
        return events

    def render(self) -> str | None:  # type: ignore[override]  # ansi mode renders text
        if self.render_mode == "ansi":
            return self.text
        return None

    def close(self) -> None:
        self._close_episode()

    # ---- actions ----------------------------------------------------------------------------------
    def sandbox_profile(self) -> Profile:
        """What the agent's shell sees besides its workspace: the interpreter and the standard library here."""
        return Profile()

    def _run_shell(self, command: str) -> ShellResult:
        """Run an agent's command in the episode's sandbox; refused, with the reason, where there is none."""
        if self.episode_sandbox is None:
            return ShellResult(None, "", error=f"refused: {self.no_sandbox}", backend=None)
        return self.episode_sandbox.run(command, timeout_s=self.shell_timeout_s)

    def _normalise(self, action: dict[str, Any]) -> dict[str, Any]:
        """The action as plain values, every field given (`rsi_env.envs.actions`); `ActionError` naming a bad field."""
        assert isinstance(self.action_space, spaces.Dict)
        return check_action(action, self.action_space)

    def flag_action(self, name: str, value: Any) -> dict[str, Any]:
        """The action that sets ``name`` to ``value`` (nearest value on the flag's ladder)."""
        if name not in self.flag_names:
            raise RsiEnvError(f"flag {shorten(name)!r} is not tunable in {self.task.id}; "
                              f"tunable: {list(self.flag_names)}")
        ladder = self.task.ladder(name)
        norm = tuple(tuple(v) if isinstance(v, list) else v for v in ladder)
        target = tuple(value) if isinstance(value, list) else value
        if target not in norm:
            raise RsiEnvError(f"{name}={shorten(value)} is not on this task's ladder {list(ladder)}")
        idx = norm.index(target)
        pos = idx / (len(ladder) - 1) if len(ladder) > 1 else 0.0
        return {"kind": FLAG, "flag": self.flag_names.index(name), "value": np.float32(pos)}

    def _do_flag(self, act: dict[str, Any]) -> list[object]:
        if not self.flag_names:
            raise RsiEnvError(f"{self.task.id} has no engine flags: edit {', '.join(self.task.editable_files)} "
                              "(kind 1) instead")
        name = self.flag_names[act["flag"]]
        ladder = self.task.ladder(name)
        v = min(max(act["value"], 0.0), 1.0)
        value = ladder[int(round(v * (len(ladder) - 1)))]
        return self._set_config(self.config.replace(**{name: list(value) if isinstance(value, tuple) else value}),
                                f"set {name} = {value}")

    def fixed_flags(self) -> set[str]:
        """Precision flags the agent may not change (the task does not allow fp8)."""
        return set() if self.task.allow_fp8 else set(self.task.precision_flags)

    def check_config(self, cfg: EngineConfig) -> None:
        """Raise (`RsiEnvError`, with the reason) if this env would refuse ``cfg``: its own rules, then vLLM's."""
        changed = [f for f in self.fixed_flags() if getattr(cfg, f) != getattr(self.baseline_config, f)]
        if changed:
            raise RsiEnvError(f"{changed} fixed: this task keeps the model's precision (allow_fp8=False)")
        self._check_gpus(cfg)
        cfg.resolve(self.model, self.hardware, self.tier.engine_version)

    def _set_config(self, cfg: EngineConfig, what: str) -> list[object]:
        self.check_config(cfg)  # refusals come before any change
        self.config = cfg
        self._write_serving()
        self.text = _clean(what)
        return self._do_bench(explicit=False) if self.auto_bench else []

    def _check_gpus(self, cfg: EngineConfig) -> None:
        used = cfg.num_gpus
        if used > self.num_gpus:
            raise InvalidConfigError("tensor_parallel_size*pipeline_parallel_size*data_parallel_size", used,
                                     f"at most num_gpus={self.num_gpus}")

    def _code_state(self) -> object:
        """What a code task measures of the agent's code (its text, a hash); an edit that changes it auto-benches."""
        return None

    def _do_edit(self, act: dict[str, Any]) -> list[object]:
        before = self._code_state()
        events = self._edit(act)
        if self.auto_bench and self._code_state() != before:
            events += self._do_bench(explicit=False)
        return events

    def _edit(self, act: dict[str, Any]) -> list[object]:
        """Apply an edit; an edit of ``serving.yaml`` changes the configuration (and auto-benches, if on)."""
        assert self.workspace is not None
        try:
            rel = self.workspace.edit(act["path"], act["old"], act["new"])
        except EditError as exc:
            self.text = _clean(str(exc))
            return []
        if rel != "serving.yaml":
            self.text = _clean(f"edited {rel}")
            return []
        try:
            raw = load_yaml(self.workspace.read("serving.yaml")) or {}
            if not isinstance(raw, dict):
                raise RsiEnvError("serving.yaml must be a mapping of flag: value")
            foreign = [k for k in raw if k not in self.flag_names]
            if foreign:
                raise RsiEnvError(f"flags {shorten(foreign)} are not tunable in {self.task.id}; "
                                  f"tunable: {list(self.flag_names)}")
            cfg = EngineConfig.from_dict({**self.baseline_config.to_dict(), **raw})
            return self._set_config(cfg, f"serving.yaml applied: {shorten(raw, TEXT_MAX)}")
        except (YamlError, RsiEnvError, ValueError, TypeError) as exc:  # TypeError: a value of no flag's type
            self._write_serving()  # the file goes back to the configuration in force
            self.text = _clean(f"serving.yaml refused ({shorten(str(exc), 5 * ECHO_MAX)}); "
                               "restored the configuration in force")
            return []

    def _take_measurement(self) -> bool:
        """Count a measurement against the budget; False (and the text says so) once the budget is spent."""
        if self.measurements >= self.task.max_measurements:
            self.text = _clean(self.text + f"\nno measurement: the budget of {self.task.max_measurements} is spent")
            return False
        self.measurements += 1
        return True

    def _do_bench(self, explicit: bool) -> list[object]:
        if not self._take_measurement():
            return []
        tels = self.tier.measure_all(self.config, self.model, self.hardware, self.workloads)
        self.cost.add(self.tier_name, tels, self.config, self.hardware)
        self.last_tels = tels
        self.measured_config = self.config
        s = score(tels, self.base_tels, self.task)
        self.last_score = s
        if math.isfinite(s):
            self.best_score = max(self.best_score, s)
        gpu_s = sum(t.duration_s * max(1, self.config.num_gpus) for t in tels if t.ok)
        head = "measured" if explicit else "auto-bench"
        self.text = _clean(f"{self.text}\n{head}: score {s:+.4f} (best {self.best_score:+.4f}); "
                           + self._tel_text(tels))
        return [MeasureEvent(s, gpu_s)]

    def _do_submit(self) -> list[object]:
        assert self.workspace is not None
        events: list[object] = []
        if self.measured_config != self.config:
            events += self._do_bench(explicit=True)
            if self.measured_config != self.config:  # the budget was spent: verify anyway, charged, never paid
                self.last_tels = self.tier.measure_all(self.config, self.model, self.hardware, self.workloads)
                self.cost.add(self.tier_name, self.last_tels, self.config, self.hardware)
                self.last_score = score(self.last_tels, self.base_tels, self.task)
                gpu_s = sum(t.duration_s * self.config.num_gpus for t in self.last_tels if t.ok)
                events.append(MeasureEvent(-math.inf, gpu_s))
        seen = [self._seen_workload(w) for w in self.workloads]
        s = self.last_score if self.last_score is not None else -math.inf
        self.verdict = check_submission(self.task, self.config, self.baseline_config, self.last_tels,
                                        self.workloads, seen, s)
        self.done = True
        self.text = _clean(self.verdict.summary())
        if self.promoter is not None:
            self.verdict = self._promote(seen, self.verdict)
        return events + [SubmitEvent(self.verdict)]

    def _seen_workload(self, w: Workload) -> Workload | None:
        """The workspace's copy of ``w`` as the agent left it (None if it cannot be read as a workload)."""
        assert self.workspace is not None
        try:
            return Workload.from_yaml(f"workloads/{w.name}.yaml", root=self.workspace.root)
        except (WorkloadError, ValueError, TypeError, KeyError, AttributeError):  # any malformed content: tampered
            return None

    def _promote(self, seen: list[Workload | None], sim_verdict: Verdict) -> Verdict:
        """Measure the submitted configuration and the defaults on real; the verdict there (see promotion.py)."""
        assert self.promoter is not None
        p = self.promoter
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
        self.text = _clean(f"sim: {sim_verdict.summary()}\npromoted to real ({self._tel_text(real.tels)}):\n"
                           + verdict.summary())
        return verdict

    # ---- observation --------------------------------------------------------------------------------
    def _obs(self) -> dict[str, Any]:
        n = max(len(self.flag_names), 1)
        cfg = np.zeros(n, dtype=np.float32)
        for k, f in enumerate(self.flag_names):
            ladder = [tuple(v) if isinstance(v, list) else v for v in self.task.ladder(f)]
            cur = getattr(self.config, f)
            cfg[k] = ladder.index(cur) / max(len(ladder) - 1, 1) if cur in ladder else 0.0
        budget = np.array([1.0 - self.steps / self.max_steps,
                           1.0 - self.measurements / self.task.max_measurements], dtype=np.float32)
        mask = np.ones(len(KIND_NAMES), dtype=np.int8)
        mask[FLAG] = int(bool(self.flag_names))
        mask[BENCH] = int(self.measurements < self.task.max_measurements)
        flag_mask = np.zeros(n, dtype=np.int8)
        fixed = self.fixed_flags()
        for k, f in enumerate(self.flag_names):
            flag_mask[k] = f not in fixed
        return {"telemetry": np.clip(self._telemetry_obs(), 0.0, _OBS_HIGH), "config": np.clip(cfg, 0.0, 1.0),
                "budget": np.clip(budget, 0.0, 1.0), "action_mask": mask, "flag_mask": flag_mask,
                "text": _clean(self.text)}

    def _telemetry_obs(self) -> np.ndarray:
        """The observation's ``telemetry``, one value per `telemetry_fields` entry (here `OBS_FIELDS`)."""
        tel = np.zeros(len(OBS_FIELDS), dtype=np.float32)
        if self.last_tels and all(t.ok for t in self.last_tels):
            for k, f in enumerate(OBS_FIELDS):
                vals = []
                for t, b in zip(self.last_tels, self.base_tels, strict=True):
                    v, bv = float(getattr(t, f)), float(getattr(b, f))
                    if f in _RATIO:
                        vals.append(math.log(max(v, 1e-9) / max(bv, 1e-9)) if bv > 0 and v > 0 else 0.0)
                    elif f == "num_preemptions":
                        vals.append(math.log1p(v))
                    else:
                        vals.append(v)
                x = float(np.mean(vals))
                tel[k] = math.exp(x) if f in _RATIO else x
        return tel

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"task": self.task.id, "config": self.config.to_dict(only_set=True), "score": self.last_score,
                "best_score": self.best_score, "measurements": self.measurements, "steps": self.steps,
                "telemetry": [t.to_dict() for t in self.last_tels], "verdict": self._verdict_info(),
                "promotion": self.promotion, "sandbox": self.sandbox_backend}
        return info

    def _verdict_info(self) -> dict[str, Any] | None:
        """The submission's verdict as ``info`` shows it: passed, and each guard's result (None before submit)."""
        v = self.verdict
        return None if v is None else {"passed": v.passed, "guards": {g.name: g.ok for g in v.guards}}

    def _tel_text(self, tels: list[Telemetry]) -> str:
        parts = []
        for w, t in zip(self.workloads, tels, strict=True):
            if t.ok:
                parts.append(f"{w.name}: {t.out_tok_per_s:.0f} tok/s, goodput {t.goodput_req_per_s:.2f} req/s, "
                             f"TTFT p50 {t.ttft_p50 * 1e3:.0f} ms, TPOT p99 {t.tpot_p99 * 1e3:.1f} ms")
            else:
                parts.append(f"{w.name}: ERROR {t.error}")
        return "; ".join(parts)

    def _write_serving(self) -> None:
        assert self.workspace is not None
        r = self.config.to_dict()
        lines = [f"# Engine flags of {self.task.id} (vLLM names). null = vLLM's default. Tunable here only."]
        for f in self.flag_names:
            lines.append(yaml.safe_dump({f: r[f]}, default_flow_style=True).strip().strip("{}"))
        self.workspace.write("serving.yaml", "\n".join(lines) + "\n")

    def _task_text(self) -> str:
        t = self.task
        return (f"# {t.id}\n\n{t.summary}\n\nModel {self.model.name} on {self.num_gpus} x {self.hardware.name}, "
                f"tier {self.tier_name}. Objective: {'maximise' if t.maximize else 'minimise'} {t.metric} over "
                f"{list(self.workload_names)}, SLO {t.slo}, attainment >= {t.slo_attainment}. Submit beats vLLM's "
                f"defaults by {t.improvement_threshold:.0%} to pass. Editable: {list(t.editable_files)}.\n")

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
            self.check_config(EngineConfig.from_dict(start))  # a bad given start is the caller's error
            self.config = EngineConfig.from_dict(start)
            return
        from rsi_env.store.record import default_store
        from rsi_env.store.warm_start import propose

        store = default_store()
        if store is None:
            self.text = "warm start: the experience store is off (RSI_ENV_STORE); starting from vLLM's defaults"
            return

        def refuse(cfg: dict[str, Any]) -> str | None:
            try:
                self.check_config(EngineConfig.from_dict({**self.task.start, **cfg}))
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
            self.config = EngineConfig.from_dict({**self.task.start, **props[0].config})

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
