"""The BugFix workspace's engine code, taken from the package's own modules: never a second copy.

The workspace holds three of the simulated engine's modules as the agent sees and edits them:

- ``kv_cache.py`` — the paged KV block pool (`rsi_env.sim.kv_cache`), verbatim;
- ``engine.py`` — the scheduler loop: token budget, admission, preemption (`rsi_env.sim.engine`),
  whose one import of the block pool is made local (``from kv_cache import BlockPool``) so that the
  workspace's engine runs over the workspace's pool;
- ``config.py`` — vLLM's flag validation and default resolution (`rsi_env.engine.config`), verbatim;

plus the visible tests (``tests/``, from ``catalog/code/bugfix/visible``). The clean workspace is
generated from the package on every call, so the templates cannot drift from the engine they copy.

Every sandbox that runs a workspace's engine (the agent's shell, the harness, the visible tests) sees the
package only as `engine_runtime`: a copy without the bug catalogue and hidden checks, whose three engine
modules are stubs loading the workspace's own, so the clean originals are nowhere an agent can read them.
"""

from __future__ import annotations

from pathlib import Path

import rsi_env.engine.config
import rsi_env.sim.engine
import rsi_env.sim.kv_cache
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.sandbox.runtime import package_runtime

__all__ = ["ENGINE_FILES", "LOCAL_IMPORT", "SHADOWS", "VISIBLE_DIR", "clean_workspace", "engine_runtime"]

ENGINE_FILES = ("kv_cache.py", "engine.py", "config.py")
LOCAL_IMPORT = ("from rsi_env.sim.kv_cache import BlockPool", "from kv_cache import BlockPool")
VISIBLE_DIR = CODE_DIR / "bugfix" / "visible"
# The package's modules the workspace's stand in for, in every runtime a workspace's engine runs on.
SHADOWS = {"sim/kv_cache.py": "kv_cache", "sim/engine.py": "engine", "engine/config.py": "config"}


def engine_runtime() -> Path:
    """The folder (for ``sys.path``) of the package as a workspace's engine runs on it: `SHADOWS` stubbed."""
    return package_runtime(SHADOWS)


def _source(module: object) -> str:
    return Path(str(getattr(module, "__file__", ""))).read_text()


def clean_workspace(pkg_root: str | None = None) -> dict[str, str]:
    """``{relative path: text}`` of the unmodified workspace: the three engine modules and the visible tests.

    ``pkg_root`` (default: `engine_runtime`) is written into the visible tests (where they import the
    simulator from); the generator's catalogue hash passes the placeholder itself, so the hash does not
    depend on where the runtime lives.
    """
    pkg_root = str(engine_runtime()) if pkg_root is None else pkg_root
    engine = _source(rsi_env.sim.engine)
    if engine.count(LOCAL_IMPORT[0]) != 1:
        raise RuntimeError(f"rsi_env/sim/engine.py must import the block pool once as {LOCAL_IMPORT[0]!r}")
    files = {"kv_cache.py": _source(rsi_env.sim.kv_cache),
             "engine.py": engine.replace(*LOCAL_IMPORT),
             "config.py": _source(rsi_env.engine.config)}
    for p in sorted(VISIBLE_DIR.rglob("*.py")):
        files[p.relative_to(VISIBLE_DIR).as_posix()] = p.read_text().replace("@PKG_ROOT@", pkg_root)
    return files
