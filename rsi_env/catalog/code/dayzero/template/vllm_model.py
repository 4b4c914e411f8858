"""The new architecture's model class for vLLM, registered out of tree (edit me; real tier only).

vLLM loads this file through a general plugin (an entry point in the ``vllm.general_plugins`` group that
the env installs beside it), in every process it starts, and calls ``register()``: it tells Hugging Face
``transformers`` the new ``model_type`` and vLLM's ``ModelRegistry`` the new architecture. The check
loads the tiny model (``tiny/config.json``) with seeded random weights named as in ``tiny/weights.json``
and compares vLLM's greedy tokens with the hidden PyTorch reference's.

This starts as vLLM's plain Llama under the new names; the new architecture (see MODEL.md) differs from it.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoConfig, LlamaConfig
from vllm.model_executor.models.llama import LlamaForCausalLM

_CONFIG = json.loads((Path(__file__).resolve().parent / "config.json").read_text())
MODEL_TYPE = _CONFIG["model_type"]
ARCHITECTURE = _CONFIG["architectures"][0]


class NewConfig(LlamaConfig):
    """Llama's config under the new model_type; unknown keys (the new ones) become attributes."""

    model_type = MODEL_TYPE


class NewModelForCausalLM(LlamaForCausalLM):
    """The model class vLLM instantiates for ARCHITECTURE."""


def register() -> None:
    from vllm import ModelRegistry

    AutoConfig.register(MODEL_TYPE, NewConfig, exist_ok=True)
    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, NewModelForCausalLM)
