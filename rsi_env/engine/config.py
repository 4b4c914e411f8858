"""`EngineConfig`: vLLM's engine flags under vLLM's own names, validated, and resolved per release.

An `EngineConfig` holds what a user (or an agent) set; ``None`` means "vLLM's default".
:meth:`EngineConfig.resolve` fills the defaults that the given vLLM release would pick for this
model, accelerator and usage context, and refuses what that release refuses, with vLLM's own
message. Memory-dependent refusals (a KV cache too small for ``max_model_len``) need the memory
plan and live in :mod:`rsi_env.sim.memory`.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.versions import CPU_DEFAULTS, get_version
from rsi_env.errors import InvalidConfigError

__all__ = ["FLAGS", "EngineConfig", "FlagSpec", "ResolvedConfig", "USAGE_CONTEXTS", "check_value", "refuse_unknown"]

USAGE_CONTEXTS = ("server", "llm")
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
BLOCK_SIZES = (8, 16, 32, 64, 128)
_POW2 = tuple(1 << i for i in range(13))


@dataclass(frozen=True)
class FlagSpec:
    """One engine flag: its type, the values it may take, and a ladder of values an agent can step along."""

    name: str
    kind: str  # int | float | bool | choice | int_list
    help: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[Any, ...] = ()
    ladder: tuple[Any, ...] = ()

    def allowed(self) -> str:
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "int_list":
            return "a list of positive ints"

        def num(x: float | None, none: str) -> str:  # ints as ints (1048576, not 1.04858e+06)
            if x is None:
                return none
            return str(int(x)) if self.kind == "int" else f"{x:g}"

        return f"{self.kind} in [{num(self.lo, '-inf')}, {num(self.hi, 'inf')}]"


def _f(name: str, kind: str, help: str, **kw: Any) -> FlagSpec:
    return FlagSpec(name, kind, help, **kw)


FLAGS: dict[str, FlagSpec] = {s.name: s for s in (
    _f("max_num_seqs", "int", "most requests running at once", lo=1, hi=65536, ladder=_POW2[3:12]),
    _f("max_num_batched_tokens", "int", "token budget of one engine step", lo=1, hi=1 << 20,
       ladder=tuple(1 << i for i in range(9, 17))),
    _f("block_size", "choice", "tokens per KV-cache block", choices=BLOCK_SIZES, ladder=BLOCK_SIZES),
    _f("gpu_memory_utilization", "float", "fraction of device memory vLLM may use", lo=0.0, hi=1.0,
       ladder=(0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.92, 0.95, 0.98)),
    _f("enable_prefix_caching", "bool", "reuse KV blocks of shared prompt prefixes", ladder=(False, True)),
    _f("enable_chunked_prefill", "bool", "split long prompts across steps", ladder=(False, True)),
    _f("kv_cache_dtype", "choice", "KV-cache element type", choices=KV_CACHE_DTYPES, ladder=("auto", "fp8")),
    _f("enforce_eager", "bool", "run without CUDA graphs", ladder=(False, True)),
    _f("cudagraph_capture_sizes", "int_list", "batch sizes captured as CUDA graphs"),
    _f("long_prefill_token_threshold", "int", "cap on one request's tokens per step (0: off)", lo=0,
       hi=1 << 20, ladder=(0, 256, 512, 1024, 2048, 4096)),
    _f("max_num_partial_prefills", "int", "concurrent partial prefills (V0 only; must be 1 in V1)", lo=1,
       hi=64, ladder=(1,)),
    _f("tensor_parallel_size", "int", "GPUs a layer is split over", lo=1, hi=64, ladder=(1, 2, 4, 8)),
    _f("pipeline_parallel_size", "int", "GPUs the layers are staged over", lo=1, hi=64, ladder=(1, 2, 4, 8)),
    _f("data_parallel_size", "int", "independent engine replicas", lo=1, hi=64, ladder=(1, 2, 4, 8)),
    _f("quantization", "choice", "weight quantization (None: model dtype)",
       choices=(None, "fp8", "fp8_per_tensor"), ladder=(None, "fp8")),
    _f("max_model_len", "int", "longest sequence (prompt + output) served", lo=1, hi=1 << 24,
       ladder=(2048, 4096, 8192, 16384, 32768, 65536, 131072)),
    _f("scheduling_policy", "choice", "order of the waiting queue", choices=("fcfs", "priority"),
       ladder=("fcfs", "priority")),
    _f("async_scheduling", "bool", "overlap scheduling with the forward pass", ladder=(False, True)),
)}


def check_value(spec: FlagSpec, value: Any) -> Any:
    """Validate one value of ``spec``'s flag by its kind and bounds; return it normalised (ints as int, lists as
    sorted tuples). Shared by every engine's flag table; an engine's own extra rules wrap it."""
    name = spec.name
    if value is None:
        return None
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise InvalidConfigError(name, value, spec.allowed())
        return value
    if spec.kind == "choice":
        if value not in spec.choices:
            raise InvalidConfigError(name, value, spec.allowed())
        return value
    if spec.kind == "int_list":
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
        ):
            raise InvalidConfigError(name, value, spec.allowed())
        return tuple(sorted(set(value)))
    if spec.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise InvalidConfigError(name, value, spec.allowed())
    else:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidConfigError(name, value, spec.allowed())
        value = float(value)
    if (spec.lo is not None and value < spec.lo) or (spec.hi is not None and value > spec.hi):
        raise InvalidConfigError(name, value, spec.allowed())
    return value


def refuse_unknown(raw: dict[str, Any], table: dict[str, FlagSpec], words: str = "unknown engine flag") -> None:
    """Refuse a flag that is not in ``table``: ``words`` (``{flag}`` filled in), then the closest known flags."""
    for k in raw:
        if k not in table:
            close = difflib.get_close_matches(k, list(table), n=3)
            hint = f"did you mean {close}?" if close else "unknown flag"
            raise InvalidConfigError(k, raw[k], f"one of {sorted(table)}", f"{words.format(flag=k)}; {hint}")


def _check(name: str, value: Any) -> Any:
    """Validate one vLLM flag value (vLLM's own message for ``gpu_memory_utilization``)."""
    if name == "gpu_memory_utilization" and value is not None and not isinstance(value, bool) and isinstance(
            value, (int, float)):
        if not 0.0 < value <= 1.0:
            raise InvalidConfigError(name, value, "a float in (0, 1]", "Input should be greater than 0 and "
                                     "less than or equal to 1")
        return float(value)
    return check_value(FLAGS[name], value)


def _num_gpus(cfg: EngineConfig | ResolvedConfig) -> int:
    return cfg.tensor_parallel_size * cfg.pipeline_parallel_size * cfg.data_parallel_size


@dataclass(frozen=True)
class EngineConfig:
    """vLLM engine flags as a user sets them; ``None`` leaves the choice to vLLM's defaults."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    gpu_memory_utilization: float | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    long_prefill_token_threshold: int = 0
    max_num_partial_prefills: int = 1
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    quantization: str | None = None
    max_model_len: int | None = None
    scheduling_policy: str = "fcfs"
    async_scheduling: bool | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None and f.default is not None:
                raise InvalidConfigError(f.name, v, FLAGS[f.name].allowed(), "this flag cannot be unset")
            object.__setattr__(self, f.name, _check(f.name, v))

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> EngineConfig:
        """Build from ``{flag: value}``; an unknown flag is refused with the closest known names."""
        raw = dict(raw or {})
        refuse_unknown(raw, FLAGS)
        return cls(**raw)

    def replace(self, **changes: Any) -> EngineConfig:
        """A copy with ``changes`` applied (validated like :meth:`from_dict`)."""
        for k in changes:
            if k not in FLAGS:
                return EngineConfig.from_dict({**self.to_dict(), **changes})
        return replace(self, **changes)

    @property
    def num_gpus(self) -> int:
        """GPUs the configuration occupies: tensor x pipeline x data parallel."""
        return _num_gpus(self)

    def to_dict(self, *, only_set: bool = False) -> dict[str, Any]:
        """Flags as plain data (tuples as lists); ``only_set`` drops flags left at their defaults."""
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}
        if only_set:
            defaults = EngineConfig()
            out = {k: v for k, v in out.items() if getattr(defaults, k) != getattr(self, k)}
        return out

    def resolve(self, model: ModelSpec, hardware: HardwareSpec, engine_version: str = "0.26",
                usage_context: str = "server") -> ResolvedConfig:
        """The concrete config the given vLLM release would run, or vLLM's refusal as `InvalidConfigError`."""
        return _resolve(self, model, hardware, engine_version, usage_context)


@dataclass(frozen=True)
class ResolvedConfig:
    """Every flag with a concrete value, as vLLM's ``VllmConfig`` would hold it."""

    engine_version: str
    usage_context: str
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    gpu_memory_utilization: float
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    kv_cache_dtype: str
    enforce_eager: bool
    cudagraph_capture_sizes: tuple[int, ...]
    long_prefill_token_threshold: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    quantization: str | None
    max_model_len: int
    scheduling_policy: str
    async_scheduling: bool

    @property
    def num_gpus(self) -> int:
        """GPUs the configuration occupies: tensor x pipeline x data parallel."""
        return _num_gpus(self)

    def kv_dtype_bytes(self, model: ModelSpec) -> float:
        return 1.0 if self.kv_cache_dtype.startswith("fp8") else float(model.dtype_bytes)

    def weight_dtype_bytes(self, model: ModelSpec) -> float:
        return 1.0 if self.quantization else float(model.dtype_bytes)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cudagraph_capture_sizes"] = list(self.cudagraph_capture_sizes)
        return out


def default_capture_sizes(max_size: int, max_num_batched_tokens: int) -> list[int]:
    """vLLM's default list: 1, 2, 4, then steps of 8 to 248 and of 16 from 256 up to ``max_size``."""
    sizes = [s for s in (1, 2, 4) if s <= max_size]
    sizes += list(range(8, min(max_size + 1, 256), 8)) + list(range(256, max_size + 1, 16))
    if max_num_batched_tokens <= max_size:
        sizes.append(max_num_batched_tokens)
    return sorted(set(sizes))


def _resolve(cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec, engine_version: str,
             usage_context: str) -> ResolvedConfig:
    ver = get_version(engine_version)
    if usage_context not in USAGE_CONTEXTS:
        raise InvalidConfigError("usage_context", usage_context, f"one of {USAGE_CONTEXTS}")
    defaults = EngineConfig()
    for flag in ver.removed_flags:
        if getattr(cfg, flag) != getattr(defaults, flag):
            raise InvalidConfigError(flag, getattr(cfg, flag), f"flags of vLLM {ver.version}",
                                     f"vLLM {ver.version} has no flag {flag}")
    is_cpu = hw.vendor == "cpu"
    tp, pp = cfg.tensor_parallel_size, cfg.pipeline_parallel_size

    if model.num_heads % tp:
        raise InvalidConfigError("tensor_parallel_size", tp, f"a divisor of {model.num_heads}",
                                 f"Total number of attention heads ({model.num_heads}) must be divisible by "
                                 f"tensor parallel size ({tp}).")
    if pp > model.num_layers:
        raise InvalidConfigError("pipeline_parallel_size", pp, f"at most num_hidden_layers={model.num_layers}")
    derived_len = model.max_position_embeddings
    max_model_len = cfg.max_model_len or derived_len
    if max_model_len > derived_len:
        raise InvalidConfigError(
            "max_model_len", max_model_len, f"at most {derived_len}",
            f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={derived_len} in model's config.json).")
    if cfg.max_num_partial_prefills != 1 and not ver.partial_prefills_supported:
        raise InvalidConfigError("max_num_partial_prefills", cfg.max_num_partial_prefills, "1",
                                 "Concurrent Partial Prefill is not supported. We recommend to remove "
                                 "Concurrent Partial Prefill from your config.")
    if ver.threshold_le_max_model_len_checked and cfg.long_prefill_token_threshold > max_model_len:
        raise InvalidConfigError("long_prefill_token_threshold", cfg.long_prefill_token_threshold,
                                 f"at most max_model_len={max_model_len}",
                                 f"long_prefill_token_threshold ({cfg.long_prefill_token_threshold}) cannot be "
                                 f"greater than the max_model_len ({max_model_len}).")
    if cfg.quantization is not None:
        if cfg.quantization not in ver.online_fp8_names:
            raise InvalidConfigError("quantization", cfg.quantization, f"one of {ver.online_fp8_names} or None",
                                     f"vLLM {ver.version} has no online quantization {cfg.quantization!r}")
        if is_cpu:
            raise InvalidConfigError("quantization", cfg.quantization, "None on the CPU backend",
                                     "The quantization method fp8 is not supported for the current device.")

    chunked = True if cfg.enable_chunked_prefill is None else cfg.enable_chunked_prefill
    tier = CPU_DEFAULTS if is_cpu else ver.batch_defaults(hw.memory_bytes, hw.name)
    ws = tp * pp if is_cpu else 1
    server = usage_context == "server"
    mnbt = cfg.max_num_batched_tokens
    mns = cfg.max_num_seqs
    if mnbt is None:
        mnbt = (tier.server_tokens if server else tier.llm_tokens) * ws
        if not chunked:
            mnbt = max(max_model_len, mnbt)
        mnbt = min((mns or (tier.server_seqs if server else tier.llm_seqs) * ws) * max_model_len, mnbt)
    if mns is None:
        mns = min((tier.server_seqs if server else tier.llm_seqs) * ws, mnbt)
    if not chunked and mnbt < max_model_len:
        raise InvalidConfigError(
            "max_num_batched_tokens", mnbt, f">= max_model_len ({max_model_len}) without chunked prefill",
            f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({max_model_len}). This effectively "
            "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer "
            "sequences. Please increase max_num_batched_tokens or decrease max_model_len.")
    if mnbt < mns:
        raise InvalidConfigError("max_num_batched_tokens", mnbt, f">= max_num_seqs ({mns})",
                                 f"max_num_batched_tokens ({mnbt}) must be greater than or equal to "
                                 f"max_num_seqs ({mns}).")

    block_size = cfg.block_size or (128 if is_cpu else 16)
    eager = cfg.enforce_eager or is_cpu
    if eager:
        sizes: list[int] = []
    else:
        ceiling = ver.max_capture_ceiling_sm100 if hw.name.startswith("b") else ver.max_capture_ceiling
        max_size = min(mns * 2, ceiling, mnbt)
        if cfg.cudagraph_capture_sizes is not None:
            sizes = [s for s in cfg.cudagraph_capture_sizes if s <= mnbt]
        else:
            sizes = default_capture_sizes(max_size, mnbt)
            if ver.append_max_num_seqs_capture and mns <= ceiling:
                sizes = sorted(set(sizes) | {mns})
    return ResolvedConfig(
        engine_version=ver.version,
        usage_context=usage_context,
        max_num_seqs=mns,
        max_num_batched_tokens=mnbt,
        block_size=block_size,
        gpu_memory_utilization=cfg.gpu_memory_utilization or ver.gpu_memory_utilization,
        enable_prefix_caching=True if cfg.enable_prefix_caching is None else cfg.enable_prefix_caching,
        enable_chunked_prefill=chunked,
        kv_cache_dtype=cfg.kv_cache_dtype,
        enforce_eager=eager,
        cudagraph_capture_sizes=tuple(sizes),
        long_prefill_token_threshold=cfg.long_prefill_token_threshold,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        data_parallel_size=cfg.data_parallel_size,
        quantization=cfg.quantization,
        max_model_len=max_model_len,
        scheduling_policy=cfg.scheduling_policy,
        async_scheduling=(not is_cpu) if cfg.async_scheduling is None else cfg.async_scheduling,
    )
