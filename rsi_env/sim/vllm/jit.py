"""`njit`: the compiled engine loop's decorator, numba's ``njit(cache=True)`` where numba imports, else nothing.

Every function of `rsi_env.sim.vllm` is plain Python that numba compiles in nopython mode: no ``fastmath`` (the
results must be the Python arithmetic's, to the last bit: no reassociation, no FMA contraction), ``cache=True`` (the
machine code is written beside this package's sources, in ``__pycache__``, or, where that folder is read-only, in
numba's user cache dir; ``NUMBA_CACHE_DIR`` overrides both). Compiling the loop takes 25-50 s on an empty cache, and
reloading it from the cache about 0.6-0.9 s per process: ``rsi-env warm`` fills the cache once, before N processes
(RL env runners) would each compile it at once.

Without numba (not installed, or ``RSI_ENV_NO_NUMBA=1``), `njit` returns the function as it is: the same code runs as
plain Python over numpy arrays. The results are the same, to the last bit, and about a hundred times slower than
compiled: a fallback for a platform without numba's wheels, not a way to train.

This module is imported only when a simulation runs (`rsi_env.sim.engine.EngineSim.run`): ``import rsi_env`` does not
import numba.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["COMPILED", "njit"]

F = TypeVar("F", bound=Callable[..., Any])



def _import_numba() -> Any:
    if os.environ.get("RSI_ENV_NO_NUMBA", "") not in ("", "0"):
        return None
    try:
        import numba
    except ImportError:  # no numba for this platform: plain Python, slow
        return None
    return numba


_numba = _import_numba()

COMPILED = _numba is not None  # False: the loop runs as plain Python


def njit(fn: F) -> F:
    """``numba.njit(cache=True)`` (no fastmath) where numba imports; ``fn`` itself otherwise."""
    if _numba is None:
        return fn
    return _numba.njit(cache=True, fastmath=False)(fn)
