"""The paged KV cache as arrays: vLLM's block pool with its prefix cache and LRU eviction, counted in blocks.

vLLM hashes every full block by its tokens and its prefix; blocks nobody references stay cached and evictable until an
allocation takes them, least recently freed first, after the blocks that hold no hash. The simulator needs no token
ids: a block's identity is its place in a *chain*, a workload's shared prefix (chain ``g`` for prefix group ``g``) or
one request's own blocks, kept after a preemption so that it hits them on its return (chain ``ngroups + i``). A
chain's cached blocks are a count from its start, evicted from its tail, as vLLM's reverse-order freeing does.

The pool's state:

- ``ps``: counts, `PS_FREE` (blocks that hold no hash), `PS_EVICTABLE` (cached blocks of unreferenced chains),
  `PS_OWNED` (blocks requests own, outside any chain), and `PS_FAILED` (an allocation beyond the free blocks: the
  loop stops and the engine raises vLLM's error, with `PS_ASKED` and `PS_HAD`);
- per chain: ``cached`` (its cached length), ``refs`` (the running requests that reference it), ``in_lru``, and the
  LRU order of the unreferenced chains with cached blocks, a doubly linked list (``prv``, ``nxt``) whose sentinel is
  chain ``S`` (its ``nxt``: the least recently freed).

Invariant (`broken`, checked after every step under ``check_invariants``): ``free + evictable + owned + the cached
blocks of referenced chains == num_blocks``, and ``evictable`` is the cached blocks of the chains in the LRU list.

Per request (`release`, `lookup`, `extend_prefix`): the blocks of its shared prefix it references (``shared``), the
prefix blocks it has accounted for (``chain_pos``), whether it holds its group's chain (``in_group``).
"""

from __future__ import annotations

from rsi_env.sim.vllm.jit import njit

__all__ = ["PS_ASKED", "PS_EVICTABLE", "PS_FAILED", "PS_FREE", "PS_HAD", "PS_OWNED", "PS_SIZE"]

PS_FREE, PS_EVICTABLE, PS_FAILED, PS_OWNED, PS_ASKED, PS_HAD = range(6)
PS_SIZE = 6


@njit
def cdiv(x, bs):
    """Blocks of ``bs`` tokens that ``x`` tokens fill."""
    return -(-x // bs)


@njit
def lru_unlink(c, prv, nxt, in_lru):
    """Chain ``c`` leaves the LRU list."""
    p = prv[c]
    q = nxt[c]
    nxt[p] = q
    prv[q] = p
    in_lru[c] = False


@njit
def lru_append(c, prv, nxt, in_lru, S):
    """Chain ``c`` joins the LRU list as the most recently freed."""
    t = prv[S]
    nxt[t] = c
    prv[c] = t
    nxt[c] = S
    prv[S] = c
    in_lru[c] = True


@njit
def take(n, ps, cached, prv, nxt, in_lru, S):
    """Allocate ``n`` blocks to one request: blocks without a hash first, then evict the least recently freed
    chain's tail. Beyond the free blocks: `PS_FAILED` (the loop stops there)."""
    if n <= 0:
        return
    if n > ps[PS_FREE] + ps[PS_EVICTABLE]:
        ps[PS_FAILED] = 1
        ps[PS_ASKED] = n
        ps[PS_HAD] = ps[PS_FREE] + ps[PS_EVICTABLE]
        return
    ps[PS_OWNED] += n
    use = min(n, ps[PS_FREE])
    ps[PS_FREE] -= use
    n -= use
    while n:
        c = nxt[S]
        have = cached[c]
        k = min(n, have)
        cached[c] = have - k
        ps[PS_EVICTABLE] -= k
        n -= k
        if have == k:
            lru_unlink(c, prv, nxt, in_lru)


@njit
def acquire(c, ps, cached, refs, prv, nxt, in_lru):
    """A request references chain ``c``: its cached blocks are no longer evictable."""
    if refs[c] == 0 and in_lru[c]:
        lru_unlink(c, prv, nxt, in_lru)
        ps[PS_EVICTABLE] -= cached[c]
    refs[c] += 1


@njit
def unacquire(c, ps, cached, refs, prv, nxt, in_lru, S):
    """A request lets chain ``c`` go; its last reference gone, its cached blocks become evictable."""
    refs[c] -= 1
    if refs[c]:
        return
    if cached[c]:
        if not in_lru[c]:
            lru_append(c, prv, nxt, in_lru, S)
        ps[PS_EVICTABLE] += cached[c]


@njit
def claim(c, ps, cached, prv, nxt, in_lru):
    """A returning request takes its private chain ``c``'s cached blocks back as its own; returns how many."""
    n = cached[c]
    cached[c] = 0
    ps[PS_OWNED] += n
    if in_lru[c]:
        lru_unlink(c, prv, nxt, in_lru)
        ps[PS_EVICTABLE] -= n
    return n


@njit
def park(c, n, ps, cached, prv, nxt, in_lru, S):
    """A preempted request's ``n`` full blocks stay cached as its private chain ``c``, evictable."""
    if n <= 0:
        return
    cached[c] += n
    ps[PS_OWNED] -= n
    if in_lru[c]:
        lru_unlink(c, prv, nxt, in_lru)
    lru_append(c, prv, nxt, in_lru, S)
    ps[PS_EVICTABLE] += n


@njit
def broken(num_blocks, ps, cached, refs, in_lru):
    """True when the pool's invariant does not hold (blocks leaked or over-committed)."""
    held = 0
    lru = 0
    for c in range(cached.shape[0]):
        if refs[c] > 0:
            held += cached[c]
        if in_lru[c]:
            lru += cached[c]
    if lru != ps[PS_EVICTABLE] or ps[PS_FREE] < 0 or ps[PS_EVICTABLE] < 0 or ps[PS_OWNED] < 0:
        return True
    return ps[PS_FREE] + ps[PS_EVICTABLE] + ps[PS_OWNED] + held != num_blocks


@njit
def release(i, preempt, caching, bs, ngroups, comp, shared, in_group, chain_pos, group, ps, cached, refs, prv, nxt,
            in_lru, S):
    """Free request ``i``'s blocks (those covering its computed tokens); after a preemption, with prefix caching, its
    full blocks stay cached for its return (`park`)."""
    owned = cdiv(comp[i], bs) - shared[i]
    if preempt and caching:
        full = max(comp[i] // bs - shared[i], 0)
        full = min(full, owned)
        park(ngroups + i, full, ps, cached, prv, nxt, in_lru, S)
        owned -= full
    ps[PS_FREE] += owned
    ps[PS_OWNED] -= owned
    if in_group[i]:
        unacquire(group[i], ps, cached, refs, prv, nxt, in_lru, S)
        in_group[i] = False
    shared[i] = 0
    chain_pos[i] = 0


@njit
def extend_prefix(i, upto, bs, pblocks, chain_pos, in_group, group, shared, cached, ps):
    """Blocks of its shared prefix that request ``i`` now covers (``upto`` tokens computed) join its group's chain."""
    pb = pblocks[i]
    pos = chain_pos[i]
    if pos >= pb or not in_group[i]:
        return
    covered = min(pb, upto // bs)
    if covered <= pos:
        return
    g = group[i]
    if cached[g] == pos:
        cached[g] += covered - pos
        ps[PS_OWNED] -= covered - pos
        shared[i] += covered - pos
    chain_pos[i] = covered


@njit
def lookup(i, caching, bs, ngroups, known, pblocks, group, was_preempted, cached, in_lru, out3):
    """The prefix-cache hit of waiting request ``i``, capped at its tokens less one, into ``out3``: (its group's chain
    blocks, its private chain's blocks, free blocks the hit takes out of the free count)."""
    out3[0] = 0
    out3[1] = 0
    out3[2] = 0
    if not caching:
        return
    cap = (known[i] - 1) // bs
    pb = pblocks[i]
    g = group[i]
    hg = min(cached[g], pb, cap) if (g >= 0 and pb > 0) else 0
    touch = hg if (hg > 0 and in_lru[g]) else 0
    hp = 0
    priv = ngroups + i
    if was_preempted[i] and hg == pb:
        hp = min(cached[priv], cap - hg)
        if hp > 0 and in_lru[priv]:
            touch += hp
    out3[0] = hg
    out3[1] = hp
    out3[2] = touch
