"""`njit`: the compiled engine loop's decorator, numba's ``njit(cache=True)`` where numba imports, else nothing.

Every function of `rsi_env.sim.vllm` is plain Python that numba compiles in nopython mode: no ``fastmath`` (the
results must be the Python arithmetic's, to the last bit: no reassociation, no FMA contraction), ``cache=True``.

**The cache.** numba writes the machine code beside this package's sources (``rsi_env/sim/vllm/__pycache__``), or,
where that folder is read-only (a system-wide install), in numba's user-wide cache dir (``~/.cache/numba``);
``NUMBA_CACHE_DIR`` overrides both. Compiling the loop takes 25-50 s on an empty cache (more on a loaded host); a
process that finds it cached loads it in about 0.6-0.9 s. numba invalidates a cached function when *its own* source
file changes, not when a function it calls from another file does: here every function's cache entry is stamped with
a hash of all of this package's sources instead (`_install_locators`), so a change to any of them recompiles all.

**Many processes on an empty cache** (N RL env runners started at once) would each compile the loop, N times the CPU
for nothing: the first call of the loop in a process holds a file lock in the cache folder while the cache lacks it
(`first_call`), so one process compiles and the others wait and load its result; ``rsi-env warm`` (`warm`), run once
after installing or changing the package, spares even the wait.

**Without numba** (not installed, or ``RSI_ENV_NO_NUMBA=1``), `njit` returns the function as it is: the same code
runs as plain Python over numpy arrays, with the same results to the last bit, and 50-100 times slower than compiled
(slower than the Python engine it replaced, which was written for CPython): correct, for a platform without numba's
wheels or for debugging, not for training.

This module is imported only when a simulation runs (`rsi_env.sim.engine.EngineSim.run`): ``import rsi_env`` does not
import numba.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

try:
    import fcntl
except ImportError:  # Windows: no compile lock
    fcntl = None  # type: ignore[assignment]

__all__ = ["COMPILED", "first_call", "njit", "warm"]

F = TypeVar("F", bound=Callable[..., Any])
_DIR = Path(__file__).resolve().parent


def _sources_stamp() -> str:
    """A hash of every source file of this package: the stamp of each of its functions' cache entries."""
    h = hashlib.sha256()
    for p in sorted(_DIR.glob("*.py")):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _install_locators(numba: Any) -> None:
    """numba's cache locators (user-provided dir, beside the source, user-wide), for this package's functions only,
    with `_sources_stamp` as their source stamp. numba's internal API (``numba.core.caching``), as of the pinned
    version; where it differs, numba's own locators stay (each function stamped by its own file)."""
    try:
        from numba.core import caching

        bases = [caching.UserProvidedCacheLocator, caching.InTreeCacheLocator, caching.UserWideCacheLocator]
        classes = caching.CacheImpl._locator_classes
    except (ImportError, AttributeError):
        warnings.warn("numba's cache locators are not where rsi-env looks for them (another numba than the pinned "
                      "one?): a cached engine loop is now refreshed only when loop.py itself changes; clear "
                      "rsi_env/sim/vllm/__pycache__ after changing the other modules", stacklevel=2)
        return
    if any(getattr(c, "_rsi_env", False) for c in classes):
        return
    stamp = _sources_stamp()

    def ours(base: type) -> type:
        def get_source_stamp(self: Any) -> str:
            return stamp

        def from_function(cls: type, py_func: Any, py_file: str) -> Any:
            if Path(py_file).resolve().parent != _DIR:
                return None
            return getattr(super(new, cls), "from_function")(py_func, py_file)  # noqa: B009

        new = type(f"RsiEnv{base.__name__}", (base,), {"_rsi_env": True, "get_source_stamp": get_source_stamp,
                                                      "from_function": classmethod(from_function)})
        return new

    classes[:0] = [ours(b) for b in bases]


def _import_numba() -> Any:
    if os.environ.get("RSI_ENV_NO_NUMBA", "") not in ("", "0"):
        return None
    try:
        import numba
    except ImportError:  # no numba for this platform: plain Python, slow
        return None
    _install_locators(numba)
    return numba


_numba = _import_numba()
COMPILED = _numba is not None  # False: the loop runs as plain Python
_called: set[int] = set()  # compiled functions this process has called (`first_call`)
_uncached: list[Any] = []  # functions numba compiles without a cache (no writable cache folder)


def njit(fn: F) -> F:
    """``numba.njit(cache=True)`` (no fastmath) where numba imports; ``fn`` itself otherwise."""
    if _numba is None:
        return fn
    try:
        return _numba.njit(cache=True, fastmath=False)(fn)
    except RuntimeError:  # numba finds no folder it can write its cache to: compiled in every process
        if not _uncached:
            warnings.warn("numba can write its cache nowhere (a read-only install and home; set NUMBA_CACHE_DIR): "
                          "the simulator's loop is compiled afresh in every process", stacklevel=2)
        _uncached.append(fn)
        return _numba.njit(fastmath=False)(fn)


def _cached(fn: Any) -> bool:
    """Whether numba's cache holds compiled code of ``fn`` for the current sources (numba's internal index; False
    where it cannot tell)."""
    try:
        return bool(fn._cache._cache_file._load_index())
    except Exception:
        return False


@contextmanager
def first_call(fn: Any) -> Iterator[None]:
    """Around a call of the compiled ``fn``: this process's first call holds a file lock in ``fn``'s numba cache
    folder while it runs, so that processes started at once on an empty cache (N RL env runners) compile it once: the
    first compiles and writes the cache, the others wait for it and then load from there. No lock where the cache
    already holds ``fn`` for the current sources (`_cached`), on later calls, in plain Python, for a function without a
    cache folder, or on a platform without ``fcntl``."""
    key = id(fn)
    path = getattr(getattr(fn, "_cache", None), "_cache_path", None)
    if key in _called or not COMPILED or fcntl is None or not path or _cached(fn):
        _called.add(key)
        yield
        return
    try:
        fd = os.open(os.path.join(path, "rsi-env-compile.lock"), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # a cache folder we cannot write: numba falls back elsewhere, no lock
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
        _called.add(key)
    finally:
        os.close(fd)  # releases the lock


def warm() -> dict[str, Any]:
    """Compile the engine loop into numba's cache (or load it from there), by simulating a small workload once;
    returns what was done: whether numba compiled, the seconds it took, the cache folders."""
    from rsi_env.sim import simulate

    t0 = time.perf_counter()
    tel = simulate({}, "llama-3.1-8b", "h200", "short_long")
    seconds = time.perf_counter() - t0
    if not tel.ok:
        raise RuntimeError(f"the warm-up simulation failed: {tel.error}")
    from rsi_env.sim.vllm import loop

    where = []
    if COMPILED:
        impl = loop.engine_loop._cache._cache_path  # type: ignore[attr-defined]
        where.append(str(impl))
    return {"compiled": COMPILED, "seconds": round(seconds, 2), "cache": where}
