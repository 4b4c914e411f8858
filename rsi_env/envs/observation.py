"""What an `RsiEnv` shows the agent: its spaces, the observation dict and ``info``.

The observation is `docs/architecture.md`'s ``Dict``: ``telemetry`` (ratios to the baseline's
measurement, so that every model and chip reads alike, then the last measurement's profile: each
part's share of the engine's time, `PROFILE_FIELDS`), ``config`` (each flag's place on its ladder),
``budget``, ``action_mask``, ``flag_mask`` and ``text`` (printable ASCII, capped: what the agent reads
of a command, an error or a verdict; a measurement's text names the part that dominates its profile).
"""

from __future__ import annotations

import math
import re
import string
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.profile import PARTS
from rsi_env.engine.task import Task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.envs.actions import BENCH, FLAG, KIND_NAMES
from rsi_env.reward.guards import Verdict

__all__ = ["CHARSET", "EDIT_FIELD_MAX", "OBS_FIELDS", "PROFILE_FIELDS", "TEXT_MAX", "Observing", "action_space",
           "clean", "observation_space"]

# The profile's parts as shares of the engine's time (`rsi_env.engine.profile.Profile.fractions`), raw in [0, 1].
PROFILE_FIELDS = tuple(f"profile_{p}" for p in PARTS)
OBS_FIELDS = ("out_tok_per_s", "goodput_req_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p99",
              "num_preemptions", "prefix_cache_hit_rate", "kv_cache_usage_peak", "mean_batch_size",
              "cost_per_mtok_usd", *PROFILE_FIELDS)
_RATIO = {"out_tok_per_s", "goodput_req_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p99",
          "mean_batch_size", "cost_per_mtok_usd"}
_PROFILE_PART = dict(zip(PROFILE_FIELDS, PARTS, strict=True))
TEXT_MAX = 2048
CHARSET = string.printable
EDIT_FIELD_MAX = 8192  # characters of an edit action's old and new
_OBS_HIGH = 1e3


_NOT_CHARSET = re.compile(f"[^{re.escape(CHARSET)}]")


def clean(text: str) -> str:
    """Text fit for the observation space: printable ASCII, at most TEXT_MAX characters."""
    s = _NOT_CHARSET.sub("?", text)  # each character outside CHARSET becomes "?"
    return s if len(s) <= TEXT_MAX else s[: TEXT_MAX - 15] + "\n...[truncated]"


def _mean(vals: list[float]) -> float:
    """``float(np.mean(vals))``, bit for bit: below 8 values numpy adds them in order from 0 (its pairwise sum
    unrolls from 8 on), as `sum` does."""
    return float(sum(vals) / len(vals)) if 0 < len(vals) < 8 else float(np.mean(vals))


def action_space(n_flags: int) -> spaces.Dict:
    """The action ``Dict`` of an env with ``n_flags`` flag slots (at least one, masked where there are none)."""
    return spaces.Dict({
        "kind": spaces.Discrete(len(KIND_NAMES)),
        "flag": spaces.Discrete(n_flags),
        "value": spaces.Box(0.0, 1.0, shape=(), dtype=np.float32),
        "path": spaces.Text(256, charset=CHARSET),
        "old": spaces.Text(EDIT_FIELD_MAX, min_length=0, charset=CHARSET),
        "new": spaces.Text(EDIT_FIELD_MAX, min_length=0, charset=CHARSET),
        "command": spaces.Text(1024, charset=CHARSET),
    })


def observation_space(n_flags: int, n_telemetry: int) -> spaces.Dict:
    """The observation ``Dict``: telemetry, config, budget, the two masks and the text."""
    return spaces.Dict({
        "telemetry": spaces.Box(0.0, _OBS_HIGH, shape=(n_telemetry,), dtype=np.float32),
        "config": spaces.Box(0.0, 1.0, shape=(n_flags,), dtype=np.float32),
        "budget": spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32),
        "action_mask": spaces.MultiBinary(len(KIND_NAMES)),
        "flag_mask": spaces.MultiBinary(n_flags),
        "text": spaces.Text(TEXT_MAX, min_length=0, charset=CHARSET),
    })


class Observing:
    """The observation and ``info`` of an `RsiEnv`, read from its episode state (mixed into `RsiEnv`)."""

    task: Task
    config: EngineConfig
    flag_names: tuple[str, ...]
    steps: int
    max_steps: int
    measurements: int
    text: str
    last_score: float | None
    best_score: float
    last_tels: list[Telemetry]
    base_tels: list[Telemetry]
    workloads: list[Workload]
    verdict: Verdict | None
    promotion: dict[str, Any] | None
    sandbox_backend: str

    if TYPE_CHECKING:  # Acting's
        def fixed_flags(self) -> set[str]: ...

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
                "text": clean(self.text)}

    def _telemetry_obs(self) -> np.ndarray:
        """The observation's ``telemetry``, one value per `telemetry_fields` entry (here `OBS_FIELDS`)."""
        tel = np.zeros(len(OBS_FIELDS), dtype=np.float32)
        if self.last_tels and all(t.ok for t in self.last_tels):
            shares = [t.profile.fractions() for t in self.last_tels]
            pairs = list(zip(self.last_tels, self.base_tels, shares, strict=True))
            for k, f in enumerate(OBS_FIELDS):
                part = _PROFILE_PART.get(f)
                if part is not None:
                    vals = [share[part] for _, _, share in pairs]
                elif f in _RATIO:
                    vals = []
                    for t, b, _ in pairs:
                        v, bv = float(getattr(t, f)), float(getattr(b, f))
                        vals.append(math.log(max(v, 1e-9) / max(bv, 1e-9)) if bv > 0 and v > 0 else 0.0)
                elif f == "num_preemptions":
                    vals = [math.log1p(float(getattr(t, f))) for t, _, _ in pairs]
                else:
                    vals = [float(getattr(t, f)) for t, _, _ in pairs]
                x = _mean(vals)
                tel[k] = math.exp(x) if f in _RATIO else x
        return tel

    def _info(self) -> dict[str, Any]:
        return {"task": self.task.id, "config": self.config.to_dict(only_set=True), "score": self.last_score,
                "best_score": self.best_score, "measurements": self.measurements, "steps": self.steps,
                "telemetry": [t.to_dict() for t in self.last_tels], "verdict": self._verdict_info(),
                "promotion": self.promotion, "sandbox": self.sandbox_backend}

    def _verdict_info(self) -> dict[str, Any] | None:
        """The submission's verdict as ``info`` shows it: passed, and each guard's result (None before submit)."""
        v = self.verdict
        return None if v is None else {"passed": v.passed, "guards": {g.name: g.ok for g in v.guards}}

    def _tel_text(self, tels: list[Telemetry]) -> str:
        parts = []
        for w, t in zip(self.workloads, tels, strict=True):
            if t.ok:
                bound = t.profile.summary()
                parts.append(f"{w.name}: {t.out_tok_per_s:.0f} tok/s, goodput {t.goodput_req_per_s:.2f} req/s, "
                             f"TTFT p50 {t.ttft_p50 * 1e3:.0f} ms, TPOT p99 {t.tpot_p99 * 1e3:.1f} ms"
                             + (f", {bound}" if bound else ""))
            else:
                parts.append(f"{w.name}: ERROR {t.error}")
        return "; ".join(parts)
