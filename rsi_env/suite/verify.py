"""Judge a finished workspace of an instance from a clean start: what Harbor's ``tests/test.sh`` asks.

A fresh episode of the instance (its env, kwargs and seed); each of the task's editable files found in the
given folder — regular files only, read without following links, size-capped — is brought into the
episode's own workspace by edit actions, as an agent would write it; then submit, which verifies in the
env's own sandboxes. Nothing of the folder runs here, and nothing else of it is read: whatever the agent
left elsewhere (a forged verdict, a patched checker) is never looked at.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rsi_env.engine.safe_io import read_text
from rsi_env.errors import RsiEnvError, SuiteError, UnsafeFileError
from rsi_env.sandbox.workspace import MAX_FILE_BYTES
from rsi_env.suite.agents import submit_unless_ended, write_files
from rsi_env.suite.instance import Instance
from rsi_env.wrappers.ladders import rsi_env_of

__all__ = ["verify_workspace"]


def _agent_files(folder: Path, editable: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    files, skipped = {}, []
    for rel in editable:
        if not os.path.lexists(folder / rel):
            continue
        try:
            files[rel] = read_text(rel, MAX_FILE_BYTES, root=folder)
        except (UnsafeFileError, OSError) as exc:
            skipped.append(f"{rel}: {exc}")
    return files, skipped


def verify_workspace(inst: Instance, folder: Path) -> dict[str, Any]:
    """The rewards of ``folder``'s editable files submitted as a solution of ``inst``: binary and continuous."""
    if not folder.is_dir():
        raise SuiteError(f"verify: {folder} is not a folder")
    env = inst.make_env()
    try:
        env.reset(seed=inst.seed)
        rsi = rsi_env_of(env)
        files, skipped = _agent_files(folder, rsi.task.editable_files)
        try:
            write_files(env, files)
        except RsiEnvError as exc:  # text no edit action can carry: judged as what could be brought in
            skipped.append(str(exc))
        submit_unless_ended(env)
        verdict = rsi.verdict
        binary = 1.0 if verdict is not None and verdict.passed else 0.0
        total = float(sum(rsi.reward_log))
        return {"instance": inst.id, "passed": bool(binary), "reward": binary, "binary": binary,
                "continuous": total - binary, "score": None if verdict is None else verdict.score,
                "files": sorted(files), "skipped": skipped, "verdict": rsi.text}
    finally:
        env.close()
