"""Where the code tasks keep what an agent must not see, and the result of one hidden check.

Hidden checks and references live in ``rsi_env/catalog/code``. No sandbox binds that folder (the
sandbox is an allowlist, `rsi_env.sandbox.profile`), so nothing has to mask it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import rsi_env

__all__ = ["CODE_DIR", "CheckResult"]

CODE_DIR = Path(rsi_env.__file__).resolve().parent / "catalog" / "code"


@dataclass(frozen=True)
class CheckResult:
    """One hidden check of a code task: its name, whether it held, and why not (the env shows it as a guard)."""

    name: str
    ok: bool
    reason: str = ""
