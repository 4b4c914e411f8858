"""RSI/Kernel-v0's harness on the starting kernels and a reference solution: speedups over PyTorch eager and fast_p.

``python benchmarks/bench_kernel.py [--device cpu|cuda] [--seeds 3] [--sandbox auto] [--solution FILE] [--episodes]``.
Every op is measured by the env's own path (the hidden harness in a fresh sandbox); KernelBench's ``fast_p`` is the
fraction of ops whose kernel is correct and more than ``p`` times as fast as eager. ``--episodes`` then plays
one RSI/Kernel-v0 episode per op on the same device (``tier="real"`` on CUDA): submit the starting kernel, then
the solution, and prints each verdict and reward.
"""

from __future__ import annotations

import argparse
import ast
import math
import time
from pathlib import Path

from rsi_env.tasks.kernel.env import OPS, model_sizes
from rsi_env.tasks.kernel.tier import KERNEL_DIR, measure_kernel

SOLUTION_TEST = Path(__file__).resolve().parents[1] / "tests" / "code_tasks" / "test_kernel.py"


def reference_solution() -> str:
    """The SOLUTION string of the tests (the package never holds one)."""
    tree = ast.parse(SOLUTION_TEST.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SOLUTION" for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise SystemExit("no SOLUTION in the tests")


def fast_p(results: list[tuple[bool, float | None]], p: float) -> float:
    return sum(1 for ok, s in results if ok and s is not None and s > p) / len(results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--sandbox", default="auto", help="auto, docker, bubblewrap or local (the harness's sandbox)")
    ap.add_argument("--solution", type=Path, help="a kernel.py to measure instead of the tests' reference solution")
    ap.add_argument("--episodes", action="store_true", help="also play one env episode per op (start, then solution)")
    args = ap.parse_args()
    sizes = model_sizes(args.model)
    solution = args.solution.read_text() if args.solution else reference_solution()
    seeds = list(range(100, 100 + args.seeds))
    table: dict[str, list[tuple[bool, float | None]]] = {"start": [], "solution": []}
    print(f"{'op':<24} {'kernel':<9} {'correct':<8} {'x eager':>8} {'wall s':>7}")
    for op in OPS:
        for name, src in (("start", (KERNEL_DIR / "templates" / f"{op}.py").read_text()), ("solution", solution)):
            t0 = time.monotonic()
            r = measure_kernel(src, op, seeds, sizes, device=args.device, timed_shapes=args.seeds,
                               backend=args.sandbox, use_cache=False)
            table[name].append((r.correct, r.speedup))
            sp = f"{r.speedup:.2f}" if r.speedup else "-"
            print(f"{op:<24} {name:<9} {str(r.correct):<8} {sp:>8} {time.monotonic() - t0:>7.1f}"
                  + ("" if r.correct else f"  ({r.error})"))
    for name, res in table.items():
        geo = [s for ok, s in res if ok and s]
        g = math.exp(sum(math.log(s) for s in geo) / len(geo)) if geo else float("nan")
        print(f"{name:<9} fast_0={fast_p(res, 0.0):.2f} fast_1.0={fast_p(res, 1.0):.2f} "
              f"fast_1.5={fast_p(res, 1.5):.2f} geomean x eager={g:.2f}")
    if args.episodes:
        episodes(solution, "real" if args.device == "cuda" else "sim", args.sandbox)


def episodes(solution: str, tier: str, sandbox: str) -> None:
    """One episode per op through the env: the unmodified workspace submitted, then the solution."""
    from rsi_env.tasks.kernel.env import KernelEnv

    for op in OPS:
        env = KernelEnv(op=op, tier=tier, sandbox=sandbox)
        for name, edit in (("start", None), ("solution", solution)):
            env.reset(seed=0)
            if edit is not None:
                env.step({"kind": 1, "path": "kernel.py", "old": "", "new": edit})
            _, reward, term, _, info = env.step({"kind": 4})
            verdict = info.get("verdict", {})
            print(f"episode tier={tier} {op:<24} {name:<9} passed={verdict.get('passed')} reward={reward:.3f} "
                  f"terminated={term}")
        env.close()


if __name__ == "__main__":
    main()
