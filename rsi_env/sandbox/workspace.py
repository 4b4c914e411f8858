"""An episode's workspace: a private folder whose editable files an agent may change, and nothing else.

Every path is resolved (``..`` and symlinks included) and must land inside the workspace and in
the task's list of editable files; files are text, size-capped; an edit replaces ``old`` by ``new``
only where ``old`` occurs exactly once (``old == ""`` writes the whole file). Each refusal is an
`EditError` whose message says why, for the observation's text.

The agent's shell can replace any file or folder here, so every read and write goes through
`rsi_env.engine.safe_io`: no link is followed in any component, a FIFO or device never blocks,
only regular files within the cap are read, and the env's own writes replace whatever the agent
left at the name. The folder is removed by `close`, or when the workspace is garbage-collected.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import weakref
from collections.abc import Iterable
from pathlib import Path

from rsi_env.engine.safe_io import read_text, shorten, write_text
from rsi_env.errors import EditError, UnsafeFileError

__all__ = ["EditError", "Workspace", "MAX_FILE_BYTES"]

MAX_FILE_BYTES = 256 * 1024


def remove_tree(root: Path) -> None:
    """Remove ``root`` and all in it; links inside are removed, never followed.

    A folder the agent made unreadable is opened up (0o700) to be removed, and only folders inside ``root``: the
    folder holding ``root`` (``/tmp``, say) is never touched, even when ``root`` itself is gone or cannot be read.
    """
    top = os.path.abspath(root)

    def writable(func: object, path: str, exc_info: object) -> None:
        for p in (os.path.dirname(path), path):
            if os.path.abspath(p).startswith(top + os.sep) or os.path.abspath(p) == top:
                with contextlib.suppress(OSError):
                    if stat.S_ISDIR(os.lstat(p).st_mode):
                        os.chmod(p, 0o700)
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)

    shutil.rmtree(top, onerror=writable)


class Workspace:
    """A temporary folder for one episode; ``editable`` are paths relative to it."""

    def __init__(self, editable: Iterable[str], prefix: str = "rsi-ws-") -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
        self.editable = frozenset(editable)
        self._remove = weakref.finalize(self, remove_tree, self.root)  # also when dropped without close()

    def close(self) -> None:
        self._remove()

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
        try:
            target = (raw if raw.is_absolute() else self.root / raw).resolve()
        except (RuntimeError, OSError) as exc:  # a link loop the agent made, a name too long
            raise EditError(f"edit refused: {shorten(path)!r} cannot be resolved ({exc})") from None
        if target != self.root and self.root not in target.parents:
            raise EditError(f"edit refused: {shorten(path)!r} resolves to {shorten(str(target))}, outside the workspace")
        rel = target.relative_to(self.root).as_posix()
        if for_edit and rel not in self.editable:
            raise EditError(f"edit refused: {shorten(rel)!r} is not editable in this task; "
                            f"editable: {sorted(self.editable)}")
        return target

    def _relative(self, path: str, *, for_edit: bool) -> str:
        """``path`` relative to the workspace, checked by `resolve`, and reached through no link."""
        target = self.resolve(path, for_edit=for_edit)
        raw = Path(path)
        lexical = Path(os.path.normpath(raw if raw.is_absolute() else self.root / raw))
        rel = target.relative_to(self.root).as_posix()
        if lexical != target:
            raise EditError(f"edit refused: {shorten(path)!r} goes through a symbolic link (to {shorten(rel)!r})")
        return rel

    # ---- files -------------------------------------------------------------------------------------
    def write(self, rel: str, text: str) -> None:
        """Write a file as the environment (not the agent): no editable check; whatever is at the name is replaced."""
        try:
            write_text(self.root, os.path.normpath(rel), text)
        except UnsafeFileError as exc:
            raise EditError(f"cannot write {shorten(rel)!r}: {exc}") from None

    def read(self, rel: str) -> str:
        """The text of a regular file of the workspace (at most `MAX_FILE_BYTES`), no link followed."""
        try:
            return read_text(os.path.normpath(rel), MAX_FILE_BYTES, root=self.root)
        except UnsafeFileError as exc:
            raise EditError(f"{shorten(rel)!r} cannot be read: {exc}") from None

    def edit(self, path: str, old: str, new: str) -> str:
        """Apply an agent's edit; returns the workspace-relative path it changed."""
        if not isinstance(path, str):
            raise EditError("edit refused: the path must be text")
        rel = self._relative(path, for_edit=True)
        if not isinstance(old, str) or not isinstance(new, str):
            raise EditError("edit refused: old and new must be text")
        if "\x00" in new:
            raise EditError("edit refused: the new text contains a NUL byte (text files only)")
        if old == "":
            text = new
        else:
            try:
                current = read_text(rel, MAX_FILE_BYTES, root=self.root)
            except UnsafeFileError as exc:
                raise EditError(f"edit refused: {exc}; use old='' to write a new file") from None
            count = current.count(old)
            if count != 1:
                raise EditError(f"edit refused: the old text occurs {count} times in {shorten(path)!r}; "
                                "it must occur exactly once")
            text = current.replace(old, new, 1)
        if len(text.encode()) > MAX_FILE_BYTES:
            raise EditError(f"edit refused: {shorten(path)!r} would be {len(text.encode())} bytes; "
                            f"the cap is {MAX_FILE_BYTES}")
        try:
            write_text(self.root, rel, text)
        except UnsafeFileError as exc:
            raise EditError(f"edit refused: {exc}") from None
        return rel
