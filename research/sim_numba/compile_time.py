"""numba's cost to a fresh process: import, then the first `run_compiled` call (`loop_group`, or ``--loop
loop_full``), with an empty
``NUMBA_CACHE_DIR`` (it compiles) and then the same, warm, directory (it loads), three processes each way.

    PYTHONPATH=/tmp/numba_site python3 research/sim_numba/compile_time.py [--loop loop_full]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]

HERE = Path(__file__).resolve().parent

CHILD = """
import sys, time
sys.path.insert(0, {here!r})
sys.path.insert(1, {root!r})
import bench_loop
got = bench_loop.inputs("llama-3.1-8b", "tests/golden/traces/poisson_100.yaml", [])
t0 = time.perf_counter()
import {loop} as mod
t1 = time.perf_counter()
mod.run_compiled(*got)
t2 = time.perf_counter()
mod.run_compiled(*got)
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loop", default="loop_group", choices=("loop_group", "loop_full"))
    args = p.parse_args()
    child = CHILD.format(here=str(HERE), root=str(HERE.parents[1]), loop=args.loop)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ["empty cache"] + ["warm cache"] * 2:
            if label == "empty cache":
                for f in Path(cache).glob("**/*"):
                    f.unlink() if f.is_file() else None
            out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, check=True)
            imp, first, second = map(float, out.stdout.split()[-3:])
            print(f"{label:12s} import numba+{args.loop} {imp * 1e3:7.0f} ms, first call {first * 1e3:7.0f} ms, "
                  f"second call {second * 1e3:6.2f} ms (wall; poisson_100)")


if __name__ == "__main__":
    main()
