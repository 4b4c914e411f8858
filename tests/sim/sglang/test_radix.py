"""The SGLang sim's radix cache: pool slots conserved, no leaks, matches, LRU eviction that spares locked paths."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_env.sim.sglang.kv_pool import TokenPool
from rsi_env.sim.sglang.radix import RadixCache, TreeNode, common_prefix_len, repeated_path_tokens

# Few distinct token ids, so random prompts share prefixes and the tree splits and merges paths.
prompts = st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=24), min_size=1, max_size=30)


@dataclass
class Held:
    """What a request holds, as the scheduler keeps it: its tokens, its locked node, its slots outside the tree."""

    tokens: list[int]
    node: TreeNode
    protected: int
    own: int


def start(cache: RadixCache, tokens: list[int]) -> Held | None:
    """Admit a request as SGLang does: match, lock, allocate the rest of its row in whole pages (None: no room)."""
    prefix, node = cache.match_prefix(tokens[:-1])
    cache.inc_lock_ref(node)
    own = cache.pool.pages(len(tokens)) - prefix
    cache.evict_for(own)
    if cache.pool.available < own:
        cache.dec_lock_ref(node)
        return None
    cache.pool.take(own)
    return Held(tokens, node, prefix, own)


def finish(cache: RadixCache, h: Held) -> None:
    """Finish it: its whole pages go into the tree, what the tree had already and the partial page go back."""
    found, _ = cache.insert(h.tokens)
    aligned = len(h.tokens) // cache.page_size * cache.page_size if not cache.disable else 0
    moved = aligned - found if not cache.disable else 0
    cache.pool.give_back(h.own - moved)
    cache.dec_lock_ref(h.node)


def conserved(cache: RadixCache, held: list[Held]) -> bool:
    return cache.pool.available + cache.total_size() + sum(h.own for h in held) == cache.pool.size


@settings(max_examples=150, deadline=None)
@given(prompts, st.sampled_from([1, 2, 4]), st.integers(8, 200), st.lists(st.booleans(), max_size=60),
       st.booleans())
def test_slots_are_conserved_and_none_leak(tokens, page, size, finish_first, disable):
    """free + in the tree + held by requests == the pool after every step; every request done, nothing is held."""
    cache = RadixCache(TokenPool(size, page), disable=disable)
    held: list[Held] = []
    flips = iter(finish_first)
    for t in tokens:
        if held and next(flips, False):
            finish(cache, held.pop(0))
        h = start(cache, t)
        if h is not None:
            held.append(h)
        cache.check()
        assert conserved(cache, held)
    while held:
        finish(cache, held.pop())
        cache.check()
        assert conserved(cache, held)
    assert cache.protected_size == 0
    assert cache.evictable_size == cache.total_size()
    cache.evict(cache.pool.size)
    assert cache.total_size() == 0 and cache.pool.available == cache.pool.size


@settings(max_examples=150, deadline=None)
@given(prompts, st.sampled_from([1, 2, 4]))
def test_a_match_after_an_insert_finds_the_inserted_pages(tokens, page):
    cache = RadixCache(TokenPool(10_000, page))
    for t in tokens:
        cache.insert(t)
        n, node = cache.match_prefix(t)
        assert n == len(t) // page * page
        path = []
        while node is not cache.root:
            path[:0] = node.key
            node = node.parent
        assert path == t[:n]
        cache.check()


@settings(max_examples=150, deadline=None)
@given(prompts, st.integers(0, 29), st.sampled_from([1, 2]))
def test_eviction_never_takes_a_locked_node(tokens, pick, page):
    cache = RadixCache(TokenPool(10_000, page))
    held = []
    for t in tokens:
        h = start(cache, t)
        assert h is not None
        held.append(h)
    locked = held[pick % len(held)]
    for h in held:
        if h is not locked:
            finish(cache, h)
    before = cache.pool.available
    freed = cache.evict(10_000)
    assert cache.pool.available == before + freed
    assert all(x.lock_ref > 0 for x in cache.nodes())  # only the locked path is left
    assert cache.total_size() == cache.protected_size == locked.protected
    cache.check()


def test_eviction_takes_the_least_recently_used_leaf_first():
    cache = RadixCache(TokenPool(100, 1))
    for t in ([1, 1, 1], [2, 2, 2], [3, 3, 3]):
        cache.insert(t)
    cache.pool.take(9)  # the tree's tokens came out of the pool
    cache.match_prefix([1, 1, 1])  # [1,1,1] is now the most recent; [2,2,2] the least
    assert cache.evict(1) == 3
    assert cache.match_prefix([2, 2, 2])[0] == 0
    assert cache.match_prefix([1, 1, 1])[0] == 3 and cache.match_prefix([3, 3, 3])[0] == 3


def test_a_match_inside_a_node_splits_it_on_a_page_boundary():
    cache = RadixCache(TokenPool(100, 2))
    cache.insert([5, 6, 7, 8, 9, 10])
    n, node = cache.match_prefix([5, 6, 7, 9, 9])  # shares 3 tokens, 1 whole page
    assert n == 2 and node.key == (5, 6)
    cache.check()


def test_the_disabled_cache_matches_and_keeps_nothing():
    cache = RadixCache(TokenPool(100, 1), disable=True)
    assert cache.insert([1, 2, 3]) == (0, cache.root)
    assert cache.match_prefix([1, 2, 3])[0] == 0 and cache.total_size() == 0


def test_unlocking_more_than_locked_is_refused():
    cache = RadixCache(TokenPool(100, 1))
    _, node = cache.insert([1, 2])
    with pytest.raises(RuntimeError, match="unlocked more often"):
        cache.dec_lock_ref(node)


@given(st.lists(st.integers(0, 3), max_size=40), st.lists(st.integers(0, 3), max_size=40), st.integers(0, 5))
def test_common_prefix_len_is_the_shared_head(a, b, start):
    start = min(start, len(a))
    n = common_prefix_len(tuple(a), start, tuple(b))
    assert a[start:start + n] == b[:n]
    assert n == min(len(a) - start, len(b)) or a[start + n] != b[n]


@settings(max_examples=150, deadline=None)
@given(prompts, st.sampled_from([1, 2, 4]))
def test_repeated_path_tokens_counts_each_shared_token_once_per_extra_path(tokens, page):
    """Against a trie of the matched prefixes themselves, page by page (the tree shares whole pages): their lengths'
    sum less a page for every distinct page-aligned prefix."""
    cache = RadixCache(TokenPool(10_000, page))
    for t in tokens:
        cache.insert(t)
    matched = [cache.match_prefix(t) for t in tokens]
    distinct = {tuple(t[:k]) for t, (n, _) in zip(tokens, matched, strict=True) for k in range(page, n + 1, page)}
    expected = sum(n for n, _ in matched) - page * len(distinct)
    assert repeated_path_tokens(node for _, node in matched) == expected >= 0
    assert repeated_path_tokens([matched[0][1]]) == 0  # one path repeats nothing
    assert repeated_path_tokens([None, cache.root]) == 0  # no node, or the root: no tokens
