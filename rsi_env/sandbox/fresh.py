"""`run_fresh`: run trusted files (a check, a harness) with an agent's file in a new, empty sandbox.

Hidden checks and measurements of an agent's code never run in the agent's own sandbox, where earlier
commands may have left processes or files behind: each gets a fresh folder holding only the files
given, a fresh sandbox of the chosen backend over it, and both are gone afterwards. Only the named
output files are read back, each size-capped.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rsi_env.sandbox.backends import make_sandbox
from rsi_env.sandbox.base import Limits, ShellResult

__all__ = ["FreshRun", "run_fresh"]

MAX_READ_BYTES = 32 << 20


@dataclass(frozen=True)
class FreshRun:
    """The command's result and the output files it left (None where missing, too large or not a file)."""

    result: ShellResult
    outputs: dict[str, bytes | None] = field(default_factory=dict)


def run_fresh(files: Mapping[str, str | bytes], command: str, *, backend: str = "auto", timeout_s: float = 60.0,
              max_output: int = 16384, read: Sequence[str] = (), limits: Limits | None = None,
              hidden: Sequence[Path | str] = ()) -> FreshRun:
    """Write ``files`` into a new folder, run ``command`` there in a new sandbox, read back ``read``.

    ``command`` may use ``{python}``: the interpreter of the sandbox.
    """
    root = Path(tempfile.mkdtemp(prefix="rsi-fresh-")).resolve()
    try:
        for rel, content in files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                p.write_bytes(content)
            else:
                p.write_text(content)
        with make_sandbox(backend, root, limits=limits, hidden=hidden) as sb:
            res = sb.run(command.replace("{python}", sb.python), timeout_s=timeout_s, max_output=max_output)
        outputs: dict[str, bytes | None] = {}
        for rel in read:
            p = root / rel
            ok = p.is_file() and not p.is_symlink() and p.resolve().parent == root and p.stat().st_size <= MAX_READ_BYTES
            outputs[rel] = p.read_bytes() if ok else None
        return FreshRun(res, outputs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
