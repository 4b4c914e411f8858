"""The Harbor verifier's first step: a private copy of the installed rsi-env, checked file by file, made whole.

A Harbor task's ``tests/`` folder reaches the container only after the agent has finished, so what it carries
is trusted; what the container holds is not: in Harbor the agent's container is where the tests run. This
script (standard library only; ``tests/test.sh`` runs it with ``python -I -S``, so no site hook, ``.pth`` file
or environment variable is read first) copies the image's installed rsi-env package (its public part: no hidden
check, reference or ceiling is ever in the image) into a private folder without following any link, leaves
compiled caches behind, compares every file with the digest manifest shipped in ``tests/`` (a file changed,
added, missing, or anything but a regular file refuses), and only then lays the hidden parts, shipped in
``tests/`` as a tar archive, into that copy. The verifier then imports rsi-env from the copy alone.

The exporter (`rsi_env.integrations.harbor`) writes the manifest with `digests`, the same function that checks.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import tarfile
from pathlib import Path

__all__ = ["TamperedInstall", "digests", "main", "prepare", "read_manifest", "write_manifest"]

_CACHE = "__pycache__"


class TamperedInstall(Exception):
    """The installed package differs from the manifest: the verification is refused."""


def digests(root: Path) -> dict[str, str]:
    """``relative path -> sha256`` of every regular file under ``root``, compiled caches left out.

    A link, a device or anything else that is not a regular file or a folder raises `TamperedInstall`.
    """
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != _CACHE)
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            mode = os.lstat(path).st_mode
            if not stat.S_ISREG(mode):
                raise TamperedInstall(f"{rel} is not a regular file")
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            out[rel] = h.hexdigest()
    return out


def write_manifest(files: dict[str, str]) -> str:
    """The manifest's text: ``sha256  path`` a line, sorted (what ``sha256sum`` prints)."""
    return "".join(f"{digest}  {rel}\n" for rel, digest in sorted(files.items()))


def read_manifest(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64:
            raise TamperedInstall(f"the manifest line {line[:80]!r} is malformed")
        out[rel] = digest
    return out


def _copy_regular(src: str, dst: str) -> str:
    """Copy one file, opened without following a link or blocking, only if it is a regular file."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise TamperedInstall(f"{src} is not a regular file")
        with open(dst, "xb") as out:
            shutil.copyfileobj(f, out, 1 << 20)
    return dst


def _differences(want: dict[str, str], got: dict[str, str]) -> list[str]:
    out = [f"missing: {r}" for r in sorted(set(want) - set(got))]
    out += [f"added: {r}" for r in sorted(set(got) - set(want))]
    out += [f"changed: {r}" for r in sorted(r for r in set(want) & set(got) if want[r] != got[r])]
    return out


def prepare(installed: Path, manifest: Path, hidden: Path, dest: Path) -> Path:
    """Copy ``installed`` (a package folder) to ``dest/rsi_env``, check it against ``manifest``, add ``hidden``.

    Returns ``dest`` (the folder to put first on ``sys.path``); raises `TamperedInstall` naming what differs.
    """
    if os.path.islink(installed) or not installed.is_dir():
        raise TamperedInstall(f"{installed} is not the installed package's folder")
    copy = dest / "rsi_env"
    try:
        shutil.copytree(installed, copy, symlinks=True, ignore=shutil.ignore_patterns(_CACHE),
                        copy_function=_copy_regular)
    except shutil.Error as exc:  # copytree gathers each file's failure
        raise TamperedInstall(f"the installed package cannot be copied as regular files: {exc}") from None
    diff = _differences(read_manifest(manifest.read_text()), digests(copy))
    if diff:
        shown = "; ".join(diff[:8]) + (f"; and {len(diff) - 8} more" if len(diff) > 8 else "")
        raise TamperedInstall(f"the installed rsi-env differs from the one this task was exported with: {shown}")
    with tarfile.open(hidden, "r:gz") as tar:
        for member in tar.getmembers():
            if not (member.isfile() or member.isdir()) or not member.name.startswith("rsi_env/"):
                raise TamperedInstall(f"the hidden parts' archive holds {member.name!r}")
        tar.extractall(dest, filter="data")
    return dest


def main(argv: list[str]) -> int:
    """``harbor_check.py INSTALLED MANIFEST HIDDEN DEST``: exit 0 with DEST ready, or 3 with the reason."""
    if len(argv) != 4:
        print("usage: harbor_check.py INSTALLED MANIFEST HIDDEN DEST", file=sys.stderr)
        return 2
    try:
        prepare(*(Path(a) for a in argv))
    except (TamperedInstall, OSError, tarfile.TarError) as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
