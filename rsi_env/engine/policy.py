"""`PolicyKeys`: a scheduling policy's keys for the requests of one trace, as both tiers take them.

A policy (RSI/Scheduler-v0's ``policy.py``) gives each request a ``waiting_key`` (smaller runs first) and a
``victim_key`` (the largest is preempted first); the sim tier orders its queues by them and the real tier
hands them to vLLM's priority scheduler. They come from a sandboxed process, so they are validated here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rsi_env.errors import PolicyError

__all__ = ["PolicyKeys"]


@dataclass(frozen=True)
class PolicyKeys:
    """One policy's keys for the requests of one trace, by request id."""

    waiting: np.ndarray
    victim: np.ndarray

    @classmethod
    def parse(cls, raw: Any, n: int, where: str) -> PolicyKeys:
        """Validate what a sandboxed policy returned: ``{"waiting": [n numbers], "victim": [n numbers]}``."""
        if not isinstance(raw, dict):
            raise PolicyError(f"{where}: expected {{'waiting': [...], 'victim': [...]}}, got {type(raw).__name__}")
        out = []
        for name in ("waiting", "victim"):
            vals = raw.get(name)
            if not isinstance(vals, list) or len(vals) != n:
                got = len(vals) if isinstance(vals, list) else type(vals).__name__
                raise PolicyError(f"{where}: {name}_key must give one number per request ({n}), got {got}")
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals):
                raise PolicyError(f"{where}: every {name}_key must be a finite number")
            out.append(np.asarray(vals, dtype=np.float64))
        return cls(out[0], out[1])
