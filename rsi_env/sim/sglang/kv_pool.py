"""`TokenPool`: SGLang's KV pool as a count of token slots, handed out a page at a time.

SGLang sizes one pool of ``max_total_num_tokens`` slots (``TokenToKVPoolAllocator``; paged with ``page_size``) and
every cached token sits in it: the radix tree's nodes (`rsi_env.sim.sglang.radix.RadixCache`) and the running
requests' own tail. The simulator needs only the counts, never the slot indices.
"""

from __future__ import annotations

__all__ = ["TokenPool"]


class TokenPool:
    """``size`` token slots, ``available`` of them free; taken and given back in whole pages."""

    def __init__(self, size: int, page_size: int = 1) -> None:
        if size < 0 or page_size < 1:
            raise ValueError(f"a pool needs size >= 0 and page_size >= 1, got size={size} page_size={page_size}")
        self.page_size = page_size
        self.size = size // page_size * page_size
        self.available = self.size

    def pages(self, tokens: int) -> int:
        """``tokens`` rounded up to whole pages, in tokens (SGLang's ``ceil_paged_tokens``)."""
        p = self.page_size
        return -(-tokens // p) * p

    def take(self, tokens: int) -> None:
        """Hand out ``tokens`` slots; the caller has made room (evicted) first."""
        if tokens < 0 or tokens > self.available:
            raise RuntimeError(f"KV pool: {tokens} slots asked, {self.available} free of {self.size}")
        self.available -= tokens

    def give_back(self, tokens: int) -> None:
        """Return ``tokens`` slots to the free list."""
        if tokens < 0 or self.available + tokens > self.size:
            raise RuntimeError(f"KV pool: {tokens} slots returned, {self.available} free of {self.size}")
        self.available += tokens
