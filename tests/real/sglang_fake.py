"""A stand-in for SGLang's ``Engine`` and ``ServerArgs``, only to test the SGLang driver's code around them here,
where SGLang cannot be installed (it needs a CUDA GPU). Never a measurement: the real driver runs on real SGLang.

What it copies from SGLang 0.5.17 (read from ``entrypoints/engine.py`` and ``managers/tokenizer_manager.py``):
``Engine(**server_args)`` with a ``loop``; ``async_generate(input_ids=, sampling_params=, stream=True, rid=)``
returning an async iterator of ``{"output_ids": [...so far], "meta_info": {...}}`` whose ``meta_info`` carries the
cumulative ``completion_tokens``, ``prompt_tokens``, ``cached_tokens``, ``num_retractions`` and, on the last chunk
only, ``finish_reason`` (``{"type": "length", ...}``, or ``{"type": "abort", "message": ...}``) and, with
``enable_metrics``, the request's time stamps (``request_received_ts``, ``queue_time``, ``forward_entry_time``,
``prefill_finished_time``); ``flush_cache()`` that refuses once while requests are pending; ``get_server_info()``
with the server args, the scheduler's sizes and ``internal_states``; ``freeze_gc()``; one "Prefill batch, ..." line
on fd 2 per request, as SGLang's scheduler logs each prefill pass (one request a pass here). With
``incremental_streaming_output`` a chunk's ``output_ids`` are its new tokens only, else all so far. Its prefix cache
is the longest prefix shared with any earlier prompt since the last flush.

`install` writes a package named ``sglang`` that re-exports these, so a driver process started with it on its
``PYTHONPATH`` imports them as SGLang.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["Engine", "FakeEngine", "ServerArgs", "install"]

VERSION = "0.5.17+fake"
KV_TOKENS = 50_000
ENGINES: list[FakeEngine] = []  # every engine started in this process, for the tests to read


@dataclasses.dataclass
class ServerArgs:
    """The fields of SGLang 0.5.17's ``ServerArgs`` the driver sets or passes through (a subset of its ~500)."""

    model_path: str = ""
    load_format: str = "auto"
    skip_tokenizer_init: bool = False
    enable_metrics: bool = False
    random_seed: int | None = None
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    mem_fraction_static: float | None = None
    disable_radix_cache: bool = False
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    kv_cache_dtype: str = "auto"
    page_size: int | None = None
    cuda_graph_max_bs_decode: int | None = None
    tp_size: int = 1
    dp_size: int = 1
    attention_backend: str | None = None
    sampling_backend: str | None = None
    context_length: int | None = None
    decode_log_interval: int = 40
    incremental_streaming_output: bool = False


class _Flushed:
    def __init__(self, success: bool) -> None:
        self.success = success


class FakeEngine:
    """``token_delay_s`` between streamed tokens; ``abort`` and ``short`` name rids to abort or cut one token short;
    ``retract`` maps a rid to the retractions its last chunk reports."""

    def __init__(self, *, token_delay_s: float = 0.001, abort: tuple[str, ...] = (), short: tuple[str, ...] = (),
                 retract: dict[str, int] | None = None, **server_args: Any) -> None:
        self.server_args = ServerArgs(**server_args)
        self.kwargs = server_args
        self.token_delay_s = token_delay_s
        self.abort, self.short, self.retract = set(abort), set(short), dict(retract or {})
        self.loop = asyncio.new_event_loop()
        self.calls: list[dict[str, Any]] = []
        self.seen: list[list[int]] = []
        self.pending = 0
        self.flushes = 0
        self.refused_flushes = 0
        self.shut_down = False
        self.frozen_after: list[int] = []  # requests received before each freeze_gc
        ENGINES.append(self)

    def _cached(self, ids: list[int]) -> int:
        best = 0
        for prev in self.seen:
            n = 0
            for a, b in zip(prev, ids, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return 0 if self.server_args.disable_radix_cache else best

    async def async_generate(self, input_ids: list[int], sampling_params: dict[str, Any], stream: bool = False,
                             rid: str | None = None) -> Any:
        assert stream and self.server_args.skip_tokenizer_init
        if int(sampling_params.get("min_new_tokens") or 0) > 0:  # SGLang 0.5.17's refusal, seen on the GPU
            raise ValueError(f"min_new_tokens={sampling_params['min_new_tokens']} is unavailable when "
                             "skip_tokenizer_init=True (requires tokenizer for eos_token_id).")
        self.calls.append({"rid": rid, "input_ids": list(input_ids), "sampling_params": dict(sampling_params)})
        cached = self._cached(list(input_ids))
        self.seen.append(list(input_ids))
        # SGLang's scheduler process logs each prefill pass to the stderr it inherits (metrics_reporter's format)
        os.write(2, (f"[fake] Prefill batch, #new-seq: 1, #new-token: {len(input_ids) - cached}, #cached-token: "
                     f"{cached}, token usage: 0.00, #running-req: {self.pending}, #queue-req: 0, #pending-token: 0, "
                     "cuda graph: False, input throughput (token/s): 0.00\n").encode())
        n = int(sampling_params["max_new_tokens"]) - (1 if rid in self.short else 0)
        self.pending += 1
        received = time.time()

        async def chunks() -> Any:
            out: list[int] = []
            try:
                for k in range(1, n + 1):
                    await asyncio.sleep(self.token_delay_s)
                    out.append((len(input_ids) * 31 + k) % 1000)
                    if k == 1:
                        prefilled = time.time()
                    last = k == n
                    reason: Any = None
                    if last:
                        reason = ({"type": "abort", "message": "fake abort"} if rid in self.abort
                                  else {"type": "length", "length": n})
                    ids = out[-1:] if self.server_args.incremental_streaming_output else out
                    yield {"output_ids": ids, "meta_info": {
                        "id": rid, "finish_reason": reason, "prompt_tokens": len(input_ids),
                        "completion_tokens": k, "cached_tokens": cached,
                        "num_retractions": self.retract.get(rid or "", 0) if last else 0,
                        **(self._stamps(received, prefilled) if last and self.server_args.enable_metrics else {})}}
            finally:
                self.pending -= 1

        return chunks()

    @staticmethod
    def _stamps(received: float, prefilled: float) -> dict[str, float]:
        """The final chunk's time stamps with ``enable_metrics`` (wall clock; ``queue_time`` a duration): here the
        scheduler receives a request 0.1 ms after the tokenizer manager and batches it 0.1 ms later."""
        return {"request_received_ts": received, "queue_time": 0.0001, "forward_entry_time": received + 0.0002,
                "prefill_finished_time": prefilled, "response_sent_to_client_ts": time.time()}

    def flush_cache(self) -> _Flushed:
        if self.flushes == 0 and self.refused_flushes == 0:  # SGLang refuses while the last request winds down
            self.refused_flushes += 1
            return _Flushed(False)
        self.flushes += 1
        self.seen.clear()
        return _Flushed(self.pending == 0)

    def get_server_info(self) -> dict[str, Any]:
        sa = dataclasses.asdict(self.server_args)
        sa["chunked_prefill_size"] = sa["chunked_prefill_size"] or 8192
        sa["mem_fraction_static"] = sa["mem_fraction_static"] or 0.83
        sa["page_size"] = sa["page_size"] or 1
        sa["cuda_graph_config"] = {"decode": {"backend": "full", "max_bs": sa["cuda_graph_max_bs_decode"] or 256,
                                              "bs": [1, 2, 4, 8]},
                                   "prefill": {"backend": "breakable", "max_bs": sa["chunked_prefill_size"]}}
        return {**sa, "max_total_num_tokens": KV_TOKENS, "max_req_input_len": 2047, "startup_time": 1.0,
                "internal_states": [{"effective_max_running_requests_per_dp": sa["max_running_requests"] or 48,
                                     "memory_usage": {"weight": 0.1, "kvcache": 0.2}}],
                "version": VERSION}

    def freeze_gc(self) -> None:
        """SGLang's ``Engine.freeze_gc`` freezes the heaps of its three processes; the stand-in only counts the
        requests it had by then (freezing here would freeze the test process's)."""
        self.frozen_after.append(len(self.calls))

    def shutdown(self) -> None:
        self.shut_down = True


def Engine(**kwargs: Any) -> FakeEngine:  # noqa: N802 - SGLang's name for its engine class
    """SGLang's ``Engine(**server_args)``; writes the arguments to ``$FAKE_SGLANG_KWARGS`` where it is set."""
    if os.environ.get("FAKE_SGLANG_KWARGS"):
        Path(os.environ["FAKE_SGLANG_KWARGS"]).write_text(json.dumps(kwargs))
    return FakeEngine(**kwargs)


def install(root: Path) -> Path:
    """Write a package ``sglang`` under ``root`` that is this module (its version ``VERSION``); returns ``root``."""
    for sub in ("sglang", "sglang/srt", "sglang/srt/entrypoints"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "sglang" / "__init__.py").write_text(f"__version__ = {VERSION!r}\n")
    (root / "sglang" / "srt" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "entrypoints" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "entrypoints" / "engine.py").write_text("from tests.real.sglang_fake import Engine\n")
    (root / "sglang" / "srt" / "server_args.py").write_text("from tests.real.sglang_fake import ServerArgs\n")
    return root
