"""`Profile`: where a measurement's time went, in seven named parts (`PARTS`), on either tier.

An observation says how fast the engine was; its profile says why. A run's engine time, from its first
arrival to its last output, is split into what the device was busy with and what it waited for:

- ``weights``: the layers' dense work, weights streamed through the GEMMs, and the kernels around them
  (norms, activations, rotary embedding, sampling);
- ``attention``: attention over the prompt tokens computed in the step (prefill FLOPs);
- ``kv_read``: the paged KV cache read by decoding requests (and written by the cache ops);
- ``comm``: tensor- and pipeline-parallel collectives;
- ``engine_cpu``: the device waiting for the engine core's own CPU work outside the model's execution
  (scheduling, processing outputs, admitting requests);
- ``launch``: the device waiting for the host to launch the model's kernels (eager kernels called from Python,
  pieces outside a CUDA graph, a step's fixed launch cost);
- ``idle``: nothing to run: waiting for requests to arrive.

Seconds per part are summed over the run; `Profile.fractions` divides by their total. A failed
measurement's profile is empty (all zeros). The sim prices each part from its cost model's terms
(`rsi_env.sim.cost.StepCost.step_time`); the real tier aggregates a profiler trace of the engine's
steps by kernel and op name (`rsi_env.real.profile_trace`); docs/fidelity.md says how each tier counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["PARTS", "PART_LABELS", "Profile"]

PARTS = ("weights", "attention", "kv_read", "comm", "engine_cpu", "launch", "idle")
# What a run dominated by each part is: "launch-bound: 41 % of step time".
PART_LABELS = {"weights": "GEMM-bound", "attention": "attention-bound", "kv_read": "KV-read-bound",
               "comm": "communication-bound", "engine_cpu": "engine-CPU-bound", "launch": "launch-bound",
               "idle": "idle"}


@dataclass(frozen=True)
class Profile:
    """Seconds of a measurement's engine time per part (`PARTS`, in that order); all zero when nothing was profiled."""

    weights: float = 0.0
    attention: float = 0.0
    kv_read: float = 0.0
    comm: float = 0.0
    engine_cpu: float = 0.0
    launch: float = 0.0
    idle: float = 0.0

    @classmethod
    def from_seconds(cls, seconds: Sequence[float]) -> Profile:
        """A profile from seconds listed in `PARTS` order."""
        if len(seconds) != len(PARTS):
            raise ValueError(f"a profile has {len(PARTS)} parts {PARTS}, got {len(seconds)} numbers")
        return cls.from_dict(dict(zip(PARTS, seconds, strict=True)))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | Profile | None) -> Profile:
        """A profile from ``{part: seconds}`` (missing parts 0; None or empty: the empty profile).

        Refuses (``ValueError``) a part it does not know or a value that is not a finite, non-negative number:
        a profile may come from a process that ran someone else's code.
        """
        if raw is None:
            return cls()
        if isinstance(raw, Profile):
            return raw
        if not isinstance(raw, Mapping):
            raise ValueError(f"a profile is a mapping of part to seconds, not {type(raw).__name__}")
        unknown = set(raw) - set(PARTS)
        if unknown:
            raise ValueError(f"unknown profile parts {sorted(unknown)}; the parts are {PARTS}")
        vals = {}
        for k, v in raw.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"profile part {k}={v!r} is not a finite number of seconds >= 0")
            vals[k] = float(v)
        return cls(**vals)

    @classmethod
    def total_of(cls, profiles: Iterable[Profile]) -> Profile:
        """The part-by-part sum of several profiles (engine replicas, or workloads of one run)."""
        sums = [0.0] * len(PARTS)
        for p in profiles:
            for k, v in enumerate(p.seconds()):
                sums[k] += v
        return cls(*sums)

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def seconds(self) -> tuple[float, ...]:
        """Seconds per part, in `PARTS` order (field by field: no recursive copy, for what every env step reads)."""
        return tuple(getattr(self, k) for k in PARTS)

    @property
    def total_s(self) -> float:
        """Every part: the engine's time from the first arrival to the last output."""
        return math.fsum(self.seconds())

    @property
    def busy_s(self) -> float:
        """Every part but ``idle``: the time the engine was stepping."""
        return self.total_s - self.idle

    @property
    def empty(self) -> bool:
        return self.total_s <= 0.0

    def fractions(self) -> dict[str, float]:
        """Each part's share of the total (summing to 1; all 0 for an empty profile)."""
        total = self.total_s
        return {k: (v / total if total > 0 else 0.0) for k, v in zip(PARTS, self.seconds(), strict=True)}

    def bound(self) -> tuple[str, float] | None:
        """The part that dominates and its share: ``idle`` of the whole run when the engine idled at least half of
        it, else the largest busy part's share of step (busy) time. None for an empty profile."""
        total = self.total_s
        if total <= 0.0:
            return None
        if self.idle >= 0.5 * total:
            return "idle", self.idle / total
        busy = self.busy_s
        part = max(PARTS[:-1], key=lambda k: getattr(self, k))
        return part, (getattr(self, part) / busy if busy > 0 else 0.0)

    def summary(self) -> str:
        """One phrase naming the dominant part: ``launch-bound: 41 % of step time`` (empty when nothing was profiled)."""
        b = self.bound()
        if b is None:
            return ""
        part, share = b
        if part == "idle":
            return f"idle: {share * 100:.0f} % of the run waiting for arrivals"
        return f"{PART_LABELS[part]}: {share * 100:.0f} % of step time"
