"""`EngineSim.run` against its compiled ports (`loop.py`, `loop_group.py`), side by side, ``==`` on every result.

For each case: the engine's inputs are taken from `simulate_detailed` (config, cost model, capped trace, blocks),
then `EngineSim(...).run()` (record_steps=False, as `simulate` runs it) and each port's `run_compiled` run ``--repeat``
times in this process (CPU time, fastest), and every result field and profile part is compared with ``==`` (NaN
equal to NaN). The first call of the port (numba's compile or cache load) is timed apart.

    PYTHONPATH=/tmp/numba_site python3 research/sim_numba/bench_loop.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

__all__ = ["main"]

CASES = [
    ("llama-3.1-8b", "tests/golden/traces/poisson_1000.yaml", []),
    ("llama-3.1-8b", "tests/golden/traces/poisson_100.yaml", []),
    ("llama-3.1-8b", "tests/golden/traces/poisson_10000.yaml", []),
    ("llama-3.1-8b", "tests/golden/traces/burst_1000.yaml", []),
    ("llama-3.1-8b", "tests/golden/traces/poisson_1000.yaml", ["max_num_seqs=32", "max_num_batched_tokens=2048"]),
    ("llama-3.1-8b", "tests/golden/traces/poisson_1000.yaml", ["kv_cache_dtype=fp8", "enable_prefix_caching=false",
                                                               "block_size=32"]),
    ("llama-3.1-70b", "tests/golden/traces/poisson_1000.yaml", ["tensor_parallel_size=2"]),
    ("llama-3.1-8b", "tests/golden/traces/closed_1000.yaml", []),
    ("llama-3.1-8b", "short_long", []),
    ("llama-3.1-8b", "rag_chat", []),
]


def inputs(model: str, workload: str, flags: list[str]) -> tuple[Any, Any, Any, int] | None:
    from rsi_env.cli import _parse_sets
    from rsi_env.sim import simulate_detailed
    from rsi_env.sim.engine import EngineSim

    got: list[tuple[Any, Any, Any, int]] = []

    def capture(cfg: Any, cost: Any, trace: Any, blocks: int, check: bool, record_steps: bool = True) -> EngineSim:
        got.append((cfg, cost, trace, blocks))
        return EngineSim(cfg, cost, trace, blocks, check, record_steps)

    simulate_detailed(_parse_sets(flags), model, "h200", workload, engine_cls=capture, record_steps=False)
    return got[0] if len(got) == 1 else None


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and a.dtype.kind == b.dtype.kind and bool(np.array_equal(a, b, equal_nan=True))
    return bool(a == b) and type(a) is type(b)


def main() -> None:
    from rsi_env.sim.engine import EngineSim

    t0 = time.perf_counter()
    import loop
    import loop_group
    t_import = time.perf_counter() - t0
    repeat = 5
    first_call = None
    print(f"import numba + loop.py: {t_import * 1e3:.0f} ms wall")
    print(f"{'case':58s} {'python':>9s} {'loop.py':>9s} {'ratio':>6s} {'group':>9s} {'ratio':>6s}  identical (==)")
    for model, wl, flags in CASES:
        got = inputs(model, wl, flags)
        label = f"{model}/{Path(wl).stem}/{','.join(flags) or 'defaults'}"
        if got is None:
            print(f"{label:58s} skipped: data-parallel split")
            continue
        cfg, cost, trace, blocks = got
        if not loop.supported(cfg, cost, trace, closed=True):
            print(f"{label:58s} outside the port's subset")
            continue
        if first_call is None:
            for mod in (loop, loop_group):
                t0 = time.perf_counter()
                mod.run_compiled(cfg, cost, trace, blocks)
                first_call = time.perf_counter() - t0
                print(f"first {mod.__name__}.run_compiled call (compile or cache load, and one run): "
                      f"{first_call * 1e3:.0f} ms wall")
        tp = ta = tb = float("inf")
        for _ in range(repeat):
            t0 = time.process_time()
            ref = EngineSim(cfg, cost, trace, blocks, False, record_steps=False).run()
            tp = min(tp, time.process_time() - t0)
            t0 = time.process_time()
            got_a = (loop.run_compiled(cfg, cost, trace, blocks) if loop.supported(cfg, cost, trace)
                     else ({}, [], -1))
            ta = min(ta, time.process_time() - t0)
            t0 = time.process_time()
            got_b = loop_group.run_compiled(cfg, cost, trace, blocks)
            tb = min(tb, time.process_time() - t0)
        verdicts = []
        for res, prof, status in (got_a, got_b):
            if status:
                verdicts.append(f"stopped: status {status} (its time is not a run's)")
                continue
            cost.engine_cpu_rest(prof, res["busy_time"])
            bad = [f for f, v in res.items() if not same(getattr(ref, f), v)]
            if list(ref.profile.__dict__.values()) != prof:
                bad.append("profile")
            if ref.num_preemptions or ref.prefix_hits:
                bad.append("preemptions/hits nonzero")
            verdicts.append(f"yes ({len(res) + 1} fields)" if not bad else "NO: " + ", ".join(bad))
        print(f"{label:58s} {tp * 1e3:7.2f}ms {ta * 1e3:7.3f}ms {tp / ta:5.0f}x {tb * 1e3:7.3f}ms {tp / tb:5.0f}x  "
              f"{' / '.join(verdicts)}")


if __name__ == "__main__":
    main()
