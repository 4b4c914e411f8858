"""`PrefillAdder`: which waiting requests join the next prefill batch (``managers/schedule_policy.py``, 0.5.17).

Three budgets, as SGLang keeps them:

- ``rem_total_tokens``: the pool's free and evictable slots, less what the running requests may still generate
  (each one's remaining ``max_new_tokens``, at most 4096, times the new-token ratio) and what this batch's
  requests take (their paged input, their ``max_new_tokens`` and a page each). A request whose input, remaining
  output and a page do not fit under it is refused (NO_TOKEN: the batch is full until a running request leaves);
- ``cur_rem_tokens``: the same slots less only this batch's inputs (and a page each): the slots must exist now;
- ``rem_input_tokens`` (``max_prefill_tokens``) and ``rem_chunk_tokens`` (``chunked_prefill_size``): the batch's
  prompt tokens. With chunked prefill a request longer than what is left of the chunk is cut to it (whole pages)
  and becomes the one chunked request, continued first in the next prefill batch; without it, the first request is
  always taken whole and later ones only while ``max_prefill_tokens`` lasts.

With the radix cache disabled SGLang admits requests that ignore EOS (every request here) by another rule
(``add_one_req_ignore_eos``): sorted by the tokens they have left to generate, the running and admitted requests
must, as they finish one by one, always leave more than a slot each free (every request counted as generating all of
its output: the new-token ratio enters only through the running requests' reservation in ``rem_total_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from rsi_env.sim.sglang.radix import RadixCache
from rsi_env.sim.sglang.request import Req

__all__ = ["CLIP_MAX_NEW_TOKENS", "AddResult", "PrefillAdder"]

CLIP_MAX_NEW_TOKENS = 4096
IGNORE_EOS_RESERVE_TOKENS = 1


class AddResult(Enum):
    CONTINUE = 1  # room for more
    NO_TOKEN = 2  # the KV pool is the limit: the running batch counts as full
    OTHER = 3     # the batch's prompt-token budget is spent


class PrefillAdder:
    """One prefill batch being formed: its budgets and the requests admitted to it (``can_run``)."""

    def __init__(self, cache: RadixCache, running: Sequence[Req], new_token_ratio: float, max_prefill_tokens: int,
                 chunked_prefill_size: int | None) -> None:
        self.cache = cache
        self.pool = cache.pool
        self.page = cache.page_size
        self.running = running
        self.rem_input_tokens = max_prefill_tokens
        self.rem_chunk_tokens = chunked_prefill_size
        self.rem_total_offset = sum(min(r.max_new_left, CLIP_MAX_NEW_TOKENS) * new_token_ratio for r in running)
        self.cur_rem_offset = 0
        self.can_run: list[Req] = []
        self.new_chunked: Req | None = None
        self._states: list[tuple[int, int]] | None = None  # (tokens left, tokens held), the ignore-EOS rule's

    # ---- budgets ---------------------------------------------------------------------------------
    @property
    def rem_total_tokens(self) -> float:
        return self.pool.available + self.cache.evictable_size - self.rem_total_offset

    @property
    def cur_rem_tokens(self) -> float:
        return self.pool.available + self.cache.evictable_size - self.cur_rem_offset

    def _paged(self, tokens: int) -> int:
        return -(-tokens // self.page) * self.page

    def budget_state(self) -> AddResult:
        if self.rem_total_tokens <= 0 or self.cur_rem_tokens <= 0:
            return AddResult.NO_TOKEN
        if self.rem_input_tokens <= 0 or (self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0):
            return AddResult.OTHER
        return AddResult.CONTINUE

    def _take(self, req: Req, extend: int, max_new: int) -> None:
        """Admit ``req`` computing ``extend`` tokens, reserving ``max_new`` output tokens for it."""
        req.extend = extend
        self.can_run.append(req)
        paged = self._paged(extend)
        self.rem_total_offset += paged + max_new + self.page
        self.cur_rem_offset += paged + self.page
        self.rem_input_tokens -= paged
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= paged

    # ---- admission -------------------------------------------------------------------------------
    def add_chunked_req(self, req: Req) -> Req | None:
        """Continue the chunked request (its computed tokens are its prefix); itself again if still unfinished."""
        assert self.rem_chunk_tokens is not None
        rem = min(self.rem_chunk_tokens, int(self.rem_total_tokens))
        if rem <= 0:  # it must be taken, or its slots would leak
            rem = self.rem_chunk_tokens
        left = req.fill_len() - req.kv
        truncated = left > rem
        self._take(req, min(left, rem), 0 if truncated else min(req.output_len, CLIP_MAX_NEW_TOKENS))
        return req if truncated else None

    def add_one_req(self, req: Req) -> AddResult:
        """Try ``req``, already matched against the cache (``req.prefix``, ``req.last_node``)."""
        if self.cache.disable:
            return self._add_one_req_ignore_eos(req)
        max_new = min(max(req.max_new_left, 0), CLIP_MAX_NEW_TOKENS)
        extend = req.fill_len() - req.prefix
        total = extend + max_new + self.page
        if total >= self.rem_total_tokens:
            return AddResult.NO_TOKEN
        paged = self._paged(extend)
        if self.rem_chunk_tokens is None and self.can_run and paged >= self.rem_input_tokens:
            return AddResult.OTHER
        node = req.last_node
        assert node is not None
        self.cache.inc_lock_ref(node)  # its prefix is no longer evictable: the budget shrinks by it
        if total >= self.rem_total_tokens:
            self.cache.dec_lock_ref(node)
            return AddResult.NO_TOKEN
        limit = self.rem_chunk_tokens
        if limit is None or paged <= limit:
            self._take(req, extend, min(req.output_len, CLIP_MAX_NEW_TOKENS))
        else:
            trunc = (limit // self.page * self.page + req.prefix) // self.page * self.page - req.prefix
            if trunc <= 0:
                self.cache.dec_lock_ref(node)
                return AddResult.OTHER
            self._take(req, trunc, 0)
            self.new_chunked = req
        return self.budget_state()

    def _add_one_req_ignore_eos(self, req: Req) -> AddResult:
        extend = req.fill_len() - req.prefix
        paged = self._paged(extend)
        if paged > min(self.cur_rem_tokens, self.rem_total_tokens):
            return AddResult.NO_TOKEN
        if self._states is None:
            self._states = []
            for r in (req, *self.running, *self.can_run):
                self._add_state(r, insort=False)
            self._states.sort(key=lambda s: s[0])
        else:
            self._add_state(req, insort=True)
        cur_rem = self.cur_rem_tokens - paged
        freed = 0
        for k, (left, held) in enumerate(self._states):
            bs = len(self._states) - k
            if cur_rem + freed - left * bs <= IGNORE_EOS_RESERVE_TOKENS * bs:
                return AddResult.NO_TOKEN
            freed += held
        if self.rem_chunk_tokens is None or extend <= self.rem_chunk_tokens:
            self._take(req, extend, min(req.output_len, CLIP_MAX_NEW_TOKENS))
        else:
            if self.rem_chunk_tokens <= 0:
                return AddResult.OTHER
            self._take(req, self.rem_chunk_tokens, 0)
            self.new_chunked = req
        return self.budget_state()

    def _add_state(self, r: Req, insort: bool) -> None:
        assert self._states is not None
        left, held = r.max_new_left, len(r.prompt) + r.generated
        if left <= 0:
            return
        if not insort:
            self._states.append((left, held))
            return
        k = 0
        for k in range(len(self._states)):  # SGLang's insertion point (before the first not smaller)
            if left <= self._states[k][0]:
                break
        self._states.insert(k, (left, held))
