"""`Profile`: what a sandbox shows its commands — an allowlist, the same for every backend.

A sandbox's filesystem is built from nothing: the workspace read-write, and read-only only

- the system's programs and libraries (``/usr``'s ``bin``, ``sbin``, ``lib*``, ``libexec``, ``share``,
  ``include``; the ``/bin``-style links of a merged ``/usr``; ``/etc``'s linker cache and alternatives),
  with every Python site directory under them hidden;
- the interpreter and its prefix, wherever they live (a venv under ``/tmp`` included), with its
  site directories emptied;
- the third-party distributions the task names (`Profile.packages`) and everything they require, bound
  back into those site directories one top-level entry at a time;
- folders the task built for itself (`Profile.paths`, e.g. a runtime with the engine's modules);
- files laid over what the above shows (`Profile.overlays`: a task's own file bound read-only in place of
  one of a package's, or an empty folder hiding one, e.g. a module's compiled ``__pycache__``);
- a synthetic ``/etc/passwd`` and ``/etc/group`` that know only root and ``nobody``.

So no home directory, no ``/run``, no host socket, no other checkout or ``.git``, and no source of
``rsi_env`` is visible unless a task binds a runtime of its own (`rsi_env.sandbox.runtime`), which
never holds a hidden check, a clean original or a reference solution. `Mount` is the backend-neutral
list each backend turns into its own arguments.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import site
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = ["Mount", "Profile", "distribution_dirs", "site_dirs"]

_SYSTEM_DIRS = ("/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/share",
                "/usr/include")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime")
_MERGED_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64")
_NVIDIA = re.compile(r"nvidia(\d+|ctl|-uvm|-uvm-tools|-modeset)$")
NOBODY = 65534


@dataclass(frozen=True)
class Mount:
    """One entry of a sandbox's filesystem: a read-only bind, an empty folder over a path, a link or a device."""

    kind: str             # "ro" / "rw" (a bind), "empty" (an empty tmpfs hiding what is there), "link", "dev"
    dest: str
    source: str = ""      # the host path ("ro", "dev") or the link's target ("link")


@dataclass(frozen=True)
class Profile:
    """The read-only part of a sandbox: third-party ``packages`` (distribution names), extra ``paths``, ``gpu``.

    ``packages`` are bound with every distribution they require (markers evaluated, extras not
    followed); ``paths`` are host paths bound at the same place; ``gpu`` binds the NVIDIA device nodes;
    ``overlays`` are ``(dest, source)`` pairs laid last, over what the rest shows: the host file
    ``source`` bound read-only at ``dest`` (which must exist there), or, where ``source`` is ``""``, an
    empty folder over ``dest``.
    """

    packages: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    gpu: bool = False
    overlays: tuple[tuple[str, str], ...] = ()

    def mounts(self) -> list[Mount]:
        """Every entry, parents before children, so that a bind inside an emptied folder lands on top of it."""
        return list(_mounts(self))


@cache
def _mounts(profile: Profile) -> tuple[Mount, ...]:
    """`Profile.mounts`, once per profile and process (the machine's installed packages do not move under it)."""
    out: list[Mount] = []
    for link in _MERGED_LINKS:
        p = Path(link)
        if p.is_symlink():
            out.append(Mount("link", link, os.readlink(p)))
        elif p.is_dir():
            out.append(Mount("ro", link, link))
    out += [Mount("ro", d, d) for d in _SYSTEM_DIRS if Path(d).is_dir()]
    out += [Mount("ro", f, f) for f in _ETC_FILES if os.path.lexists(f)]
    users = _users_dir()
    out += [Mount("ro", f"/etc/{name}", str(users / name)) for name in ("passwd", "group")]
    for prefix in sorted({_real(sys.base_prefix), _real(sys.prefix)}):
        if not _covered(prefix, _SYSTEM_DIRS):
            out.append(Mount("ro", prefix, prefix))
    bound = tuple(m.dest for m in out if m.kind == "ro")
    out += [Mount("empty", d, "") for d in site_dirs() if _covered(d, bound)]
    for entry in sorted(distribution_dirs(profile.packages)):
        out.append(Mount("ro", entry, entry))
    out += [Mount("ro", _real(p), _real(p)) for p in profile.paths]
    if profile.gpu:
        out += [Mount("dev", str(d), str(d)) for d in sorted(Path("/dev").glob("nvidia*")) if _NVIDIA.match(d.name)]
        if Path("/dev/nvidia-caps").is_dir():
            out.append(Mount("dev", "/dev/nvidia-caps", "/dev/nvidia-caps"))
    out += [Mount("ro", dest, _real(src)) if src else Mount("empty", dest, "") for dest, src in profile.overlays]
    return tuple(out)


def _real(path: str | Path) -> str:
    return str(Path(path).resolve())


def _covered(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@cache
def site_dirs() -> tuple[str, ...]:
    """Every Python site directory a command could import from: the interpreter's, the user's, the system's, in a
    venv its base interpreter's (whose prefix is bound for the standard library, site-packages and all), and the
    folders their ``.pth`` files add (the interpreter in the sandbox reads the same files)."""
    return tuple(sorted({*_base_site_dirs(), *_pth_folders()}))


@cache
def _base_site_dirs() -> frozenset[str]:
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
    found = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], base["purelib"], base["platlib"],
             *site.getsitepackages()}
    found.add(site.getusersitepackages())
    for root in ("/usr/lib", "/usr/local/lib", "/usr/lib64"):
        for d in Path(root).glob("python3*/*-packages"):
            found.add(str(d))
    return frozenset(_real(d) for d in found if Path(d).is_dir())


@cache
def _pth_folders() -> dict[str, str]:
    """The folders the ``.pth`` files of the site directories add to ``sys.path``, each with the file naming it (the
    first), read as `site` reads them: a line is a folder relative to its site directory unless it is blank, a
    comment or code (``import ...``)."""
    out: dict[str, str] = {}
    for site_dir in sorted(_base_site_dirs()):
        for pth in sorted(Path(site_dir).glob("*.pth")):
            try:
                lines = pth.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                if line.strip() and not line.startswith(("#", "import ", "import\t")):
                    folder = Path(site_dir) / line.rstrip()
                    if folder.is_dir():
                        out.setdefault(_real(folder), str(pth))
    return out


@cache
def _users_dir() -> Path:
    """A folder holding the sandbox's ``passwd`` and ``group``: root and ``nobody``, nothing of the host's."""
    d = Path(tempfile.mkdtemp(prefix="rsi-etc-"))
    d.chmod(0o755)
    (d / "passwd").write_text(f"root:x:0:0:root:/nonexistent:/bin/sh\nnobody:x:{NOBODY}:{NOBODY}:nobody:/nonexistent:"
                              "/bin/sh\n")
    (d / "group").write_text(f"root:x:0:\nnogroup:x:{NOBODY}:\n")
    for f in d.iterdir():
        f.chmod(0o644)
    return d


def _requirements(dist: metadata.Distribution) -> list[str]:
    """The names of the distributions ``dist`` requires on this machine (markers evaluated, extras left out)."""
    names = []
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # no packaging: keep every requirement that is not behind an extra
        return [re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0] for r in dist.requires or () if "extra" not in r]
    for raw in dist.requires or ():
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            names.append(req.name)
    return names


@cache
def distribution_dirs(packages: tuple[str, ...]) -> frozenset[str]:
    """The top-level files and folders, in their site directory, of ``packages`` and all they require.

    A distribution that is not installed is left out (the command then fails to import it, in its own
    words); entries outside the site directory (scripts in ``bin``) are not needed to import.
    """
    seen: set[str] = set()
    out: set[str] = set()
    todo = [metadata_name(p) for p in packages]
    known = set(site_dirs())
    search = [d for d in dict.fromkeys(_real(p) for p in sys.path if p) if d in known]  # in the interpreter's order
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        # Looked up in the site directories a sandbox sees, not on this process's sys.path (Ray, imported here,
        # puts its own vendored copies first there, which a sandbox's interpreter never finds).
        dist = next(iter(metadata.distributions(name=name, path=search)), None)
        if dist is None:
            continue
        base = Path(str(dist.locate_file("")))
        pth = _pth_folders().get(_real(base))
        if pth is not None:  # the site directory is emptied in the sandbox: the file putting base on sys.path goes too
            out.add(pth)
        for f in dist.files or ():
            if f.parts and f.parts[0] not in ("..", "/") and not f.parts[0].endswith(".pth"):
                out.add(str((base / f.parts[0]).resolve()))
        info = getattr(dist, "_path", None)
        if info is not None:
            out.add(str(Path(info).resolve()))
        todo += [metadata_name(r) for r in _requirements(dist)]
    return frozenset(p for p in out if os.path.lexists(p))


def metadata_name(name: str) -> str:
    """A distribution name as the metadata index knows it (``PyYAML`` and ``pyyaml`` are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()
