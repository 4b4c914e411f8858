"""What an `RsiEnv` does with a checked action: a flag change, an edit, ``serving.yaml``, a shell command.

Every change is refused before it lands when the env would not measure it (`check_config`: the
task's own rules, then the engine's: vLLM's or SGLang's, in its own words), and a refusal is text in the
observation, never an exception out of ``step``. The action's shape is checked before any of this (`rsi_env.envs.actions`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import yaml
from gymnasium import spaces

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.engines import EngineKind
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.safe_io import ECHO_MAX, load_yaml, shorten
from rsi_env.engine.task import Task
from rsi_env.engine.tier import Tier
from rsi_env.envs.actions import FLAG, check_action
from rsi_env.envs.observation import TEXT_MAX, clean
from rsi_env.errors import InvalidConfigError, RsiEnvError, YamlError
from rsi_env.sandbox import EditError, ShellResult, Workspace
from rsi_env.sandbox.episode import EpisodeSandbox
from rsi_env.sandbox.profile import Profile

__all__ = ["Acting"]

_LINES: dict[tuple[str, str], str] = {}  # serving.yaml's line of (flag, repr(value)): YAML's emitter is slow per step


def _flag_line(flag: str, value: Any) -> str:
    """``flag: value`` as serving.yaml writes it (YAML flow style); ``repr`` tells 1, 1.0, True and '1' apart."""
    key = (flag, repr(value))
    line = _LINES.get(key)
    if line is None:
        line = yaml.safe_dump({flag: value}, default_flow_style=True).strip().strip("{}")
        if len(_LINES) < 4096:
            _LINES[key] = line
    return line


class Acting:
    """Flag changes, edits and shell commands of an `RsiEnv` (mixed into `RsiEnv`, which measures)."""

    task: Task
    engine_kind: EngineKind
    config: EngineConfig
    baseline_config: EngineConfig
    flag_names: tuple[str, ...]
    model: ModelSpec
    hardware: HardwareSpec
    tier: Tier
    num_gpus: int
    auto_bench: bool
    text: str
    shell_timeout_s: float
    no_sandbox: str | None
    action_space: spaces.Space[Any]

    workspace: Workspace | None
    episode_sandbox: EpisodeSandbox | None

    if TYPE_CHECKING:  # RsiEnv's, which measures
        def _do_bench(self, explicit: bool) -> list[object]: ...

    def fixed_flags(self) -> set[str]:
        """Precision flags the agent may not change (the task does not allow fp8)."""
        return set() if self.task.allow_fp8 else set(self.task.precision_flags)

    # ---- decoding -----------------------------------------------------------------------------------
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

    # ---- shell --------------------------------------------------------------------------------------
    def sandbox_profile(self) -> Profile:
        """What the agent's shell sees besides its workspace: the interpreter and the standard library here."""
        return Profile()

    def _run_shell(self, command: str) -> ShellResult:
        """Run an agent's command in the episode's sandbox; refused, with the reason, where there is none."""
        if self.episode_sandbox is None:
            return ShellResult(None, "", error=f"refused: {self.no_sandbox}", backend=None)
        return self.episode_sandbox.run(command, timeout_s=self.shell_timeout_s)

    # ---- flags ----------------------------------------------------------------------------------------
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

    def check_config(self, cfg: EngineConfig) -> None:
        """Raise (`RsiEnvError`, with the reason) if this env would refuse ``cfg``: its own rules, then the engine's."""
        if not isinstance(cfg, self.engine_kind.config):  # one engine per env: another's flags never land
            raise RsiEnvError(f"{self.task.id} tunes {self.engine_kind.label}'s flags, not a {type(cfg).__name__}")
        changed = [f for f in self.fixed_flags() if getattr(cfg, f) != getattr(self.baseline_config, f)]
        if changed:
            raise RsiEnvError(f"{changed} fixed: this task keeps the model's precision (allow_fp8=False)")
        for flag, (lo, hi) in self.task.bounds.items():
            value = getattr(cfg, flag)
            if value is not None and not lo <= value <= hi:
                raise InvalidConfigError(flag, value, f"at most {hi:g} and at least {lo:g} in {self.task.id}",
                                         "the task's operators allow no more")
        used = cfg.num_gpus
        if used > self.num_gpus:
            raise InvalidConfigError(self.engine_kind.gpu_flags, used, f"at most num_gpus={self.num_gpus}")
        self.engine_kind.check(cfg, self.model, self.hardware, self.tier.engine_version)

    def _set_config(self, cfg: EngineConfig, what: str) -> list[object]:
        self.check_config(cfg)  # refusals come before any change
        self.config = cfg
        self._write_serving()
        self.text = clean(what)
        return self._do_bench(explicit=False) if self.auto_bench else []

    # ---- edits ----------------------------------------------------------------------------------------
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
            self.text = clean(str(exc))
            return []
        if rel != "serving.yaml":
            self.text = clean(f"edited {rel}")
            return []
        try:
            raw = load_yaml(self.workspace.read("serving.yaml")) or {}
            if not isinstance(raw, dict):
                raise RsiEnvError("serving.yaml must be a mapping of flag: value")
            foreign = [k for k in raw if k not in self.flag_names]
            if foreign:
                raise RsiEnvError(f"flags {shorten(foreign)} are not tunable in {self.task.id}; "
                                  f"tunable: {list(self.flag_names)}")
            cfg = self.engine_kind.make({**self.baseline_config.to_dict(), **raw})
            return self._set_config(cfg, f"serving.yaml applied: {shorten(raw, TEXT_MAX)}")
        except (YamlError, RsiEnvError, ValueError, TypeError) as exc:  # TypeError: a value of no flag's type
            self._write_serving()  # the file goes back to the configuration in force
            self.text = clean(f"serving.yaml refused ({shorten(str(exc), 5 * ECHO_MAX)}); "
                              "restored the configuration in force")
            return []

    def _write_serving(self) -> None:
        assert self.workspace is not None
        r = self.config.to_dict()
        label = self.engine_kind.label
        lines = [f"# Engine flags of {self.task.id} ({label} names). null = {label}'s default. Tunable here only."]
        lines += [_flag_line(f, r[f]) for f in self.flag_names]
        self.workspace.write("serving.yaml", "\n".join(lines) + "\n")
