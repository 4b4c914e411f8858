"""The BugFix workspace's engine code: BugFix-v0's own copy of the simulated engine loop, and the package's pool and config.

The workspace holds three engine modules as the agent sees and edits them:

- ``kv_cache.py`` — the paged KV block pool (`rsi_env.tasks.bugfix.kv_cache`, task material: the Python block pool
  the package's engine ran over before its loop was compiled, vendored here verbatim when the package dropped it);
- ``engine.py`` — the scheduler loop: token budget, admission, preemption. This is task data, not the package's
  simulator: the engine loop as it stood when BugFix-v0's bugs were written (``catalog/code/bugfix/hidden/
  engine.py``, `CLEAN_ENGINE`), whose exact text the bug operators mutate and whose hash stamps the instance table.
  The package's `rsi_env.sim.engine` evolves on its own (issue 30 compiled it); BugFix-v0 keeps the
  codebase its bugs were written against. Its one import of the block pool is made local
  (``from kv_cache import BlockPool``) so that the workspace's engine runs over the workspace's pool;
- ``config.py`` — vLLM's flag validation and default resolution (`rsi_env.engine.config`), verbatim;

plus the visible tests (``tests/``, from ``catalog/code/bugfix/visible``). The clean workspace is built on every
call from those sources, so it cannot drift from them; a change to any of them changes the catalogue hash, and the
instance table must be rebuilt (``python -m rsi_env.tasks.bugfix.generator``).

The clean engine the checks compare a workspace with (`clean_modules`) is the same three sources, run in the
env's process over the package's cost model, memory plan and traces: the workspace's copy of the engine runs on
the package's `rsi_env.sim.cost.StepCost` (its ``step_time``, ``decode_span`` and ``add_span_parts``), so that
interface stays.

Every sandbox that runs a workspace's engine (the agent's shell, the harness, the visible tests) sees the
package only as `engine_runtime`: a copy without the bug catalogue and hidden checks, whose engine and config
modules are stubs loading the workspace's own (the block pool is no package module: the workspace's engine imports
the workspace's), so the clean originals are nowhere an agent can read them.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import rsi_env.engine.config
import rsi_env.tasks.bugfix.kv_cache
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.sandbox.runtime import package_runtime

__all__ = ["CLEAN_ENGINE", "ENGINE_FILES", "LOCAL_IMPORT", "SHADOWS", "VISIBLE_DIR", "clean_modules", "clean_workspace",
           "engine_runtime"]

ENGINE_FILES = ("kv_cache.py", "engine.py", "config.py")
LOCAL_IMPORT = ("from rsi_env.tasks.bugfix.kv_cache import BlockPool", "from kv_cache import BlockPool")
VISIBLE_DIR = CODE_DIR / "bugfix" / "visible"
# BugFix-v0's engine loop, in the package's form (its block pool imported from the package); hidden from every sandbox.
CLEAN_ENGINE = CODE_DIR / "bugfix" / "hidden" / "engine.py"
_CLEAN_ENGINE_MODULE = "rsi_env.tasks.bugfix._clean_engine"
# The package's modules the workspace's stand in for, in every runtime a workspace's engine runs on.
# The block pool is not among them: it is task material (`rsi_env.tasks.bugfix.kv_cache`, under ``tasks``, which no
# runtime holds), and the workspace's engine imports the workspace's own (``from kv_cache import BlockPool``).
SHADOWS = {"sim/engine.py": "engine", "engine/config.py": "config"}


def engine_runtime() -> Path:
    """The folder (for ``sys.path``) of the package as a workspace's engine runs on it: `SHADOWS` stubbed."""
    return package_runtime(SHADOWS)


def _source(module: object) -> str:
    return Path(str(getattr(module, "__file__", ""))).read_text()


@cache
def clean_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    """The clean engine as modules of this process, ``(kv_cache, engine, config)``: what a workspace is judged against.

    ``engine`` is `CLEAN_ENGINE` loaded as a module of its own (over the package's block pool, cost model and config).
    """
    spec = importlib.util.spec_from_file_location(_CLEAN_ENGINE_MODULE, CLEAN_ENGINE)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"BugFix-v0's engine is missing: {CLEAN_ENGINE}")
    engine = importlib.util.module_from_spec(spec)
    sys.modules[_CLEAN_ENGINE_MODULE] = engine  # its dataclasses look their module up by name
    spec.loader.exec_module(engine)
    return rsi_env.tasks.bugfix.kv_cache, engine, rsi_env.engine.config


def clean_workspace(pkg_root: str | None = None) -> dict[str, str]:
    """``{relative path: text}`` of the unmodified workspace: the three engine modules and the visible tests.

    ``pkg_root`` (default: `engine_runtime`) is written into the visible tests (where they import the
    simulator from); the generator's catalogue hash passes the placeholder itself, so the hash does not
    depend on where the runtime lives.
    """
    pkg_root = str(engine_runtime()) if pkg_root is None else pkg_root
    engine = CLEAN_ENGINE.read_text()
    if engine.count(LOCAL_IMPORT[0]) != 1:
        raise RuntimeError(f"{CLEAN_ENGINE} must import the block pool once as {LOCAL_IMPORT[0]!r}")
    files = {"kv_cache.py": _source(rsi_env.tasks.bugfix.kv_cache),
             "engine.py": engine.replace(*LOCAL_IMPORT),
             "config.py": _source(rsi_env.engine.config)}
    for p in sorted(VISIBLE_DIR.rglob("*.py")):
        files[p.relative_to(VISIBLE_DIR).as_posix()] = p.read_text().replace("@PKG_ROOT@", pkg_root)
    return files
