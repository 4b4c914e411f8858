"""An episode's workspace: a private folder whose editable files an agent may change, and nothing else.

Every path is resolved (``..`` and symlinks included) and must land inside the workspace and in
the task's list of editable files; files are text, size-capped; an edit replaces ``old`` by ``new``
only where ``old`` occurs exactly once (``old == ""`` writes the whole file). Each refusal is an
`EditError` whose message says why, for the observation's text.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from rsi_env.errors import RsiEnvError

__all__ = ["EditError", "Workspace", "MAX_FILE_BYTES"]

MAX_FILE_BYTES = 256 * 1024


class EditError(RsiEnvError):
    """An edit the workspace refuses (outside, not editable, not text, too large, ambiguous)."""


class Workspace:
    """A temporary folder for one episode; ``editable`` are paths relative to it."""

    def __init__(self, editable: Iterable[str], prefix: str = "rsi-ws-") -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
        self.editable = frozenset(editable)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- paths -------------------------------------------------------------------------------------
    def resolve(self, path: str, *, for_edit: bool = True) -> Path:
        """The absolute path of ``path`` inside the workspace, or `EditError` saying why not."""
        if not isinstance(path, str) or not path.strip():
            raise EditError("edit refused: empty path")
        if "\x00" in path:
            raise EditError("edit refused: the path contains a NUL byte")
        raw = Path(path)
        target = (raw if raw.is_absolute() else self.root / raw).resolve()
        if target != self.root and self.root not in target.parents:
            raise EditError(f"edit refused: {path!r} resolves to {target}, outside the workspace")
        rel = target.relative_to(self.root).as_posix()
        if for_edit and rel not in self.editable:
            raise EditError(f"edit refused: {rel!r} is not editable in this task; editable: {sorted(self.editable)}")
        return target

    # ---- files -------------------------------------------------------------------------------------
    def write(self, rel: str, text: str) -> None:
        """Write a file as the environment (not the agent): no editable check."""
        p = self.resolve(rel, for_edit=False)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def read(self, rel: str) -> str:
        p = self.resolve(rel, for_edit=False)
        if p.is_symlink() or not p.is_file():
            raise EditError(f"{rel!r} is not a regular file in the workspace")
        return p.read_text(errors="replace")

    def edit(self, path: str, old: str, new: str) -> str:
        """Apply an agent's edit; returns the workspace-relative path it changed."""
        target = self.resolve(path)
        if not isinstance(old, str) or not isinstance(new, str):
            raise EditError("edit refused: old and new must be text")
        if "\x00" in new:
            raise EditError("edit refused: the new text contains a NUL byte (text files only)")
        if target.is_symlink():
            raise EditError(f"edit refused: {path!r} is a symbolic link")
        if old == "":
            text = new
        else:
            if not target.is_file():
                raise EditError(f"edit refused: {path!r} does not exist; use old='' to write a new file")
            current = target.read_text(errors="replace")
            count = current.count(old)
            if count != 1:
                raise EditError(f"edit refused: the old text occurs {count} times in {path!r}; it must occur exactly once")
            text = current.replace(old, new, 1)
        if len(text.encode()) > MAX_FILE_BYTES:
            raise EditError(f"edit refused: {path!r} would be {len(text.encode())} bytes; the cap is {MAX_FILE_BYTES}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return target.relative_to(self.root).as_posix()
