"""`RadixCache`: RadixAttention's prefix cache, a radix tree over token ids, as SGLang 0.5.17 keeps it.

Read from ``sglang/srt/mem_cache/radix_cache.py``. Each node holds a run of token ids (a whole number of pages) whose
KV sits in the pool (`TokenPool`); a request that uses a prefix locks the path to its last node (``lock_ref``), and
only a leaf no request locks can be evicted, least recently used first (each match and insert refreshes the path's
access time). A match ending inside a node splits it, so the matched prefix ends on a node. Keys are cut to whole
pages before a match or insert; a node's child is found by its first page.

The tree keeps SGLang's two counters: ``evictable_size`` (tokens in unlocked nodes) and ``protected_size`` (tokens
in locked ones). Inserting moves tokens a request computed into the tree, so the pool is untouched: the caller gives
back what the tree already had (`insert` says how much). Eviction gives the evicted tokens back to the pool.

Time is a counter of operations, not the wall clock, so a run is deterministic. ``disable`` is
``--disable-radix-cache``: nothing matches, nothing is inserted, nothing is evicted.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from rsi_env.sim.sglang.kv_pool import TokenPool

__all__ = ["RadixCache", "TreeNode", "common_prefix_len", "repeated_path_tokens"]


class TreeNode:
    """A run of token ids in the tree; ``lock_ref`` counts the requests using it."""

    __slots__ = ("children", "id", "key", "last_access", "lock_ref", "parent")

    def __init__(self, key: tuple[int, ...], parent: TreeNode | None, node_id: int) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[tuple[int, ...], TreeNode] = {}
        self.lock_ref = 0
        self.last_access = 0
        self.id = node_id

    def __repr__(self) -> str:
        return f"TreeNode(id={self.id}, len={len(self.key)}, lock_ref={self.lock_ref})"


def repeated_path_tokens(nodes: Iterable[TreeNode | None]) -> int:
    """Tokens on the nodes' paths from the root counted more than once: the sum of the paths' lengths less their
    union's. A decode batch whose requests share a cached prefix reads those tokens' KV once per request; this is
    how many of those reads repeat one already made in the same pass."""
    seen: set[int] = set()
    total = union = 0
    for node in nodes:
        while node is not None and node.parent is not None:  # the root holds no tokens
            k = len(node.key)
            total += k
            if node.id not in seen:
                seen.add(node.id)
                union += k
            node = node.parent
    return total - union


def common_prefix_len(a: tuple[int, ...], start: int, b: tuple[int, ...]) -> int:
    """How many leading tokens ``a[start:]`` shares with ``b`` (slices compared in C, halving on a mismatch)."""
    n = min(len(a) - start, len(b))
    if a[start:start + n] == b[:n]:
        return n
    lo, hi = 0, n - 1  # the answer is in [lo, hi]: a[start:start+lo] matches, the whole n does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[start:start + mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class RadixCache:
    """The tree over one `TokenPool`; ``page_size`` is the pool's."""

    def __init__(self, pool: TokenPool, disable: bool = False) -> None:
        self.pool = pool
        self.page_size = pool.page_size
        self.disable = disable
        self._ids = 0
        self._clock = 0
        self.root = self._node((), None)
        self.root.lock_ref = 1  # the root is never evicted
        self.evictable_size = 0
        self.protected_size = 0
        self._evictable_leaves: set[TreeNode] = set()

    # ---- helpers ---------------------------------------------------------------------------------
    def _node(self, key: tuple[int, ...], parent: TreeNode | None) -> TreeNode:
        self._ids += 1
        return TreeNode(key, parent, self._ids)

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _child_key(self, key: tuple[int, ...], start: int) -> tuple[int, ...]:
        return key[start:start + self.page_size]

    def _aligned(self, n: int) -> int:
        return n // self.page_size * self.page_size

    def _split(self, child: TreeNode, at: int) -> TreeNode:
        """Cut ``child`` after ``at`` tokens: a new node holds the head, ``child`` keeps the tail."""
        parent = child.parent
        assert parent is not None
        head = self._node(child.key[:at], parent)
        head.lock_ref = child.lock_ref
        head.last_access = child.last_access
        parent.children[self._child_key(child.key, 0)] = head
        child.key = child.key[at:]
        child.parent = head
        head.children[self._child_key(child.key, 0)] = child
        return head

    def _descend(self, key: tuple[int, ...], now: int) -> tuple[int, TreeNode]:
        """Walk from the root along ``key`` (whole pages), touching every node passed at ``now``: how many tokens
        the tree holds and the node they end on, split where the match ends inside a node. A child is found by
        its first page, so each step matches at least one page."""
        node = self.root
        node.last_access = now
        pos = 0
        while pos < len(key):
            child = node.children.get(self._child_key(key, pos))
            if child is None:
                break
            child.last_access = now
            m = self._aligned(common_prefix_len(key, pos, child.key))
            pos += m
            if m < len(child.key):
                return pos, self._split(child, m)
            node = child
        return pos, node

    def _update_leaf(self, node: TreeNode) -> None:
        """Keep ``node`` in the evictable leaves exactly when it is an unlocked leaf (SGLang's _update_leaf_status)."""
        if node.lock_ref == 0 and not node.children and node is not self.root:
            self._evictable_leaves.add(node)
        else:
            self._evictable_leaves.discard(node)

    # ---- the cache's operations ------------------------------------------------------------------
    def match_prefix(self, tokens: Sequence[int]) -> tuple[int, TreeNode]:
        """The longest cached prefix of ``tokens`` (whole pages): its length and the node it ends on."""
        n = self._aligned(len(tokens))
        if self.disable or n == 0:
            return 0, self.root
        return self._descend(tuple(tokens[:n]), self._tick())

    def insert(self, tokens: Sequence[int]) -> tuple[int, TreeNode]:
        """Put ``tokens`` (cut to whole pages) in the tree: how many were there already, and the node they end on.

        The new tokens are the caller's computed KV, now the tree's: the pool does not change.
        """
        n = self._aligned(len(tokens))
        if self.disable or n == 0:
            return 0, self.root
        key = tuple(tokens[:n])
        now = self._tick()
        pos, node = self._descend(key, now)
        if pos < n:
            leaf = self._node(key[pos:], node)
            leaf.last_access = now
            node.children[self._child_key(leaf.key, 0)] = leaf
            self.evictable_size += n - pos
            self._update_leaf(node)
            self._update_leaf(leaf)
            return pos, leaf
        return pos, node

    def inc_lock_ref(self, node: TreeNode) -> None:
        """A request uses the path from the root to ``node``: none of it can be evicted until it lets go."""
        if self.disable:
            return
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
            node.lock_ref += 1
            self._update_leaf(node)
            assert node.parent is not None
            node = node.parent

    def dec_lock_ref(self, node: TreeNode) -> None:
        """The request that locked ``node``'s path lets go of it."""
        if self.disable:
            return
        while node is not self.root:
            if node.lock_ref <= 0:
                raise RuntimeError(f"radix cache: {node} unlocked more often than it was locked")
            if node.lock_ref == 1:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
            node.lock_ref -= 1
            self._update_leaf(node)
            assert node.parent is not None
            node = node.parent

    def evict(self, num_tokens: int) -> int:
        """Evict least-recently-used unlocked leaves until ``num_tokens`` are freed (or none is left); tokens freed."""
        if self.disable or num_tokens <= 0:
            return 0
        heap = [(x.last_access, x.id, x) for x in self._evictable_leaves]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, x = heapq.heappop(heap)
            parent = x.parent
            assert parent is not None and x.lock_ref == 0 and not x.children
            del parent.children[self._child_key(x.key, 0)]
            self._evictable_leaves.discard(x)
            self.evictable_size -= len(x.key)
            self.pool.give_back(len(x.key))
            freed += len(x.key)
            self._update_leaf(parent)
            if parent in self._evictable_leaves:
                heapq.heappush(heap, (parent.last_access, parent.id, parent))
        return freed

    def evict_for(self, num_tokens: int) -> None:
        """Make ``num_tokens`` free in the pool if eviction can (SGLang's evict_from_tree_cache: the shortfall only)."""
        short = num_tokens - self.pool.available
        if short > 0:
            self.evict(short)

    # ---- inspection ------------------------------------------------------------------------------
    def total_size(self) -> int:
        """Tokens held by the tree's nodes."""
        total, stack = 0, [self.root]
        while stack:
            node = stack.pop()
            total += len(node.key)
            stack.extend(node.children.values())
        return total

    def nodes(self) -> list[TreeNode]:
        """Every node but the root, parents before children."""
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out

    def check(self) -> None:
        """Raise if the counters disagree with the tree (a property test's and a debugging run's check)."""
        evictable = sum(len(x.key) for x in self.nodes() if x.lock_ref == 0)
        protected = sum(len(x.key) for x in self.nodes() if x.lock_ref > 0)
        leaves = {x for x in self.nodes() if x.lock_ref == 0 and not x.children}
        if (evictable, protected) != (self.evictable_size, self.protected_size) or leaves != self._evictable_leaves:
            raise RuntimeError(f"radix cache counters: evictable {self.evictable_size} vs {evictable}, "
                               f"protected {self.protected_size} vs {protected}")
        for x in self.nodes():
            assert x.parent is not None and x.parent.children.get(self._child_key(x.key, 0)) is x
            if len(x.key) % self.page_size or not x.key:
                raise RuntimeError(f"radix cache: {x} is not a whole number of pages")
            if x.children and x.lock_ref < max(c.lock_ref for c in x.children.values()):
                raise RuntimeError(f"radix cache: {x} is locked less than its children")
