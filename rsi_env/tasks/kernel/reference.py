"""RSI/Kernel's reference solution, as the workspace files that solve an instance.

Hidden with the rest of `rsi_env.tasks` (no sandbox sees it): the benchmark suite's reference agent and the
Harbor export write these files over the workspace's and submit. The solution (``solution.py``, beside this
file) is one ``kernel.py`` for every op, dtype and shape.
"""

from __future__ import annotations

from pathlib import Path

from rsi_env.errors import RsiEnvError
from rsi_env.tasks.kernel.env import KERNEL_FILE, OPS, KernelEnv

__all__ = ["SOLUTION", "reference_files"]

SOLUTION = Path(__file__).with_name("solution.py")


def reference_files(env: KernelEnv) -> dict[str, str]:
    """``kernel.py`` solving the op of ``env`` (reset or not: the solution holds for every seed and dtype)."""
    if env.op not in OPS:
        raise RsiEnvError(f"no reference solution for op {env.op!r}")
    return {KERNEL_FILE: SOLUTION.read_text()}
