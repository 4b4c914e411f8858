"""The driver process's garbage-collector pauses through a workload, and freezing its heap after the warm-up.

A real-tier driver runs the engine's front end in its own process: vLLM's output processor, SGLang's tokenizer
manager, beside the requests' client. A pass of CPython's cyclic collector over the oldest generation scans every
tracked object of that process (torch, the engine, the client: ~0.7 M objects take ~0.4 s on a 2-core host), and
while it runs the front end forwards nothing: the engine's scheduler receives no new request and streams no token
out. On a closed loop of a few seconds one such pause is a tenth of the measurement. `GcPauses` records every
collection with its generation, start and length on the driver's clock, so a row says whether one fell inside it.

`freeze_heap` is what vLLM does after its server starts (``vllm.utils.gc_utils.freeze_gc_heap``) and what SGLang's
``Engine.freeze_gc`` asks for after a warm-up: the long-lived objects collected once, then frozen, so later
collections scan only what the workload allocates.
"""

from __future__ import annotations

import gc
import time
from argparse import ArgumentParser
from collections.abc import Callable
from types import TracebackType
from typing import Any

__all__ = ["ENGINE_GC", "GC_MODES", "LISTED_S", "GcPauses", "add_gc_option", "freeze_heap", "gc_mode"]

LISTED_S = 0.005  # collections at least this long are listed one by one in the summary; all are counted
GC_MODES = ("live", "frozen")
# Each engine's default mode. SGLang's rows are measured frozen: on the H100 every live closed loop made one
# generation-2 collection of 0.40-0.45 s in the driver, at the samples' longest gap, and the frozen ones none over
# 8 ms and no gap over 0.11 s (research/plans/sglang_lease9.md's rule). vLLM's H200 calibration was fitted on live
# rows, so its driver stays live until a vLLM lease measures both.
ENGINE_GC = {"vllm": "live", "sglang": "frozen"}


def gc_mode(engine: str, mode: str | None = None) -> str:
    """The collector mode a driver of ``engine`` runs: ``mode`` where one is named, else the engine's default."""
    return ENGINE_GC[engine] if mode is None else mode


class GcPauses:
    """Every collection of this process's garbage collector between ``__enter__`` and ``__exit__``.

    ``clock``: the timer the pauses are read on (``time.perf_counter``, the drivers' request clock).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._start: float | None = None
        self.pauses: list[tuple[int, float, float]] = []  # (generation, start, seconds)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = self._clock()
        elif self._start is not None:
            self.pauses.append((int(info.get("generation", -1)), self._start, self._clock() - self._start))
            self._start = None

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def summary(self, t0: float) -> dict[str, Any]:
        """Collections and their total and longest time per generation; each one of at least `LISTED_S` as
        ``[generation, start, seconds]`` with its start relative to ``t0`` (the requests' origin)."""
        out: dict[str, Any] = {"frozen_objects": gc.get_freeze_count(), "generations": {}, "listed": []}
        for gen in sorted({g for g, _, _ in self.pauses}):
            times = [s for g, _, s in self.pauses if g == gen]
            out["generations"][str(gen)] = {"collections": len(times), "total_s": round(sum(times), 6),
                                            "max_s": round(max(times), 6)}
        out["listed"] = [[g, round(t - t0, 4), round(s, 4)] for g, t, s in self.pauses if s >= LISTED_S]
        out["total_s"] = round(sum(s for _, _, s in self.pauses), 6)
        return out


def freeze_heap() -> int:
    """Collect every generation, then freeze what is left (it is never scanned again); returns how many objects
    were frozen. Only for a driver process after its warm-up: frozen objects are never freed."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def add_gc_option(parser: ArgumentParser, engine: str) -> None:
    """A driver's ``--gc``: ``live`` or ``frozen`` after the warm-up; the default is the engine's (`ENGINE_GC`)."""
    parser.add_argument("--gc", choices=GC_MODES, default=gc_mode(engine),
                        help="live: the processes' garbage collectors as the engine starts them; frozen: after the "
                             "warm-up, their long-lived heaps frozen (this process's, and the engine's own where it "
                             "offers it), so no pass over them stalls the front end mid-workload")
