"""Send a trace's requests on its schedule: at their arrival times (open loop) or as slots free up (closed loop).

Shared by every client that drives a real engine (the in-process driver and the endpoint mode), so
both send the same requests at the same moments as the simulator assumes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from rsi_env.engine.workload import Trace

__all__ = ["run_schedule"]


async def run_schedule(trace: Trace, one: Callable[[int, float], Coroutine[Any, Any, None]], t0: float) -> None:
    """Await ``one(i, t0)`` for every request ``i``, started as the trace's arrival process says."""
    n = len(trace)
    if trace.closed_concurrency:
        queue = iter(range(n))

        async def worker() -> None:
            for i in queue:
                await one(i, t0)

        await asyncio.gather(*(worker() for _ in range(min(trace.closed_concurrency, n))))
        return
    tasks: list[asyncio.Task[None]] = []
    for i in range(n):
        delay = float(trace.arrival_s[i]) - (time.perf_counter() - t0)
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, t0)))
    await asyncio.gather(*tasks)
