"""The engines a flag task tunes: vLLM or SGLang (``engine="vllm" | "sglang"``), each as one `EngineKind`.

An env asks its engine kind for everything that differs between the two: the flag table its task's flags and
ladders come from, the configuration type (`EngineConfig` or `SglangConfig`, each refusing in its engine's own
words), the release an env measures when none is named, the start-up check a configuration must pass before it
lands, and the engine's name in the text an agent reads. The env core never branches on the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from rsi_env.engine.config import FLAGS, EngineConfig, FlagSpec
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.sglang_config import SGLANG_FLAGS, SglangConfig
from rsi_env.errors import RsiEnvError

__all__ = ["ENGINES", "SGLANG_RELEASE", "AnyConfig", "EngineKind", "engine_of", "get_engine", "row_engine"]

AnyConfig = EngineConfig | SglangConfig
SGLANG_RELEASE = "sglang-0.5.17"  # the SGLang release the sim models and the real tier installs


def _vllm_check(cfg: Any, model: ModelSpec, hw: HardwareSpec, engine_version: str) -> None:
    # vLLM's refusals at start (memory, block sizes, lengths); the package's own frozen types' through a memory
    if type(cfg) is EngineConfig and type(model) is ModelSpec and type(hw) is HardwareSpec:
        _vllm_accepts(cfg, model, hw, engine_version)
    else:
        cfg.resolve(model, hw, engine_version)


@lru_cache(maxsize=1024)
def _vllm_accepts(cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, engine_version: str) -> bool:
    """True where vLLM resolves ``cfg`` (a pure function of frozen inputs, each in the key: remembered); a refusal
    raises, and is worked out afresh each time (`lru_cache` keeps no exception)."""
    cfg.resolve(model, hw, engine_version)
    return True


def _sglang_check(cfg: Any, model: ModelSpec, hw: HardwareSpec, engine_version: str) -> None:
    """SglangConfig refuses at construction what ``ServerArgs`` refuses; the rest SGLang finds at start, and the
    tier reports it as the measurement's error (in SGLang's words)."""


@dataclass(frozen=True)
class EngineKind:
    """One engine an env can tune: its flags, its configuration type, its default release, its name in text."""

    name: str  # what ``engine=`` takes
    label: str  # how text names it: "vLLM", "SGLang"
    flags: Mapping[str, FlagSpec]
    config: type[EngineConfig] | type[SglangConfig]
    default_version: str
    version_prefix: str  # an ``engine_version`` of this engine starts with it ("" for vLLM's "0.26")
    gpu_flags: str  # the flags whose product is the GPUs a configuration occupies, as refusals name them
    check: Callable[[Any, ModelSpec, HardwareSpec, str], None]

    def make(self, raw: Mapping[str, Any] | None) -> EngineConfig:
        """The engine's configuration of ``{flag: value}``; `InvalidConfigError` in the engine's words.

        Typed as vLLM's `EngineConfig` for the env core, the wrappers and the searches, which read a configuration
        only by flag name (``getattr``, ``replace``, ``to_dict``, ``num_gpus``), as both types serve them alike; an
        env's tier is the one engine's (`rsi_env.envs.measure`), so an `SglangConfig` reaches only SGLang's tiers.
        """
        return cast(EngineConfig, self.config.from_dict(dict(raw or {})))

    def version(self, engine_version: str | None) -> str:
        """``engine_version``, or the engine's default; `RsiEnvError` for a release of the other engine."""
        if engine_version is None:
            return self.default_version
        other = [e for e in ENGINES.values() if e is not self and e.version_prefix
                 and engine_version.startswith(e.version_prefix)]
        if (self.version_prefix and not engine_version.startswith(self.version_prefix)) or other:
            raise RsiEnvError(f"engine_version {engine_version!r} is not a {self.label} release (engine="
                              f"{self.name!r} measures {self.default_version!r}); name the engine that runs it")
        return engine_version


ENGINES: dict[str, EngineKind] = {e.name: e for e in (
    EngineKind("vllm", "vLLM", FLAGS, EngineConfig, "0.26", "",
               "tensor_parallel_size*pipeline_parallel_size*data_parallel_size", _vllm_check),
    EngineKind("sglang", "SGLang", SGLANG_FLAGS, SglangConfig, SGLANG_RELEASE, "sglang-", "tp_size*dp_size",
               _sglang_check),
)}


def get_engine(name: str) -> EngineKind:
    """The engine kind ``name`` ("vllm" or "sglang"); `RsiEnvError` naming both for anything else."""
    if not isinstance(name, str) or name not in ENGINES:
        raise RsiEnvError(f"engine must be one of {sorted(ENGINES)}, got {name!r}")
    return ENGINES[name]


def engine_of(engine_version: str) -> EngineKind:
    """The engine whose release ``engine_version`` names: SGLang's for ``sglang-<release>``, else vLLM's."""
    return next((e for e in ENGINES.values() if e.version_prefix and engine_version.startswith(e.version_prefix)),
                ENGINES["vllm"])


def row_engine(raw: Mapping[str, Any]) -> tuple[EngineKind, str]:
    """The engine and release of a real-tier driver's measurement line: vLLM's driver names ``vllm_version``,
    SGLang's ``sglang_version`` (filed as ``sglang-<version>``, as `RealTier` records SGLang's runs); KeyError for
    a line that names neither."""
    if "vllm_version" in raw:
        return ENGINES["vllm"], str(raw["vllm_version"])
    if "sglang_version" in raw:
        return ENGINES["sglang"], f"sglang-{raw['sglang_version']}"
    raise KeyError("vllm_version")
