"""The decode group: the running requests in their decode phase, one token each per step, kept as one.

Each member's counts are relative to the group's step counter ``g``: member ``i`` has computed ``base[i] + g`` tokens
and is done at ``g == out_base[i]``. The sums a step needs are kept as members join and leave: the context the batch
reads (``base_sum``; with a sliding window, the members below it in a heap, ``below``, and those at it counted in
``ws``), the KV blocks the next k steps need, by the phase of each member's block (``phase``: members per position
of their last token in its block), and the next finish (``heap`` of (out_base, seq, id), stale entries skipped). A
decode step or span so costs the same for ten requests or a thousand. ``seq[i]`` is request ``i``'s admission number:
its place in the running order.
"""

from __future__ import annotations

import heapq

from rsi_env.sim.vllm.jit import njit

__all__: list[str] = []


@njit
def new_blocks(k, ndec, bs, g, phase):
    """KV blocks the ``ndec`` members need for their next ``k`` tokens: one per full ``bs`` steps each, plus one for
    each member whose block fills within the remaining steps (by phase)."""
    full = k // bs
    r = k - full * bs
    total = full * ndec
    if r:
        start = (bs - r - g) % bs
        end = start + r
        if end <= bs:
            for s in range(start, end):
                total += phase[s]
        else:
            for s in range(start, bs):
                total += phase[s]
            for s in range(0, end - bs):
                total += phase[s]
    return total


@njit
def context(W, ndec, g, base_sum, below, ws, is_sat, is_dec, seq):
    """The context the group's next step reads. With a window ``W`` (0: none), members whose context reached it leave
    the below-window heap (largest base first) for the saturated ones. ``ws``: [sum of the bases below the window,
    saturated members]."""
    if W == 0:
        return base_sum + ndec * (g + 1)
    while below:
        nb, sq, i = below[0]
        if not is_dec[i] or seq[i] != sq or is_sat[i]:  # left the group since
            heapq.heappop(below)
            continue
        if -nb + g + 1 < W:
            break
        heapq.heappop(below)
        is_sat[i] = True
        ws[1] += 1
        ws[0] -= -nb
    return ws[0] + (ndec - ws[1]) * (g + 1) + ws[1] * W


@njit
def steps_to_finish(g, heap, is_dec, seq, out_base):
    """Steps until the group's next finish (stale heap entries dropped)."""
    while True:
        ob, sq, i = heap[0]
        if is_dec[i] and seq[i] == sq and out_base[i] == ob:
            return ob - g
        heapq.heappop(heap)


@njit
def join(i, g, ndec, base_sum, bs, W, comp, out_left, seq, base, out_base, is_dec, phase, heap, below, ws,
         is_sat):
    """Request ``i``, its prompt computed, joins the group; returns (members, sum of their bases)."""
    b = comp[i] - g
    base[i] = b
    out_base[i] = out_left[i] + g
    is_dec[i] = True
    ndec += 1
    base_sum += b
    phase[(b - 1) % bs] += 1
    heapq.heappush(heap, (out_base[i], seq[i], i))
    if W:
        if comp[i] + 1 >= W:
            is_sat[i] = True
            ws[1] += 1
        else:
            heapq.heappush(below, (-b, seq[i], i))
            ws[0] += b
    return ndec, base_sum


@njit
def leave_finished(g, ndec, base_sum, bs, W, heap, is_dec, seq, base, out_base, phase, is_sat, ws, comp, known,
                   out_left, fin, nf):
    """Members done at step counter ``g`` leave the group, their counts back in the per-request arrays, and are
    appended to ``fin`` (after its first ``nf``); returns (finished so far, members, sum of their bases)."""
    while heap and heap[0][0] <= g:
        ob, sq, i = heapq.heappop(heap)
        if is_dec[i] and seq[i] == sq and out_base[i] == ob:
            b = base[i]
            is_dec[i] = False
            ndec -= 1
            base_sum -= b
            phase[(b - 1) % bs] -= 1
            if W:
                if is_sat[i]:
                    is_sat[i] = False
                    ws[1] -= 1
                else:
                    ws[0] -= b
            comp[i] = b + g
            known[i] = comp[i] + 1
            out_left[i] = 0
            fin[nf] = i
            nf += 1
    return nf, ndec, base_sum


@njit
def ungroup(run, nrun, g, comp, known, out_left, base, out_base, is_dec, is_sat, pre, phase, heap, below, ws):
    """Every member leaves the group, its counts back in the per-request arrays, for a step that schedules the running
    requests one by one: all of them (``run[:nrun]``) are in ``pre`` then, in running order. Returns how many."""
    for r in range(nrun):
        i = run[r]
        if is_dec[i]:
            comp[i] = base[i] + g
            known[i] = comp[i] + 1
            out_left[i] = out_base[i] - g
            is_dec[i] = False
        is_sat[i] = False
        pre[r] = i
    phase[:] = 0
    heap.clear()
    below.clear()
    ws[0] = 0
    ws[1] = 0
    return nrun
