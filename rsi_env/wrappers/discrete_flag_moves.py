"""`DiscreteFlagMoves`: one notch up or down a flag's ladder, bench, or submit — a `Discrete` action.

The smallest action vocabulary a policy can learn a flag task with. Action ``2*k`` lowers flag
``k`` (of ``env.unwrapped.flag_names``) one notch on the task's ladder, ``2*k + 1`` raises it,
``2*n`` measures (bench) and ``2*n + 1`` submits. A flag left at vLLM's default sits on its ladder
where vLLM's resolved value sits, so "raise ``max_num_seqs``" from the default 1024 sets 2048.

The observation's ``action_mask`` has one entry per action: a move is masked when it would leave
the ladder, touch a flag the task fixes (``flag_mask``), or produce a configuration the env would
refuse (vLLM's own refusals through `EngineConfig.resolve`, or more GPUs than the episode has);
bench is masked once the measurement budget is spent. A masked move sent anyway spends a step, is
refused with the reason in the text, and changes nothing.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rsi_env.envs.actions import BENCH, SUBMIT
from rsi_env.errors import InvalidConfigError
from rsi_env.wrappers.ladders import config_at, free_flags, ladder, refusal, rsi_env_of, step_index
from rsi_env.wrappers.masked import MaskedActions, StepResult

__all__ = ["DiscreteFlagMoves"]


class DiscreteFlagMoves(MaskedActions, gym.utils.RecordConstructorArgs):
    """``Discrete(2 * n_flags + 2)``: lower/raise each flag one notch, bench, submit; invalid moves masked."""

    def __init__(self, env: gym.Env[dict[str, Any], dict[str, Any]]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        n = len(rsi_env_of(env).flag_names)
        super().__init__(env, spaces.Discrete(2 * n + 2), 2 * n + 2)
        self.n_flags = n

    def describe(self, action: int) -> str:
        """The move in words, e.g. ``raise max_num_seqs``."""
        a = int(action)
        if a == 2 * self.n_flags:
            return "bench"
        if a == 2 * self.n_flags + 1:
            return "submit"
        return f"{'raise' if a % 2 else 'lower'} {self.rsi.flag_names[a // 2]}"

    def _move(self, action: int) -> tuple[dict[str, Any] | None, str]:
        """The env action of a flag move, or ``None`` and why the move is not allowed."""
        env = self.rsi
        flag = env.flag_names[action // 2]
        if flag not in free_flags(env):
            return None, f"{flag} is fixed in {env.task.id}"
        i = step_index(env, env.config, flag, +1 if action % 2 else -1)
        if i is None:
            return None, f"{flag} is at the end of its ladder {list(ladder(env, flag))}"
        try:
            why = refusal(env, config_at(env, {flag: i}))
        except InvalidConfigError as exc:
            why = str(exc)
        if why is not None:
            return None, why
        return env.flag_action(flag, ladder(env, flag)[i]), ""

    def apply(self, action: Any) -> StepResult:
        a = int(action)
        if not 0 <= a < 2 * self.n_flags + 2:
            return self.refuse(f"move {a} is out of range 0..{2 * self.n_flags + 1}")
        if a == 2 * self.n_flags:
            if not self.kind_mask[BENCH]:
                return self.refuse("bench is masked: the measurement budget is spent")
            return self.env.step({"kind": BENCH})
        if a == 2 * self.n_flags + 1:
            return self.env.step({"kind": SUBMIT})
        act, why = self._move(a)
        if act is None:
            return self.refuse(f"{self.describe(a)} is masked: {why}")
        return self.env.step(act)

    def mask(self) -> np.ndarray:
        m = np.zeros(2 * self.n_flags + 2, dtype=np.int8)
        for a in range(2 * self.n_flags):
            m[a] = self._move(a)[0] is not None
        m[2 * self.n_flags] = self.kind_mask[BENCH]
        m[2 * self.n_flags + 1] = 1
        return m
