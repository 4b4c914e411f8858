"""What every engine driver reads from its command line: ``FLAG=VALUE`` assignments, and the model as a folder.

Both drivers (`rsi_env.real.vllm_driver`, `rsi_env.real.sglang_driver`) start an engine on a model folder that holds
the architecture's ``config.json`` and, with dummy weights, nothing else: the engine initialises the weights at
random, so the real architecture runs at its real speed with no checkpoint to download.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from rsi_env.engine.model import ModelSpec

__all__ = ["model_folder", "parse_assignments"]


def parse_assignments(items: Iterable[str]) -> dict[str, Any]:
    """``["max_num_seqs=64", "enforce_eager=true"]`` -> ``{"max_num_seqs": 64, "enforce_eager": True}`` (YAML values)."""
    out: dict[str, Any] = {}
    for item in items:
        k, _, v = item.partition("=")
        out[k] = yaml.safe_load(v)
    return out


def model_folder(spec: ModelSpec, weights: str | None = None) -> tuple[Path, str]:
    """A new temporary folder with ``spec``'s ``config.json``, and the load format to start the engine with:
    ``"dummy"``, or ``"safetensors"`` with every ``*.safetensors`` of ``weights`` copied beside it."""
    folder = Path(tempfile.mkdtemp(prefix="rsi-model-"))
    (folder / "config.json").write_text(json.dumps(spec.to_hf_config()))
    if not weights:
        return folder, "dummy"
    for ckpt in Path(weights).glob("*.safetensors"):  # e.g. a tiny model's seeded random weights
        (folder / ckpt.name).write_bytes(ckpt.read_bytes())
    return folder, "safetensors"
