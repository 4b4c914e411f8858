"""Reading files, YAML and values the agent may have planted: no links followed, nothing that blocks, bounded.

The env process reads back what the agent's shell can replace at will: ``serving.yaml``, the
workload copies, a code task's sources. In their place there may be a FIFO (a plain ``open``
blocks forever), a directory, a symbolic link out of the workspace, a socket, a device or a
huge file. Here every file is opened with ``O_NOFOLLOW | O_NONBLOCK``, checked with ``fstat`` to
be a regular file within its cap, and read to the cap at most; under a root, every parent folder
is opened the same way, so a folder swapped for a link cannot redirect a read or a write. YAML is
loaded with anchors and aliases refused and its depth bounded (a 314-byte alias bomb
expands to 9**9 strings), and `shorten` bounds whatever a message echoes of the agent's input.
Each refusal is an `UnsafeFileError` or a `YamlError` whose message says what was found.
"""

from __future__ import annotations

import contextlib
import errno
import os
import reprlib
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from rsi_env.errors import UnsafeFileError, YamlError

__all__ = ["ECHO_MAX", "MAX_YAML_BYTES", "MAX_YAML_DEPTH", "load_yaml", "load_yaml_file", "read_bytes", "read_text",
           "shorten", "write_text"]

ECHO_MAX = 200  # characters of an agent's value that a message may echo
MAX_YAML_BYTES = 32 * 1024  # serving.yaml or a workload is a few hundred bytes; PyYAML takes ~1 s for 32 KiB of keys
MAX_YAML_DEPTH = 64

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


# ---- echoes --------------------------------------------------------------------------------------------------
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, ECHO_MAX, ECHO_MAX
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 12


def _small(value: object, budget: int = 10_000, depth: int = 20) -> bool:
    """Whether ``value`` has at most ``budget`` parts nested at most ``depth`` deep (never walking more than that)."""
    stack, seen = [(value, 0)], 0
    while stack:
        x, level = stack.pop()
        seen += 1
        if seen > budget or level > depth:
            return False
        if isinstance(x, dict):
            stack.extend((y, level + 1) for y in (*x.keys(), *x.values()))
        elif isinstance(x, (list, tuple, set, frozenset)):
            stack.extend((y, level + 1) for y in x)
    return True


def _repr(value: object) -> str:
    try:
        return repr(value) if _small(value) else _REPR.repr(value)
    except Exception:  # a caller's object whose repr fails
        return f"<{type(value).__name__}>"


def shorten(value: object, limit: int = ECHO_MAX) -> str:
    """``value`` as a message may echo it: its repr (a str as it is), at most ``limit`` characters.

    A value of many parts, or nested deep (an alias bomb's expansion), is printed by `reprlib`,
    which walks only a bounded part of it; any other is printed whole and cut, so that ordinary
    messages read as before.
    """
    s = value[: limit + 1] if isinstance(value, str) else _repr(value)
    return s if len(s) <= limit else s[: limit - 3] + "..."


# ---- paths ---------------------------------------------------------------------------------------------------
def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def _parts(rel: str | Path) -> tuple[str, ...]:
    """The components of a path relative to a root; `UnsafeFileError` for an absolute path or ``..``."""
    p = PurePosixPath(rel)
    parts = tuple(x for x in p.parts if x != ".")
    if p.is_absolute() or not parts or ".." in parts or any("\x00" in x for x in parts):
        raise UnsafeFileError(f"{shorten(str(rel))!r} is not a plain path inside its folder")
    return parts


def _open_folder(fd: int, name: str, shown: str, create: bool) -> int:
    """The folder ``name`` under ``fd``, opened without following a link (made first if ``create``)."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=fd)
    try:
        return os.open(name, _FOLDER, dir_fd=fd)
    except FileNotFoundError:
        raise UnsafeFileError(f"{shown} does not exist") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            raise UnsafeFileError(f"{shown} is {_kind(mode)}, not a folder") from None
        raise UnsafeFileError(f"{shown} cannot be opened ({exc.strerror})") from None


@contextlib.contextmanager
def _parent(root: Path, parts: tuple[str, ...], create: bool = False) -> Iterator[int]:
    """An fd of the folder holding ``parts[-1]`` under ``root``, reached one component at a time, no link followed."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for k, name in enumerate(parts[:-1]):
            nxt = _open_folder(fd, name, "/".join(parts[: k + 1]), create)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _reported(shown: str, verb: str) -> Iterator[None]:
    """Any other OS error (permissions, a full disk, a file gone mid-way) as an `UnsafeFileError` naming the file."""
    try:
        yield
    except OSError as exc:
        raise UnsafeFileError(f"{shown} cannot be {verb} ({exc.strerror or exc})") from None


# ---- reading -------------------------------------------------------------------------------------------------
def _read_fd(fd: int, limit: int, shown: str) -> bytes:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFileError(f"{shown} is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise UnsafeFileError(f"{shown} is larger than the cap of {limit} bytes ({st.st_size} bytes)")
    chunks, n = [], 0
    while n <= limit:
        b = os.read(fd, min(limit + 1 - n, 1 << 16))
        if not b:
            break
        chunks.append(b)
        n += len(b)
    if n > limit:
        raise UnsafeFileError(f"{shown} is larger than the cap of {limit} bytes")
    return b"".join(chunks)


def _open_checked(name: str | Path, shown: str, dir_fd: int | None, follow: bool) -> int:
    """Open a regular file for reading; refuse (before opening) anything else, and never block."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=follow).st_mode
    except FileNotFoundError:
        raise UnsafeFileError(f"{shown} does not exist") from None
    except OSError as exc:
        raise UnsafeFileError(f"{shown} cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise UnsafeFileError(f"{shown} is {_kind(mode)}, not a regular file")
    try:
        return os.open(name, _READ if not follow else _READ & ~os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:  # it changed since the stat: a link (ELOOP), a socket (ENXIO), gone
        raise UnsafeFileError(f"{shown} cannot be read ({exc.strerror})") from None


def read_bytes(path: str | Path, limit: int, *, root: Path | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; `UnsafeFileError` saying why not.

    With ``root``, ``path`` is relative to it and no link is followed, in any component: the file
    is the agent's. Without, ``path`` is the caller's own file: a link is followed (the caller
    chose it), but it must still be a regular file within the cap, and nothing blocks.
    """
    if root is None:
        with _reported(str(path), "read"):
            fd = _open_checked(path, str(path), None, follow=True)
            try:
                return _read_fd(fd, limit, str(path))
            finally:
                os.close(fd)
    parts = _parts(path)
    shown = "/".join(parts)
    with _reported(shown, "read"), _parent(root, parts) as pfd:
        fd = _open_checked(parts[-1], shown, pfd, follow=False)
        try:
            return _read_fd(fd, limit, shown)
        finally:
            os.close(fd)


def read_text(path: str | Path, limit: int, *, root: Path | None = None) -> str:
    """`read_bytes` decoded as UTF-8 (undecodable bytes replaced)."""
    return read_bytes(path, limit, root=root).decode("utf-8", errors="replace")


# ---- writing -------------------------------------------------------------------------------------------------
def write_text(root: Path, rel: str | Path, text: str) -> None:
    """Write ``rel`` under ``root`` as the env: whatever the agent left at that name is replaced, never followed.

    Parent folders are reached without following links (made if missing); the text goes to a new
    file that is renamed over the name, so a link, FIFO, socket or device there is replaced (a
    directory there is removed first), and a hard link's other names keep their old text.
    """
    parts = _parts(rel)
    with _reported("/".join(parts), "written"), _parent(root, parts, create=True) as pfd:
        name = parts[-1]
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.stat(name, dir_fd=pfd, follow_symlinks=False).st_mode):
                shutil.rmtree(name, dir_fd=pfd)  # fd-based: never follows a link inside
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=pfd)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=pfd)
            raise


# ---- YAML ----------------------------------------------------------------------------------------------------
class _PlainLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses anchors and aliases, and nesting deeper than `MAX_YAML_DEPTH`."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise YamlError(f"anchors and aliases are not allowed (line {event.start_mark.line + 1})")
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise YamlError(f"nested deeper than {MAX_YAML_DEPTH} levels (line {event.start_mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str, *, limit: int = MAX_YAML_BYTES) -> Any:
    """The one YAML document in ``text``, loaded safely; `YamlError` saying why not."""
    if len(text) > limit:
        raise YamlError(f"larger than the cap of {limit} characters ({len(text)})")
    try:
        loader = _PlainLoader(text)  # its reader refuses unprintable characters at once
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise YamlError(shorten(str(exc), 5 * ECHO_MAX)) from None
    except RecursionError:  # the parser's own recursion, before any node is composed
        raise YamlError("nested too deep") from None


def load_yaml_file(path: str | Path, *, root: Path | None = None, limit: int = MAX_YAML_BYTES) -> Any:
    """`load_yaml` of a file read by `read_text` (the same rules for links, kinds and size)."""
    return load_yaml(read_text(path, limit, root=root), limit=limit)
