"""`package_runtime`: a copy of the ``rsi_env`` package a sandbox may see, without anything hidden in it.

Some sandboxed code needs the package itself — a BugFix workspace's engine runs on the simulator's cost
model, DayZero's vLLM check runs the real tier's driver — but the installed package holds what an agent
must never read: the code tasks' hidden checks, generators and references (``catalog/code``, ``tasks``), the
benchmark suites with their reference configurations (``catalog/suites``), and, for BugFix, the clean originals of the
very modules the agent repairs. A runtime is the package's Python sources and public catalog data,
copied into a private folder, with those parts left out and ``shadow`` modules replaced by a stub that
imports the workspace's own module in their place (``rsi_env.tasks.bugfix.kv_cache`` becomes the workspace's
``kv_cache.py``, loaded afresh under the package's name): in the runtime the clean original does not
exist. Runtimes are built once per process and content, read-only to the sandbox (bound by
`rsi_env.sandbox.profile.Profile.paths`), and removed when the process ends.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import rsi_env

__all__ = ["EXCLUDED", "package_runtime", "shadow_stub"]

PACKAGE = Path(rsi_env.__file__).resolve().parent
# Parts of the package no sandbox ever sees (relative to the package folder).
EXCLUDED = ("catalog/code", "catalog/suites", "tasks")
_DATA = (".py", ".yaml", ".json")
_RUNTIMES: dict[str, tempfile.TemporaryDirectory[str]] = {}


def shadow_stub(workspace_module: str) -> str:
    """The text that stands in for a package module: the workspace's ``workspace_module``, loaded under its name.

    The workspace's file is found on ``sys.path`` and executed as a module of its own under the package
    name (not an alias of the workspace's module, so that importing either first never meets the other
    half-initialised).
    """
    return ('"""In this runtime the workspace\'s own module stands in for this one; no other copy exists here."""\n\n'
            "import importlib.util\nimport sys\n\n"
            f"_found = importlib.util.find_spec({workspace_module!r})\n"
            "if _found is None or _found.origin is None:\n"
            f"    raise ImportError(\"the workspace's {workspace_module}.py is not on sys.path\")\n"
            "_spec = importlib.util.spec_from_file_location(__name__, _found.origin)\n"
            "assert _spec is not None and _spec.loader is not None\n"
            "_module = importlib.util.module_from_spec(_spec)\n"
            "sys.modules[__name__] = _module\n"
            "_spec.loader.exec_module(_module)\n")


def _included(rel: Path) -> bool:
    text = rel.as_posix()
    return not any(text == e or text.startswith(e + "/") for e in EXCLUDED) and "__pycache__" not in rel.parts


def package_runtime(shadow: Mapping[str, str] | None = None) -> Path:
    """The folder holding the runtime's ``rsi_env`` (put it on ``sys.path``); ``shadow``: package path -> module.

    E.g. ``{"tasks/bugfix/kv_cache.py": "kv_cache"}`` replaces ``rsi_env/tasks/bugfix/kv_cache.py`` by a stub importing the
    workspace's ``kv_cache``.
    """
    shadow = dict(shadow or {})
    files = sorted(p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix in _DATA
                   and _included(p.relative_to(PACKAGE)))
    h = hashlib.sha256(json.dumps(sorted(shadow.items())).encode())
    for p in files:
        h.update(p.relative_to(PACKAGE).as_posix().encode() + b"\0" + p.read_bytes())
    key = h.hexdigest()
    if key in _RUNTIMES and Path(_RUNTIMES[key].name).is_dir():
        return Path(_RUNTIMES[key].name)
    tmp = tempfile.TemporaryDirectory(prefix="rsi-runtime-")
    root = Path(tmp.name)
    for p in files:
        rel = p.relative_to(PACKAGE)
        if rel.as_posix() in shadow:
            continue
        dest = root / "rsi_env" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dest)
    for name, module in shadow.items():
        stub = root / "rsi_env" / name
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text(shadow_stub(module))
    for dirpath, _, names in os.walk(root):  # readable by the sandbox's unprivileged user, writable by none
        os.chmod(dirpath, 0o755)
        for n in names:
            os.chmod(os.path.join(dirpath, n), 0o644)
    _RUNTIMES[key] = tmp
    return root
