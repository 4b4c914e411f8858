"""An `SglangConfig` and pass-through ``ServerArgs`` as the keyword arguments of SGLang's ``Engine``, and back.

``Engine(**kwargs)`` builds ``ServerArgs(**kwargs)``, so every key must be a field of the installed release's
``ServerArgs``. Most of rsi-env's SGLang flags are fields under the same name; ``cuda_graph_max_bs`` is the
flag's CLI name, which SGLang 0.5.17 keeps only as a deprecated alias of the field ``cuda_graph_max_bs_decode``
(`FIELDS` lists the field names a flag may have, in the order they are tried). The driver fixes a few fields
(`DRIVER_FIXED`): the model and how it loads, token-id prompts, metrics on, a fixed seed. Asking for the scheduler's
pass lines (a ``decode_log_interval``) turns on the level they are logged at: SGLang's offline ``Engine`` logs at
``error`` unless told otherwise, and its pass lines are ``info`` (`rsi_env.real.sglang_passes`). `resolved_flags`
reads back from ``Engine.get_server_info()`` what the engine resolved for every flag.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from rsi_env.engine.sglang_config import SGLANG_FLAGS, SglangConfig
from rsi_env.errors import InvalidConfigError

__all__ = ["DRIVER_FIXED", "FIELDS", "engine_kwargs", "resolved_flags"]

# The ServerArgs fields a flag may be, newest name last; the first the installed release has is used.
FIELDS: dict[str, tuple[str, ...]] = {name: (name,) for name in SGLANG_FLAGS}
FIELDS["cuda_graph_max_bs"] = ("cuda_graph_max_bs", "cuda_graph_max_bs_decode")

# Fields the driver sets itself; a pass-through argument may not change them.
DRIVER_FIXED = ("model_path", "load_format", "skip_tokenizer_init", "enable_metrics", "random_seed")


def engine_kwargs(cfg: SglangConfig, extra: Mapping[str, Any], have: Collection[str], *, model_path: str,
                  load_format: str) -> dict[str, Any]:
    """``Engine`` keyword arguments: the model, the flags ``cfg`` sets (under the installed release's field names)
    and the pass-through ``extra`` ``ServerArgs``. ``have`` is the installed release's ``ServerArgs`` fields.

    A ``decode_log_interval`` among ``extra`` brings ``log_level="info"`` unless ``extra`` sets a level.
    Refuses, as `InvalidConfigError`, a pass-through argument that is not a field, that names one of the config's
    flags (set those as flags, where they are validated) or one the driver fixes, and a flag the release lacks.
    """
    owned = {f for fields in FIELDS.values() for f in fields} | set(SGLANG_FLAGS)
    for k, v in extra.items():
        if k in owned:
            raise InvalidConfigError(k, v, "an SGLang flag, not a pass-through argument",
                                     f"{k} is one of the config's flags: set it there")
        if k in DRIVER_FIXED:
            raise InvalidConfigError(k, v, f"none of {list(DRIVER_FIXED)}", f"the driver sets {k} itself")
        if k not in have:
            raise InvalidConfigError(k, v, "a field of the installed SGLang's ServerArgs",
                                     f"ServerArgs.__init__() got an unexpected keyword argument '{k}'")
    kwargs: dict[str, Any] = {"model_path": model_path, "load_format": load_format, "skip_tokenizer_init": True,
                              "enable_metrics": True, "random_seed": 0}
    for name, value in cfg.to_dict(only_set=True).items():
        field = next((f for f in FIELDS[name] if f in have), None)
        if field is None:
            raise InvalidConfigError(name, value, "a flag of the installed SGLang",
                                     f"the installed SGLang's ServerArgs has none of {list(FIELDS[name])}")
        kwargs[field] = value
    kwargs.update(extra)
    if "decode_log_interval" in extra and "log_level" in have:
        kwargs.setdefault("log_level", "info")  # the pass lines asked for are logged at info
    return kwargs


def resolved_flags(info: Mapping[str, Any]) -> dict[str, Any]:
    """Every flag's value as the started engine holds it, from ``Engine.get_server_info()``, with the sizes it
    derived: ``max_running_requests`` is the scheduler's limit per data-parallel replica
    (``effective_max_running_requests_per_dp``), ``max_total_num_tokens`` the KV pool in tokens."""
    states = info.get("internal_states") or [{}]
    state = states[0] if isinstance(states[0], Mapping) else {}
    graphs = info.get("cuda_graph_config") or {}
    decode = (graphs.get("decode") or {}) if isinstance(graphs, Mapping) else {}
    out = {name: info.get(name) for name in SGLANG_FLAGS}
    out["max_running_requests"] = state.get("effective_max_running_requests_per_dp", info.get("max_running_requests"))
    out["cuda_graph_max_bs"] = decode.get("max_bs", info.get("cuda_graph_max_bs_decode"))
    out.update({
        "cuda_graph_backend_decode": decode.get("backend"),
        "max_total_num_tokens": info.get("max_total_num_tokens"),
        "max_req_input_len": info.get("max_req_input_len"),
        "context_length": info.get("context_length"),
        "disable_overlap_schedule": info.get("disable_overlap_schedule"),
        "attention_backend": info.get("attention_backend"),
        "sampling_backend": info.get("sampling_backend"),
        "decode_log_interval": info.get("decode_log_interval"),
        "incremental_streaming_output": info.get("incremental_streaming_output"),
        "memory_usage": state.get("memory_usage"),
    })
    return out
