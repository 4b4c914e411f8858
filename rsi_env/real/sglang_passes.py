"""SGLang's logged passes: the scheduler's own line for each prefill pass and each ``decode_log_interval``-th decode
pass, read off the driver's stderr while every byte of it still reaches the real tier.

SGLang keeps no per-pass record a client can read, but its scheduler process logs one line per prefill pass
("Prefill batch, #new-seq: 3, #new-token: 240, #cached-token: 16, token usage: 0.01, #running-req: 118,
#queue-req: 130, ..., cuda graph: False, ...") and one per ``decode_log_interval`` decode passes ("Decode batch,
#running-req: 121, ..., gen throughput (token/s): 6020.50, #queue-req: 127, ..."; SGLang 0.5.17's
``metrics_reporter``). Those lines are what the sim's SGLang scheduler can be checked against: how many passes were
prefills, of how many requests and tokens, beside how many running and queued. `LoggedPasses` turns fd 2 into a pipe
for the engine's lifetime (SGLang's scheduler and detokenizer processes inherit it); a thread passes every byte on
to the former stderr, unchanged (the real tier reads SGLang's refusals there), and keeps the pass lines with the
time it read them (the driver's clock: SGLang's own timestamps are whole seconds).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from types import TracebackType
from typing import Any

__all__ = ["LoggedPasses", "parse_pass"]

_HEAD = re.compile(r"\b(Prefill|Decode) batch(?: \[\d+\])?, (.*)$")
_KEYS = {"#new-seq": "new_seq", "#new-token": "new_token", "#cached-token": "cached_token", "#running-req": "running",
         "#queue-req": "queue", "#pending-token": "pending_token", "#token": "tokens", "token usage": "token_usage",
         "cuda graph": "graph", "gen throughput (token/s)": "gen_throughput",
         "input throughput (token/s)": "input_throughput"}
_COUNTS = ("new_seq", "new_token", "cached_token", "running", "queue", "pending_token", "tokens")
_LONGEST_LINE = 1 << 16  # a pass line is ~300 bytes: a longer line is something else, not kept whole


def parse_pass(line: str) -> dict[str, Any] | None:
    """One of SGLang's pass lines as ``{"kind": "prefill" | "decode", <field>: value}``; None for any other line or
    a pass line whose counts are not numbers (SGLang's format changed: nothing is guessed)."""
    m = _HEAD.search(line)
    if not m:
        return None
    out: dict[str, Any] = {"kind": m.group(1).lower()}
    for part in m.group(2).split(", "):
        key, sep, raw = part.partition(": ")
        name = _KEYS.get(key.strip())
        if not sep or name is None:
            continue
        raw = raw.strip().rstrip(",")
        try:
            out[name] = (raw == "True" if raw in ("True", "False") else
                         int(raw) if name in _COUNTS else float(raw))
        except ValueError:
            return None
    return out if "running" in out else None


class LoggedPasses:
    """fd 2 as a pipe for the ``with`` block: every byte passed on to the former stderr, SGLang's pass lines kept.

    `mark` before a workload and `since` after it give that workload's passes, each with ``t``, seconds from the
    mark. Bytes that are not UTF-8 and lines of any length pass through; a reader that fell behind never blocks the
    writers for longer than the former stderr does.
    """

    def __init__(self) -> None:
        self._passes: list[dict[str, Any]] = []
        self._marks: dict[int, float] = {}
        self._saved = self._read = -1
        self._thread: threading.Thread | None = None
        self._t0 = time.perf_counter()

    def __enter__(self) -> LoggedPasses:
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._pump, name="sglang-passes", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(self._saved, 2)  # the pipe's write end now lives only in children still running
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            if self._thread.is_alive():  # a child still holds the pipe: its fds stay the pump's, never reused
                return
        os.close(self._read)
        os.close(self._saved)

    def _pump(self) -> None:
        tail = b""
        while True:
            try:
                chunk = os.read(self._read, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            view = memoryview(chunk)
            while view:
                try:
                    view = view[os.write(self._saved, view):]
                except OSError:
                    break
            *lines, tail = (tail + chunk).split(b"\n")
            if len(tail) > _LONGEST_LINE:
                tail = b""
            now = time.perf_counter()
            for raw in lines:
                if b" batch" in raw and len(raw) <= _LONGEST_LINE:
                    try:
                        p = parse_pass(raw.decode("utf-8", "replace"))
                    except Exception:  # noqa: BLE001 - a line it cannot read must not stop the pipe's draining
                        p = None
                    if p is not None:
                        p["t"] = now
                        self._passes.append(p)

    def mark(self, settle_s: float = 0.0) -> int:
        """The position of the next pass, after ``settle_s`` for earlier lines still in the pipe (so that they are
        not counted as the next workload's); `since` of it times passes from now."""
        time.sleep(settle_s)
        n = len(self._passes)
        self._marks[n] = time.perf_counter()
        return n

    def since(self, start: int, settle_s: float = 0.25, expect: int | None = None) -> list[dict[str, Any]]:
        """The passes read from ``start`` on, after waiting ``settle_s`` for lines still in the pipe (or less, once
        ``expect`` of them are there)."""
        end = time.perf_counter() + settle_s
        while time.perf_counter() < end and (expect is None or len(self._passes) - start < expect):
            time.sleep(0.01)
        t0 = self._marks.get(start, self._t0)
        return [{**p, "t": round(p["t"] - t0, 6)} for p in self._passes[start:]]

    @staticmethod
    def columns(passes: list[dict[str, Any]]) -> dict[str, list[Any]]:
        """``passes`` as one list per field (None where a pass has no such field), the step trace's shape."""
        keys = sorted({k for p in passes for k in p}, key=lambda k: (k != "t", k != "kind", k))
        return {k: [p.get(k) for p in passes] for k in keys}
