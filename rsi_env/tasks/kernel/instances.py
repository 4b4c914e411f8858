"""RSI/Kernel-v1's instances for the benchmark suite: every op x dtype, each on its model's shapes, reset seed 0.

The dense ops take Llama-3.1-8B's sizes (the task's default model), the MoE ops Qwen3-30B-A3B's (128 experts,
top-8), and ``moe_align_block_size`` has no dtype to pin. The reset seed draws each input set's batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rsi_env.tasks.kernel.env import OPS, KernelEnv
from rsi_env.tasks.kernel.tier import DTYPES, INTEGER_OPS

__all__ = ["FAMILY", "MOE_MODEL", "suite_instances"]

FAMILY = "Kernel"
MOE_MODEL = "qwen3-30b-a3b"
_MOE_OPS = ("moe_sum", "moe_align_block_size")


def suite_instances() -> Iterator[tuple[str, str, dict[str, Any], int]]:
    """``(name, env id, env kwargs, reset seed)`` of each op x dtype."""
    for op in OPS:
        model = {"model": MOE_MODEL} if op in _MOE_OPS else {}
        for dtype in (None,) if op in INTEGER_OPS else DTYPES:
            yield f"{op}-{dtype or 'int32'}-s0", KernelEnv.task_id, {"op": op, "dtype": dtype, **model}, 0
