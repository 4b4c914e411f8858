"""Paths an agent's sandbox must not see: hidden checks, reference data, the project's own tests.

Code tasks keep their hidden checks and references in ``rsi_env/catalog/code`` and their reference
solutions in the tests; a sandbox that shows the host's filesystem (bubblewrap) masks both, and the
Docker sandbox masks them inside the read-only package it binds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import rsi_env

__all__ = ["CODE_DIR", "CheckResult", "hidden_paths"]

CODE_DIR = Path(rsi_env.__file__).resolve().parent / "catalog" / "code"


@dataclass(frozen=True)
class CheckResult:
    """One hidden check of a code task: its name, whether it held, and why not (the env shows it as a guard)."""

    name: str
    ok: bool
    reason: str = ""


def hidden_paths() -> list[Path]:
    """The folders to mask: the code tasks' data and, in a source checkout, the tests beside the package."""
    tests = CODE_DIR.parents[2] / "tests"
    return [p for p in (CODE_DIR, tests) if p.is_dir()]
