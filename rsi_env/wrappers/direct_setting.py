"""`DirectSetting`: set every flag to a rung of its ladder at once, measure, and optionally submit.

The action is ``MultiDiscrete([len(ladder(f)) for f in flag_names] + [2])``: entry ``k`` is the
ladder index of flag ``k`` (``env.unwrapped.task.ladder(flag)``), the last entry a submit switch.
One step writes the whole configuration to ``serving.yaml`` (one change, so one measurement, where
moving flag by flag would measure after each), measures it (the env auto-benches on the sim tier;
elsewhere this wrapper benches), and submits when the switch is 1. It is the view for black-box
search and for policies that pick a whole configuration per step (a bandit over configurations).

Flags the task fixes (``flag_mask`` 0) keep their starting value whatever index is given. A
configuration the env refuses (vLLM's refusal, too many GPUs) is turned down with the reason in
the text, spends a step and no measurement. The observation's ``action_mask`` is the concatenation
of one mask per entry (sb3-contrib's convention for ``MultiDiscrete``): every rung of a free flag,
only the starting rung of a fixed one, and both values of the switch.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import yaml
from gymnasium import spaces

from rsi_env.engine.config import EngineConfig
from rsi_env.envs.actions import BENCH, EDIT, SUBMIT
from rsi_env.errors import InvalidConfigError
from rsi_env.wrappers.ladders import free_flags, ladder, position, rsi_env_of
from rsi_env.wrappers.masked import MaskedActions, StepResult

__all__ = ["DirectSetting", "serving_yaml"]


def serving_yaml(values: dict[str, Any]) -> str:
    """``serving.yaml`` text that sets each flag of ``values`` (tuples written as lists, ``None`` as null)."""
    plain = {f: list(v) if isinstance(v, tuple) else v for f, v in values.items()}
    return yaml.safe_dump(plain, sort_keys=False, default_flow_style=None)


class DirectSetting(MaskedActions, gym.utils.RecordConstructorArgs):
    """``MultiDiscrete``: one ladder index per flag plus a submit switch; every step measures."""

    def __init__(self, env: gym.Env[dict[str, Any], dict[str, Any]]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        rsi = rsi_env_of(env)
        self.sizes = [len(ladder(rsi, f)) for f in rsi.flag_names]
        super().__init__(env, spaces.MultiDiscrete([*self.sizes, 2]), sum(self.sizes) + 2)

    def values(self, action: Any) -> dict[str, Any]:
        """The configuration an action sets, flag by flag (fixed flags at their starting value)."""
        a = np.asarray(action, dtype=np.int64).reshape(-1)
        free = free_flags(self.rsi)
        base = self.rsi.baseline_config
        return {f: (ladder(self.rsi, f)[int(np.clip(a[k], 0, self.sizes[k] - 1))] if f in free else getattr(base, f))
                for k, f in enumerate(self.rsi.flag_names)}

    def apply(self, action: Any) -> StepResult:
        a = np.asarray(action).reshape(-1)
        if a.shape != (len(self.sizes) + 1,):
            return self.refuse(f"a DirectSetting action has {len(self.sizes) + 1} entries, got shape {a.shape}")
        values = self.values(a)
        try:
            intended: EngineConfig | None = self.rsi.baseline_config.replace(**values)
        except InvalidConfigError:
            intended = None  # the env refuses it with vLLM's message
        obs, reward, terminated, truncated, info = self.env.step(
            {"kind": EDIT, "path": "serving.yaml", "old": "", "new": serving_yaml(values)})
        total = float(reward)
        applied = intended is not None and self.rsi.config == intended
        if applied and not (terminated or truncated) and self.rsi.measured_config != intended \
                and obs["action_mask"][BENCH]:
            obs, reward, terminated, truncated, info = self.env.step({"kind": BENCH})  # the tier does not auto-bench
            total += float(reward)
        if int(a[-1]) == 1 and not (terminated or truncated):
            obs, reward, terminated, truncated, info = self.env.step({"kind": SUBMIT})
            total += float(reward)
        return obs, total, terminated, truncated, info

    def mask(self) -> np.ndarray:
        parts = []
        free = free_flags(self.rsi)
        for f, n in zip(self.rsi.flag_names, self.sizes, strict=True):
            if f in free:
                parts.append(np.ones(n, dtype=np.int8))
            else:
                m = np.zeros(n, dtype=np.int8)
                m[min(max(round(position(self.rsi, self.rsi.baseline_config, f)), 0), n - 1)] = 1
                parts.append(m)
        parts.append(np.ones(2, dtype=np.int8))
        return np.concatenate(parts)
