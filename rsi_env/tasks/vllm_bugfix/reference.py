"""RSI/VLLMBugFix-v0's reference solution: the instance's files as the installed vLLM and the task's deployment have them.

Hidden with the rest of `rsi_env.tasks` (no sandbox sees it): the benchmark suite's reference agent writes these
files over the workspace's with edit actions and submits.
"""

from __future__ import annotations

from rsi_env.errors import RsiEnvError
from rsi_env.tasks.vllm_bugfix.env import VLLMBugFixEnv
from rsi_env.tasks.vllm_bugfix.generator import base_files

__all__ = ["reference_files"]


def reference_files(env: VLLMBugFixEnv) -> dict[str, str]:
    """After ``env.reset(seed=...)``: ``engine_args.yaml`` and the instance's modules, clean (relative path -> text)."""
    inst = env.instance
    if inst is None:
        raise RsiEnvError("reference_files needs an episode: call env.reset(seed=...) first")
    return base_files(inst.mutations)
