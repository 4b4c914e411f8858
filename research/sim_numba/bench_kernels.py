"""The cost model's per-iteration pricing, Python against numba, on the calls a real run makes.

Records every `StepCost.step_time` and `StepCost.decode_span_until` call (arguments and results) of one simulation
(default: the golden poisson_1000 trace, llama-3.1-8b, h200, default flags), then replays the same calls three ways in
one process, side by side:

- ``python``: the methods themselves (the memoised `StepCost` of the run);
- ``numba, one call each``: the compiled kernel called from Python per iteration (what a partial port pays: the
  Python-to-native boundary on every call);
- ``numba, one loop``: one compiled call replays all of them from arrays (what the pricing costs inside a whole-loop
  port, with no boundary per iteration).

Every result is compared with ``==`` (wall times, cumulative span times, and the profile's parts after the run).
The compile and cache-load times are measured in fresh subprocesses with an empty, then a warm, ``NUMBA_CACHE_DIR``.

    PYTHONPATH=/tmp/numba_site python3 research/sim_numba/bench_kernels.py [--trace PATH] [--set k=v ...]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

__all__ = ["main"]


def record(model: str, trace: str, flags: dict[str, Any]) -> tuple[Any, list[tuple], list[tuple], float]:
    """One simulation's `step_time` and `decode_span_until` calls: (cost, step calls, span calls, run seconds)."""
    import rsi_env.sim as sim
    from rsi_env.sim.cost import StepCost

    steps: list[tuple] = []
    spans: list[tuple] = []
    costs: list[Any] = []
    orig_step, orig_span = StepCost.step_time, StepCost.decode_span_until

    def step_time(self: Any, *a: Any) -> float:
        if len(a) != 9:
            raise TypeError("the engine calls step_time with 9 positional arguments")
        lin, comm = self._batch(a[0], a[1])
        wall = orig_step(self, *a)
        steps.append((lin, comm) + tuple(a[:8]) + (wall,))
        costs.append(self)
        return wall

    def span(self: Any, *a: Any) -> Any:
        out = orig_span(self, *a)
        spans.append((a, out))
        return out

    StepCost.step_time, StepCost.decode_span_until = step_time, span  # type: ignore[method-assign]
    try:
        t0 = time.process_time()
        sim.simulate(flags, model, "h200", trace)
        elapsed = time.process_time() - t0
    finally:
        StepCost.step_time, StepCost.decode_span_until = orig_step, orig_span  # type: ignore[method-assign]
    return costs[-1], steps, spans, elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-3.1-8b")
    p.add_argument("--trace", default="tests/golden/traces/poisson_1000.yaml")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-compile-timing", action="store_true")
    args = p.parse_args()
    from rsi_env.cli import _parse_sets

    flags = _parse_sets(args.set)
    if not args.no_compile_timing:
        compile_timing()

    import kernels as K

    cost, steps, spans, run_s = record(args.model, args.trace, flags)
    print(f"\n{args.model} {Path(args.trace).stem} {args.set or 'defaults'}: simulate {run_s * 1e3:.1f} ms CPU, "
          f"{len(steps)} step_time calls, {len(spans)} decode_span_until calls")
    ks = K.consts_of(cost)
    combine_mode = int(ks[K.C_COMBINE])

    # step_time: the arguments as arrays for the one-loop replay.
    n = len(steps)
    # steps rows: (lin, comm, num_tokens, num_reqs, num_running, decode_ctx, pairs, pctx, uniform, [num_new], wall)
    cols = list(zip(*steps, strict=False))
    lin, comm = np.array(cols[0], float), np.array(cols[1], float)
    ntok, nreq, nrun = (np.array(cols[i], np.int64) for i in (2, 3, 4))
    dctx, pairs, pctx = (np.array(cols[i], float) for i in (5, 6, 7))
    uni = np.array(cols[8], np.bool_)
    nnew = np.array(cols[9], np.int64)

    from numba import njit

    @njit(cache=False)
    def replay_loop(lin, comm, ntok, nreq, nrun, dctx, pairs, pctx, uni, nnew, k, parts, out):  # type: ignore[no-untyped-def]
        for j in range(lin.shape[0]):
            out[j] = K.step_time_nb(lin[j], comm[j], ntok[j], nreq[j], nrun[j], dctx[j], pairs[j], pctx[j], uni[j],
                                    nnew[j], k, parts)

    def nb_each() -> tuple[list[float], np.ndarray]:
        parts = np.zeros(7)
        f = K.step_time_nb
        walls = [f(lin[j], comm[j], int(ntok[j]), int(nreq[j]), int(nrun[j]), dctx[j], pairs[j], pctx[j],
                   bool(uni[j]), int(nnew[j]), ks, parts) for j in range(n)]
        return walls, parts

    def nb_loop() -> tuple[np.ndarray, np.ndarray]:
        parts = np.zeros(7)
        out = np.empty(n)
        replay_loop(lin, comm, ntok, nreq, nrun, dctx, pairs, pctx, uni, nnew, ks, parts, out)
        return out, parts

    # Python's own argument tuples, unpacked as the engine calls it.
    py_args = [(int(ntok[j]), int(nreq[j]), int(nrun[j]), float(dctx[j]), float(pairs[j]), float(pctx[j]),
                bool(uni[j]), int(nnew[j])) for j in range(n)]

    def py_step() -> tuple[list[float], list[float]]:
        parts = [0.0] * 7
        st = cost.step_time
        return [st(*a, parts) for a in py_args], parts

    # decode_span_until: Python against the compiled loop called per span.
    cap = n_max = 0
    span_args = [a for a, _ in spans]
    for a in span_args:
        n_max = max(n_max, a[3])
    cum_buf, kern_buf = np.empty(max(n_max, 1)), np.empty(max(n_max, 1))
    span_consts = []
    for a in span_args:
        batch, nrun_, ctx0, k_, until = a[0], a[1], a[2], a[3], a[4] if len(a) > 4 else math.inf
        lin_, comm_, overhead, dispatch, cpu, _mode = cost._span(batch, nrun_)
        cap = batch * float(cost._window) if cost._window is not None else math.inf
        span_consts.append((lin_ + comm_, overhead, dispatch, cpu, cap, cost._kv_bytes_per_token / cost._kv_rate,
                            ctx0, batch, k_, until))

    def py_span() -> list[Any]:
        f = cost.decode_span_until
        return [f(*a) for a in span_args]

    def nb_span() -> list[tuple[int, list[float], float]]:
        f = K.decode_span_until_nb
        res = []
        for c in span_consts:
            k_, dt = f(*c, combine_mode, cum_buf, kern_buf)
            res.append((k_, cum_buf[:k_].tolist(), dt))
        return res

    def best(fn: Any) -> tuple[float, Any]:
        b, out = math.inf, None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out = fn()
            b = min(b, time.perf_counter() - t0)
        return b, out

    nb_each(), nb_loop(), nb_span()  # compile / load before timing
    t_py, (w_py, parts_py) = best(py_step)
    t_each, (w_each, parts_each) = best(nb_each)
    t_loop, (w_loop, parts_loop) = best(nb_loop)
    t_pys, s_py = best(py_span)
    t_nbs, s_nb = best(nb_span)

    same_w = w_py == w_each == w_loop.tolist() == [s[-1] for s in steps]
    same_p = parts_py == parts_each.tolist() == parts_loop.tolist()
    same_s = all(a[0] == b[0] and list(map(float, a[1][:a[0]])) == b[1] and a[2] == b[2]
                 for a, b in zip(s_py, s_nb, strict=True))
    us = 1e6
    print(f"  step_time ({n} calls, best of {args.repeat}, wall clock):")
    print(f"    python                  {t_py * 1e3:8.3f} ms  {t_py / n * us:6.3f} us/call")
    print(f"    numba, one call each    {t_each * 1e3:8.3f} ms  {t_each / n * us:6.3f} us/call  "
          f"{t_py / t_each:5.2f}x")
    print(f"    numba, one loop         {t_loop * 1e3:8.3f} ms  {t_loop / n * us:6.3f} us/call  "
          f"{t_py / t_loop:5.1f}x")
    print(f"    wall times identical (==): {same_w}; profile parts identical (==): {same_p}")
    m = len(spans)
    ksum = sum(s[0] for s in s_py)
    print(f"  decode_span_until ({m} spans, {ksum} steps, best of {args.repeat}):")
    print(f"    python                  {t_pys * 1e3:8.3f} ms  {t_pys / max(m, 1) * us:6.3f} us/span")
    print(f"    numba, one call each    {t_nbs * 1e3:8.3f} ms  {t_nbs / max(m, 1) * us:6.3f} us/span  "
          f"{t_pys / t_nbs:5.2f}x")
    print(f"    steps, cumulative times and last step identical (==): {same_s}")
    share = (t_py + t_pys) / run_s
    print(f"  the two pricing calls, Python: {(t_py + t_pys) * 1e3:.2f} ms of simulate's {run_s * 1e3:.1f} ms CPU "
          f"({100 * share:.0f} %, clocks differ: wall against CPU)")


_CHILD = """
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, {here!r})
import numpy as np
import kernels as K
t1 = time.perf_counter()
parts = np.zeros(7); k = np.zeros(K.N_CONSTS); k[7] = k[9] = 1.0
K.step_time_nb(1.0, 0.0, 8, 8, 8, 100.0, 0.0, 0.0, True, 0, k, parts)
cum = np.empty(4); ker = np.empty(4)
K.decode_span_until_nb(1.0, 0.1, 0.0, 0.2, float('inf'), 1e-9, 100.0, 8, 4, float('inf'), 1, cum, ker)
t2 = time.perf_counter()
print(f"{{t1 - t0:.4f}} {{t2 - t1:.4f}}")
"""


def compile_timing() -> None:
    """Import and first-call time of the kernels in fresh processes: empty cache (compiles), then warm (loads)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        code = _CHILD.format(here=str(HERE))
        rows = []
        for label in ("empty cache (compile)", "warm cache (load)", "warm cache (load)"):
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            imp, first = map(float, out.stdout.split())
            rows.append((label, imp, first))
    print("numba kernels in a fresh process (wall clock):")
    for label, imp, first in rows:
        print(f"  {label:24s} import numpy+numba+kernels {imp * 1e3:7.1f} ms, first calls {first * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
