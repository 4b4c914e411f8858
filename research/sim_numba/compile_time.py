"""numba's cost to a fresh process: import, then the first `loop_group.run_compiled` call, with an empty
``NUMBA_CACHE_DIR`` (it compiles) and then the same, warm, directory (it loads), three processes each way.

    PYTHONPATH=/tmp/numba_site python3 research/sim_numba/compile_time.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]

HERE = Path(__file__).resolve().parent

CHILD = f"""
import sys, time
sys.path.insert(0, {str(HERE)!r})
sys.path.insert(1, {str(HERE.parents[1])!r})
import bench_loop
got = bench_loop.inputs("llama-3.1-8b", "tests/golden/traces/poisson_100.yaml", [])
t0 = time.perf_counter()
import loop_group
t1 = time.perf_counter()
loop_group.run_compiled(*got)
t2 = time.perf_counter()
loop_group.run_compiled(*got)
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ["empty cache"] + ["warm cache"] * 2:
            if label == "empty cache":
                for f in Path(cache).glob("**/*"):
                    f.unlink() if f.is_file() else None
            out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
            imp, first, second = map(float, out.stdout.split()[-3:])
            print(f"{label:12s} import numba+loop_group {imp * 1e3:7.0f} ms, first call {first * 1e3:7.0f} ms, "
                  f"second call {second * 1e3:6.2f} ms (wall; poisson_100)")


if __name__ == "__main__":
    main()
