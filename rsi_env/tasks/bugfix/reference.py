"""RSI/BugFix-v0's reference solution: the clean workspace's engine modules (`templates.clean_workspace`), bugs undone.

Hidden with the rest of `rsi_env.tasks` (no sandbox sees it): the benchmark suite's reference agent and the
Harbor export write these files over the workspace's and submit.
"""

from __future__ import annotations

from rsi_env.tasks.bugfix.env import BugFixEnv
from rsi_env.tasks.bugfix.templates import ENGINE_FILES, clean_workspace

__all__ = ["reference_files"]


def reference_files(env: BugFixEnv) -> dict[str, str]:
    """The clean engine modules (the instance's bugs are in these files only; the visible tests are untouched)."""
    clean = clean_workspace()
    return {f: clean[f] for f in ENGINE_FILES}
