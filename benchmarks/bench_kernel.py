"""RSI/Kernel's harness on the starting kernels and the reference solution: speedups over PyTorch eager, fast_p, margins.

``python benchmarks/bench_kernel.py [--device cpu|cuda] [--ops a,b] [--dtypes bfloat16,float16,float32] [--seeds 3]
[--timed 2] [--sandbox auto] [--solution FILE] [--episodes]``.
Every op x dtype is measured by the env's own path (the hidden harness in a fresh sandbox, the dtype pinned as
``gym.make("RSI/Kernel-v1", op=..., dtype=...)`` pins it), on as many input sets as submit checks and as many timed
as submit times. ``gain`` is the solution's speedup over the starting kernel's (each against eager in its own run,
as submit compares them) and ``margin`` that gain over the pass threshold (2x the start): the reference passes
reliably only where the margin stays well above 1. KernelBench's ``fast_p`` is the fraction of op x dtype whose
kernel is correct and more than ``p`` times as fast as eager. ``--episodes`` then plays one RSI/Kernel-v1 episode
per op x dtype: submit the starting kernel, then the solution, and prints each verdict and reward.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from rsi_env.tasks.kernel.env import OPS, KernelEnv, model_sizes
from rsi_env.tasks.kernel.reference import SOLUTION
from rsi_env.tasks.kernel.tier import DTYPES, INTEGER_OPS, KERNEL_DIR, measure_kernel

THRESHOLD = 2.0   # RSI/Kernel's improvement_threshold 1.0: submit needs 2x the starting kernel


def fast_p(results: list[tuple[bool, float | None]], p: float) -> float:
    return sum(1 for ok, s in results if ok and s is not None and s > p) / len(results)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--seeds", type=int, default=3, help="input sets checked (submit checks 3)")
    ap.add_argument("--timed", type=int, default=2, help="of which timed (submit times 2)")
    ap.add_argument("--first-seed", type=int, default=1_000_003, help="the first check seed (submit's of reset seed 0)")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--sandbox", default="auto", help="auto, docker, bubblewrap or local (the harness's sandbox)")
    ap.add_argument("--solution", type=Path, help="a kernel.py to measure instead of the package's reference solution")
    ap.add_argument("--episodes", action="store_true", help="also play one env episode per op x dtype")
    args = ap.parse_args()
    sizes = model_sizes(args.model)
    solution = args.solution.read_text() if args.solution else SOLUTION.read_text()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    ops = args.ops.split(",")
    dtypes: list[str | None] = list(args.dtypes.split(","))
    table: dict[str, list[tuple[bool, float | None]]] = {"start": [], "solution": []}
    margins: list[float] = []
    print(f"{'op':<36} {'dtype':<9} {'start':>7} {'solution':>9} {'gain':>6} {'margin':>7} {'GB/s':>6} "
          f"{'peak':>6} {'wall s':>7}")
    for op in ops:
        template = (KERNEL_DIR / "templates" / f"{op}.py").read_text()
        for dtype in [None] if op in INTEGER_OPS else dtypes:   # an integer op has no dtype to pin
            t0 = time.monotonic()
            res = {name: measure_kernel(src, op, seeds, sizes, device=args.device, timed_shapes=args.timed,
                                        backend=args.sandbox, use_cache=False, dtype=dtype,
                                        rounds=KernelEnv.timing_rounds)
                   for name, src in (("start", template), ("solution", solution))}
            for name, r in res.items():
                table[name].append((r.ok, r.speedup))
            start, sol = res["start"], res["solution"]
            gain = sol.speedup / start.speedup if sol.ok and start.ok and sol.speedup and start.speedup else 0.0
            margins.append(gain / THRESHOLD)
            bw = max((t.get("bytes_per_s") or 0.0 for t in sol.timings), default=0.0) / 1e9
            peak = (sol.peak_bytes_per_s or 0.0) / 1e9
            line = (f"{op:<36} {dtype or 'int32':<9} {start.speedup or 0:>7.2f} {sol.speedup or 0:>9.2f} {gain:>6.1f} "
                    f"{gain / THRESHOLD:>7.1f} {bw:>6.1f} {peak:>6.1f} {time.monotonic() - t0:>7.1f}")
            errors = [f"{n}: {r.error}" for n, r in res.items() if not r.ok]
            print(line + (f"  ({'; '.join(errors)[:300]})" if errors else ""), flush=True)
    for name, rows in table.items():
        print(f"{name:<9} fast_0={fast_p(rows, 0.0):.2f} fast_1.0={fast_p(rows, 1.0):.2f} "
              f"fast_1.5={fast_p(rows, 1.5):.2f} geomean x eager={_geomean([s for ok, s in rows if ok and s]):.2f}")
    print(f"margin over the pass threshold: least {min(margins):.1f}, geometric mean "
          f"{_geomean([m for m in margins if m > 0]):.1f} ({sum(m <= 1 for m in margins)} of {len(margins)} at or below 1)")
    if args.episodes:
        episodes(solution, ops, dtypes, "real" if args.device == "cuda" else "sim", args.sandbox)


def episodes(solution: str, ops: list[str], dtypes: list[str | None], tier: str, sandbox: str) -> None:
    """One episode per op x dtype through the env: the unmodified workspace submitted, then the solution."""
    for op in ops:
        for dtype in [None] if op in INTEGER_OPS else dtypes:
            env = KernelEnv(op=op, dtype=dtype, tier=tier, sandbox=sandbox)
            for name, edit in (("start", None), ("solution", solution)):
                env.reset(seed=0)
                if edit is not None:
                    env.step({"kind": 1, "path": "kernel.py", "old": "", "new": edit})
                _, reward, term, _, info = env.step({"kind": 4})
                verdict = info.get("verdict", {})
                print(f"episode tier={tier} {op:<36} {dtype or 'int32':<9} {name:<9} passed={verdict.get('passed')} "
                      f"reward={reward:.3f} terminated={term}")
            env.close()


if __name__ == "__main__":
    main()
