"""`ModelSpec`: a model architecture, read from a Hugging Face ``config.json``.

Only what serving cost depends on is kept: the shapes of attention and MLP (dense or MoE),
the vocabulary, the context length, sliding windows and tied embeddings. Parameter counts and
KV bytes per token are derived here once, so the simulator and the memory planner agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from rsi_env.errors import CatalogError, ModelSpecError

__all__ = ["ModelSpec", "list_models", "load_model"]

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "auto": 2}
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class ModelSpec:
    """The shapes of a decoder-only transformer, as serving cost sees them."""

    name: str
    architecture: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    dtype_bytes: int = 2
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    num_moe_layers: int = 0
    sliding_window: int | None = None
    num_sliding_layers: int = 0
    qk_norm: bool = False
    rope_scaling_type: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], name: str | None = None) -> ModelSpec:
        """Read a Hugging Face config; multimodal configs are read from their ``text_config``."""
        if "text_config" in cfg and "hidden_size" not in cfg:
            cfg = {**cfg["text_config"], "architectures": cfg.get("architectures", [])}
        missing = [k for k in _REQUIRED if k not in cfg]
        if missing:
            raise ModelSpecError(
                f"config.json is missing {missing}; a decoder-only transformer config needs {list(_REQUIRED)}"
            )
        arch = (cfg.get("architectures") or [cfg.get("model_type", "unknown")])[0]
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv = int(cfg.get("num_key_value_heads") or heads)
        hidden = int(cfg["hidden_size"])
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        if layers < 1 or heads < 1 or kv < 1 or hidden < 1 or heads % kv:
            raise ModelSpecError(
                f"inconsistent attention shape: num_attention_heads={heads} must be a positive multiple of "
                f"num_key_value_heads={kv}"
            )
        experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0)
        topk = int(cfg.get("num_experts_per_tok") or 0)
        moe_layers = 0
        if experts:
            if topk < 1:
                raise ModelSpecError("an MoE config (num_experts > 0) needs num_experts_per_tok >= 1")
            step = int(cfg.get("decoder_sparse_step") or 1)
            dense_only = set(cfg.get("mlp_only_layers") or [])
            first_dense = int(cfg.get("first_k_dense_replace") or 0)
            moe_layers = sum(
                1 for i in range(layers) if i not in dense_only and i >= first_dense and (i + 1) % step == 0
            )
        window = cfg.get("sliding_window")
        if cfg.get("use_sliding_window") is False:
            window = None
        sliding_layers = 0
        if window:
            types = cfg.get("layer_types")
            sliding_layers = sum(1 for t in types if t == "sliding_attention") if types else layers
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        if not shared and cfg.get("n_shared_experts"):
            shared = int(cfg["n_shared_experts"]) * int(cfg.get("moe_intermediate_size") or 0)
        dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
        rope = cfg.get("rope_scaling") or {}
        return cls(
            name=name or str(cfg.get("_name_or_path") or arch),
            architecture=arch,
            num_layers=layers,
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=kv,
            head_dim=head_dim,
            intermediate_size=int(cfg.get("intermediate_size") or 4 * hidden),
            vocab_size=int(cfg["vocab_size"]),
            max_position_embeddings=int(cfg.get("max_position_embeddings") or 4096),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            dtype_bytes=_DTYPE_BYTES.get(dtype, 2),
            num_experts=experts,
            num_experts_per_tok=topk,
            moe_intermediate_size=int(cfg.get("moe_intermediate_size") or 0),
            shared_expert_intermediate_size=shared,
            num_moe_layers=moe_layers,
            sliding_window=int(window) if window else None,
            num_sliding_layers=sliding_layers,
            qk_norm=str(cfg.get("model_type", "")).startswith(("qwen3", "olmo2", "gemma3")),
            rope_scaling_type=(rope.get("rope_type") or rope.get("type")) if isinstance(rope, dict) else None,
            raw=dict(cfg),
        )

    @classmethod
    def from_json(cls, path: str | Path) -> ModelSpec:
        p = Path(path)
        try:
            cfg = json.loads(p.read_text())
        except FileNotFoundError:
            raise ModelSpecError(f"model config not found: {p}") from None
        except json.JSONDecodeError as exc:
            raise ModelSpecError(f"{p} is not valid JSON: {exc}") from None
        if not isinstance(cfg, dict):
            raise ModelSpecError(f"{p}: a config.json holds a JSON object")
        return cls.from_hf_config(cfg, name=p.parent.name if p.name == "config.json" else p.stem)

    def to_hf_config(self) -> dict[str, Any]:
        """A config.json that vLLM can load with dummy weights (the original if it was read from one)."""
        return dict(self.raw)

    # ---- derived sizes ------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @cached_property
    def attn_params_per_layer(self) -> int:
        q = self.hidden_size * self.num_heads * self.head_dim
        kv = 2 * self.hidden_size * self.num_kv_heads * self.head_dim
        return q + kv + self.num_heads * self.head_dim * self.hidden_size

    @cached_property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @cached_property
    def expert_params(self) -> int:
        """Parameters of one routed expert (gated MLP)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @cached_property
    def shared_expert_params(self) -> int:
        return 3 * self.hidden_size * self.shared_expert_intermediate_size

    @cached_property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @cached_property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @cached_property
    def layer_params(self) -> int:
        """Parameters of all decoder layers (attention + MLP/MoE), every expert counted."""
        dense_layers = self.num_layers - self.num_moe_layers
        moe = self.num_experts * self.expert_params + self.shared_expert_params + self.hidden_size * self.num_experts
        return self.num_layers * self.attn_params_per_layer + dense_layers * self.dense_mlp_params + (
            self.num_moe_layers * moe
        )

    @cached_property
    def total_params(self) -> int:
        tied = 0 if self.tie_word_embeddings else self.lm_head_params
        return self.layer_params + self.embedding_params + tied

    @cached_property
    def active_layer_params(self) -> int:
        """Parameters one token passes through in the decoder layers (top-k experts only)."""
        dense_layers = self.num_layers - self.num_moe_layers
        moe_active = self.num_experts_per_tok * self.expert_params + self.shared_expert_params
        return self.num_layers * self.attn_params_per_layer + dense_layers * self.dense_mlp_params + (
            self.num_moe_layers * moe_active
        )

    def weight_bytes(self, weight_dtype_bytes: float | None = None) -> float:
        """Bytes of weights held on the GPUs (embedding and lm_head stay in the model dtype)."""
        wb = self.dtype_bytes if weight_dtype_bytes is None else weight_dtype_bytes
        tied = 0 if self.tie_word_embeddings else self.lm_head_params
        return self.layer_params * wb + (self.embedding_params + tied) * self.dtype_bytes

    def kv_bytes_per_token(self, kv_dtype_bytes: float | None = None) -> float:
        """KV-cache bytes one token occupies across all layers."""
        b = self.dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
        return 2.0 * self.num_layers * self.num_kv_heads * self.head_dim * b

    @property
    def features(self) -> dict[str, float]:
        """Numeric features used to compare models (warm starts, calibration transfer)."""
        return {
            "params_b": self.total_params / 1e9,
            "active_params_b": (self.active_layer_params + self.lm_head_params) / 1e9,
            "kv_bytes_per_token": self.kv_bytes_per_token(),
            "num_layers": float(self.num_layers),
            "gqa_ratio": self.num_heads / self.num_kv_heads,
            "is_moe": float(self.is_moe),
        }


def _catalog_dir() -> Any:
    return resources.files("rsi_env") / "catalog" / "models"


def list_models() -> list[str]:
    """Ids of the models shipped in the catalog."""
    return sorted(p.name[:-5] for p in _catalog_dir().iterdir() if p.name.endswith(".json"))


def load_model(id_or_path: str | Path | ModelSpec) -> ModelSpec:
    """A catalog id (``llama-3.1-8b``) or the path of any Hugging Face ``config.json``."""
    if isinstance(id_or_path, ModelSpec):
        return id_or_path
    s = str(id_or_path)
    entry = _catalog_dir() / f"{s}.json"
    if entry.is_file():
        return ModelSpec.from_hf_config(json.loads(entry.read_text()), name=s)
    p = Path(s)
    if p.is_dir():
        p = p / "config.json"
    if p.suffix == ".json" or p.exists():
        return ModelSpec.from_json(p)
    raise CatalogError(f"unknown model {s!r}: use a path to a config.json or one of {list_models()}")
