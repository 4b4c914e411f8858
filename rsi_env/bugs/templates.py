"""The BugFix workspace's engine code, taken from the package's own modules: never a second copy.

The workspace holds three of the simulated engine's modules as the agent sees and edits them:

- ``kv_cache.py`` — the paged KV block pool (`rsi_env.sim.kv_cache`), verbatim;
- ``engine.py`` — the scheduler loop: token budget, admission, preemption (`rsi_env.sim.engine`),
  whose one import of the block pool is made local (``from kv_cache import BlockPool``) so that the
  workspace's engine runs over the workspace's pool;
- ``config.py`` — vLLM's flag validation and default resolution (`rsi_env.engine.config`), verbatim;

plus the visible tests (``tests/``, from ``catalog/code/bugfix/visible``). The clean workspace is
generated from the package on every call, so the templates cannot drift from the engine they copy.
"""

from __future__ import annotations

from pathlib import Path

import rsi_env
import rsi_env.engine.config
import rsi_env.sim.engine
import rsi_env.sim.kv_cache
from rsi_env.sandbox.hidden import CODE_DIR

__all__ = ["ENGINE_FILES", "LOCAL_IMPORT", "PKG_ROOT", "VISIBLE_DIR", "clean_workspace"]

ENGINE_FILES = ("kv_cache.py", "engine.py", "config.py")
LOCAL_IMPORT = ("from rsi_env.sim.kv_cache import BlockPool", "from kv_cache import BlockPool")
VISIBLE_DIR = CODE_DIR / "bugfix" / "visible"
PKG_ROOT = str(Path(rsi_env.__file__).resolve().parent.parent)  # the visible tests import the simulator from here


def _source(module: object) -> str:
    return Path(str(getattr(module, "__file__", ""))).read_text()


def clean_workspace(pkg_root: str = PKG_ROOT) -> dict[str, str]:
    """``{relative path: text}`` of the unmodified workspace: the three engine modules and the visible tests.

    ``pkg_root`` is written into the visible tests (where they import the simulator from); the generator's
    catalogue hash passes the placeholder itself, so the hash does not depend on where the package lives.
    """
    engine = _source(rsi_env.sim.engine)
    if engine.count(LOCAL_IMPORT[0]) != 1:
        raise RuntimeError(f"rsi_env/sim/engine.py must import the block pool once as {LOCAL_IMPORT[0]!r}")
    files = {"kv_cache.py": _source(rsi_env.sim.kv_cache),
             "engine.py": engine.replace(*LOCAL_IMPORT),
             "config.py": _source(rsi_env.engine.config)}
    for p in sorted(VISIBLE_DIR.rglob("*.py")):
        files[p.relative_to(VISIBLE_DIR).as_posix()] = p.read_text().replace("@PKG_ROOT@", pkg_root)
    return files
