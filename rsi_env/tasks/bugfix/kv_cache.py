"""The paged KV cache: a pool of blocks with vLLM's prefix cache and LRU eviction, counted in blocks.

vLLM hashes every full block by its tokens and its prefix; blocks nobody references stay cached
and evictable until an allocation takes them, least recently freed first, after the blocks that
hold no hash. The simulator does not need token ids: a block's identity is its position in a
*chain* — a workload's shared prefix (group ``g``) or one request's own tokens (kept after a
preemption, so that a resumed request hits its own blocks as in vLLM). A chain's cached blocks
are a count from its start, evicted from its tail, exactly as reverse-order freeing does.

Invariant (tested): ``free_plain + evictable + used == num_blocks`` where ``used`` counts the
blocks requests own plus the cached blocks of chains someone references.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["BlockPool"]


class BlockPool:
    """Counts of free, cached-evictable and used blocks, and the cached length of each chain."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.free_plain = num_blocks
        self.evictable = 0
        self.cached: dict[int, int] = {}
        self.refs: dict[int, int] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.owned = 0  # blocks owned by single requests (not in any chain)
        self.evictions = 0

    # ---- queries ----------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Blocks an allocation may take: never-hashed free ones plus evictable cached ones."""
        return self.free_plain + self.evictable

    @property
    def used(self) -> int:
        return self.num_blocks - self.num_free

    def cached_len(self, chain: int) -> int:
        return self.cached.get(chain, 0)

    def touch_cost(self, chain: int, nblocks: int) -> int:
        """Free blocks a hit on ``nblocks`` of ``chain`` takes out of the free count (evictable ones)."""
        return nblocks if (nblocks and chain in self._lru) else 0

    # ---- allocation -------------------------------------------------------------------------------
    def take(self, n: int) -> None:
        """Allocate ``n`` blocks to one request: plain free blocks first, then evict least recently freed."""
        if n <= 0:
            return
        if n > self.num_free:
            raise RuntimeError(f"allocating {n} blocks with {self.num_free} free")
        use = min(n, self.free_plain)
        self.free_plain -= use
        n -= use
        self.owned += use
        while n:
            chain = next(iter(self._lru))
            have = self.cached[chain]
            k = min(n, have)
            self.cached[chain] = have - k
            self.evictable -= k
            self.owned += k
            self.evictions += k
            n -= k
            if have == k:
                del self._lru[chain]
                del self.cached[chain]

    def release(self, n: int) -> None:
        """A request frees ``n`` blocks it owned that hold no reusable hash."""
        self.owned -= n
        self.free_plain += n

    # ---- chains (prefix cache) ----------------------------------------------------------------------
    def acquire(self, chain: int) -> None:
        """A request starts referencing ``chain``'s cached blocks (a prefix hit, or a prefix it computes)."""
        r = self.refs.get(chain, 0)
        if r == 0 and chain in self._lru:
            del self._lru[chain]
            self.evictable -= self.cached[chain]
        self.refs[chain] = r + 1

    def extend(self, chain: int, n: int) -> None:
        """Move ``n`` of a referencing request's owned blocks into ``chain`` (they become cached)."""
        self.cached[chain] = self.cached.get(chain, 0) + n
        self.owned -= n

    def unacquire(self, chain: int) -> None:
        """A request stops referencing ``chain``; at zero references its blocks become evictable (MRU)."""
        r = self.refs[chain] - 1
        if r:
            self.refs[chain] = r
            return
        del self.refs[chain]
        n = self.cached.get(chain, 0)
        if n:
            self._lru[chain] = None
            self.evictable += n
        else:
            self.cached.pop(chain, None)

    def claim(self, chain: int) -> int:
        """Take all cached blocks of a private chain back as owned (a resumed request hit them)."""
        n = self.cached.pop(chain, 0)
        if chain in self._lru:
            del self._lru[chain]
            self.evictable -= n
        self.owned += n
        return n

    def park(self, chain: int, n: int) -> None:
        """A preempted request leaves ``n`` of its owned full blocks cached, evictable, under ``chain``."""
        if n <= 0:
            return
        self.owned -= n
        self.cached[chain] = self.cached.get(chain, 0) + n
        self._lru[chain] = None
        self._lru.move_to_end(chain)
        self.evictable += n

    def check(self) -> None:
        """Raise if blocks leaked or the pool is over-committed (used by the property tests)."""
        held = sum(self.cached[c] for c in self.refs if c in self.cached)
        lru = sum(self.cached[c] for c in self._lru)
        if lru != self.evictable:
            raise AssertionError(f"evictable {self.evictable} != cached in LRU {lru}")
        if self.free_plain < 0 or self.evictable < 0 or self.owned < 0:
            raise AssertionError("negative block count")
        if self.free_plain + self.evictable + self.owned + held != self.num_blocks:
            raise AssertionError(
                f"blocks leak: free {self.free_plain} + evictable {self.evictable} + owned {self.owned} "
                f"+ referenced-cached {held} != {self.num_blocks}")
