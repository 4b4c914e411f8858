"""`SglangConfig`: SGLang's engine flags under SGLang's own ``ServerArgs`` names, validated, with search ladders.

Read from SGLang 0.5.17's ``sglang/srt/server_args.py`` (fields, defaults, ``check_server_args``), its scheduler
(``managers/schedule_policy.py``: the policies it runs) and its KV-cache set-up (``mem_cache/kv_cache_dtype.py``,
``mem_cache/kv_cache_configurator.py``). The table has the shape of vLLM's `rsi_env.engine.config.FLAGS` (one
`FlagSpec` a flag, with its ladder) and is checked by the same `check_value`; the refusals SGLang words itself are
given in its words.

``None`` means "SGLang's default". Several of those defaults SGLang resolves at start from the device
(`RESOLVED_AT_START` says how): they are never assumed here, the real tier's driver records what the engine resolved.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from rsi_env.engine.config import FlagSpec, check_value, refuse_unknown
from rsi_env.errors import InvalidConfigError

__all__ = ["RESOLVED_AT_START", "SCHEDULE_POLICIES", "SGLANG_FLAGS", "SglangConfig"]

# The policies SGLang's scheduler runs (``CacheAwarePolicy`` and ``CacheAgnosticPolicy``). Its CLI also lists
# "priority", which the scheduler then refuses ("Unknown schedule_policy"): priority is --enable-priority-scheduling.
SCHEDULE_POLICIES = ("lpm", "dfs-weight", "fcfs", "lof", "random", "routing-key")
# ``ServerArgs.kv_cache_dtype``'s choices less "fp4_e2m1", which 0.5.17 refuses as deprecated.
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
_POW2 = tuple(1 << i for i in range(15))

# The defaults SGLang 0.5.17 fills in at start (``ServerArgs._handle_gpu_memory_settings``, the scheduler's pool
# sizing, ``_page_size_default``), by the device's memory in MiB where they depend on it.
RESOLVED_AT_START: dict[str, str] = {
    "max_running_requests": "from the KV pool: the scheduler's request slots for max_total_num_tokens "
                            "(effective_max_running_requests_per_dp in get_server_info()['internal_states'])",
    "chunked_prefill_size": "by GPU memory: < 35 GiB 2048, < 60 GiB 4096, < 160 GiB 8192 (H100, H200), "
                            "else 16384; 4096 when the memory is unknown",
    "mem_fraction_static": "(memory - reserved) / memory, reserved = 512 MiB + 1.5 MiB per activation token "
                           "(max(chunked_prefill_size, 2048)) + tp*pp/8 GiB + the CUDA-graph reserve, at least "
                           "10 GiB above 60 GiB of memory; 0.88 when the memory is unknown",
    "page_size": "1 on CUDA; an attention backend may require more",
    "cuda_graph_max_bs": "by GPU memory and tp_size: < 20 GiB 8, < 35 GiB 24 (80 at tp >= 4), < 60 GiB 32 (160), "
                         "< 160 GiB 256 (512 at tp >= 4), else 512; 160 when the memory is unknown",
}


def _f(name: str, kind: str, help: str, **kw: Any) -> FlagSpec:
    return FlagSpec(name, kind, help, **kw)


# Ladders leave out what a measurement cannot use: "random" and "routing-key" (no routing keys are sent; random
# order makes two runs of one workload differ), fp4 and mxfp8 KV caches (Blackwell / FA4 only). Every chunk size on
# the ladder is divisible by every page size on it, so any combination of rungs is a configuration SGLang accepts.
SGLANG_FLAGS: dict[str, FlagSpec] = {s.name: s for s in (
    _f("max_running_requests", "int", "most requests running at once", lo=1, hi=65536, ladder=_POW2[3:12]),
    _f("chunked_prefill_size", "int", "most prompt tokens of one prefill chunk (-1: no chunked prefill)", lo=-1,
       hi=1 << 20, ladder=(-1, 512, 1024, 2048, 4096, 8192, 16384)),
    _f("max_prefill_tokens", "int", "token budget of one prefill batch", lo=1, hi=1 << 20,
       ladder=(2048, 4096, 8192, 16384, 32768, 65536)),
    _f("mem_fraction_static", "float", "fraction of device memory for weights and the KV pool", lo=0.0, hi=1.0,
       ladder=(0.5, 0.6, 0.7, 0.8, 0.85, 0.88, 0.9, 0.92, 0.95)),
    _f("disable_radix_cache", "bool", "turn off RadixAttention's prefix cache", ladder=(False, True)),
    _f("schedule_policy", "choice", "order of the waiting queue", choices=SCHEDULE_POLICIES,
       ladder=("fcfs", "lpm", "dfs-weight", "lof")),
    _f("schedule_conservativeness", "float", "how conservatively new requests are admitted (new-token ratio)",
       lo=0.0, hi=100.0, ladder=(0.3, 0.5, 0.7, 1.0, 1.3, 1.6, 2.0)),
    _f("kv_cache_dtype", "choice", "KV-cache element type", choices=KV_CACHE_DTYPES, ladder=("auto", "fp8_e4m3")),
    _f("page_size", "int", "tokens per KV-cache page", lo=1, hi=1024, ladder=(1, 16, 32, 64)),
    _f("cuda_graph_max_bs", "int", "largest decode batch captured as a CUDA graph", lo=1, hi=1 << 14,
       ladder=_POW2[3:10]),
    _f("tp_size", "int", "GPUs a layer is split over", lo=1, hi=64, ladder=(1, 2, 4, 8)),
    _f("dp_size", "int", "independent engine replicas", lo=1, hi=64, ladder=(1, 2, 4, 8)),
)}


# SGLang's own words for a number out of its range, where it has them.
_NUMBER_REFUSALS: dict[str, tuple[Any, str]] = {
    "schedule_conservativeness": (lambda v: v < 0, "schedule_conservativeness must be non-negative"),
    "page_size": (lambda v: v < 1, "page_size must be >= 1, got {value}"),
    "mem_fraction_static": (lambda v: not 0.0 < v < 1.0,
                            "mem_fraction_static is the fraction of the device's memory for the weights and the KV pool"),
}


def _check(name: str, value: Any) -> Any:
    """Validate one SGLang flag value, in SGLang's words where it has them."""
    spec = SGLANG_FLAGS[name]
    if value is None:
        return None
    if name == "schedule_policy" and value not in SCHEDULE_POLICIES:
        raise InvalidConfigError(name, value, spec.allowed(), f"Unknown schedule_policy: policy={value!r}")
    if name == "kv_cache_dtype" and value == "fp4_e2m1":
        raise InvalidConfigError(name, value, spec.allowed(),
                                 "--kv-cache-dtype=fp4_e2m1 is deprecated. Use --kv-cache-dtype=fp4_mx_block16.")
    if name == "kv_cache_dtype" and value not in KV_CACHE_DTYPES:
        raise InvalidConfigError(name, value, spec.allowed(), f"Unsupported kv_cache_dtype: {value}.")
    if spec.kind not in ("int", "float"):
        return check_value(spec, value)
    try:  # the type, normalised; the range below
        number = check_value(replace(spec, lo=None, hi=None), value)
    except InvalidConfigError:
        raise InvalidConfigError(name, value, spec.allowed()) from None
    if name == "chunked_prefill_size" and number <= 0:
        return -1  # SGLang reads every size <= 0 as "no chunked prefill"; one spelling of it keeps configs comparable
    if name in _NUMBER_REFUSALS:
        bad, words = _NUMBER_REFUSALS[name]
        if bad(number):
            allowed = "a float in (0, 1)" if name == "mem_fraction_static" else spec.allowed()
            raise InvalidConfigError(name, value, allowed, words.format(value=value))
    return check_value(spec, number)


@dataclass(frozen=True)
class SglangConfig:
    """SGLang engine flags as a user sets them; ``None`` leaves the choice to SGLang (see `RESOLVED_AT_START`)."""

    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    mem_fraction_static: float | None = None
    disable_radix_cache: bool = False
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    kv_cache_dtype: str = "auto"
    page_size: int | None = None
    cuda_graph_max_bs: int | None = None
    tp_size: int = 1
    dp_size: int = 1

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None and f.default is not None:
                raise InvalidConfigError(f.name, v, SGLANG_FLAGS[f.name].allowed(), "this flag cannot be unset")
            object.__setattr__(self, f.name, _check(f.name, v))
        chunk, page = self.chunked_prefill_size, self.page_size
        if chunk is not None and chunk > 0 and page is not None and chunk % page:
            raise InvalidConfigError("chunked_prefill_size", chunk, f"a multiple of page_size={page} (or -1)",
                                     "chunked_prefill_size must be divisible by page_size")

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> SglangConfig:
        """Build from ``{flag: value}``; an unknown flag is refused in SGLang's words, with the closest known names."""
        raw = dict(raw or {})
        refuse_unknown(raw, SGLANG_FLAGS, "ServerArgs.__init__() got an unexpected keyword argument '{flag}'")
        return cls(**raw)

    def replace(self, **changes: Any) -> SglangConfig:
        """A copy with ``changes`` applied (validated like :meth:`from_dict`)."""
        if any(k not in SGLANG_FLAGS for k in changes):
            return SglangConfig.from_dict({**self.to_dict(), **changes})
        return replace(self, **changes)

    @property
    def num_gpus(self) -> int:
        """GPUs the configuration occupies: tensor x data parallel."""
        return self.tp_size * self.dp_size

    def to_dict(self, *, only_set: bool = False) -> dict[str, Any]:
        """Flags as plain data; ``only_set`` drops flags left at SGLang's defaults."""
        out = asdict(self)
        if only_set:
            defaults = SglangConfig()
            out = {k: v for k, v in out.items() if getattr(defaults, k) != v}
        return out
