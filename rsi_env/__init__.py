"""rsi-env: Gymnasium environments for LLM-inference engineering on vLLM.

``import rsi_env`` registers every ``RSI/*`` environment with Gymnasium and stays light: no torch,
vLLM, Ray or Docker is imported until a part that needs it is used. The engine vocabulary lives in
:mod:`rsi_env.engine`, the cheap tier in :mod:`rsi_env.sim`.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["BENCH", "EDIT", "FLAG", "SHELL", "SUBMIT", "__version__", "validate"]
# The action kinds (``{"kind": rsi_env.SUBMIT}``); `rsi_env.envs.actions` defines them, loaded when asked for.
_KINDS = ("FLAG", "EDIT", "SHELL", "BENCH", "SUBMIT")


def _register() -> None:
    try:
        import gymnasium  # noqa: F401  (a dependency; absent only where the package runs from a bare PYTHONPATH)
    except ImportError:  # e.g. the real-tier driver on a GPU machine: the envs are not needed there
        return
    from rsi_env.envs.registration import register_envs

    register_envs()


_register()


def __getattr__(name: str) -> object:
    if name == "validate":
        from rsi_env.envs.state import validate

        return validate
    if name in _KINDS:
        from rsi_env.envs import actions

        return getattr(actions, name)
    raise AttributeError(name)
