"""rsi-env: Gymnasium environments for LLM-inference engineering on vLLM.

``import rsi_env`` stays light: numpy and PyYAML only. The engine vocabulary lives in
:mod:`rsi_env.engine`, the cheap tier in :mod:`rsi_env.sim`.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
