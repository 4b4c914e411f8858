"""The running requests in their decode phase, kept as one group that advances a token per step together.

In a step that schedules every decoding request, each computes one token: its computed tokens grow by one, its
tokens left to generate shrink by one, and it needs a new KV block exactly when its computed tokens were a multiple
of the block size. So the group keeps each member's counts relative to a shared step counter (``computed = base +
steps``) and the sums a step is priced and allocated by (the context the batch reads, the blocks it needs, the next
finish), updated when a member joins or leaves, never rebuilt: a step or a span of steps costs the same for a batch
of ten or of a thousand. The engine (`rsi_env.sim.engine`) keeps the other running requests (prompts still being
computed) one by one.

A member's ``known`` tokens (prompt and output so far) are always ``computed + 1``: the token it decodes next.
Members leave in the order they were admitted (their ``seq``), as vLLM's running queue has them.
"""

from __future__ import annotations

import heapq

__all__ = ["DecodeGroup"]


class DecodeGroup:
    """Decoding requests advanced in lockstep: counts relative to ``steps``, and the sums steps are priced by."""

    def __init__(self, block_size: int, window: int | None, num_requests: int) -> None:
        self.bs = block_size
        self.window = window  # a sliding-window model's attended context (None: the whole context)
        self.steps = 0  # decode steps the group has taken: a member's computed tokens are its base + steps
        self.n = 0  # members
        # Per request (by id): computed tokens - steps, tokens left to generate + steps (it finishes at that step),
        # and its admission number while a member (-1 otherwise).
        self.base = [0] * num_requests
        self.out_base = [0] * num_requests
        self.seq = [-1] * num_requests
        self._base_sum = 0
        # Members by (computed - 1) mod block size, at steps == 0: which of them cross into a new block when.
        self._phase = [0] * block_size
        self._finish: list[tuple[int, int, int]] = []  # (out_base, seq, request), stale entries skipped
        self.no_first: list[int] = []  # members whose first token is still to come (their prompt's last token next)
        # Sliding window: members whose context has reached the window (they read the window's worth from then on).
        self._below: list[tuple[int, int, int]] = []  # (-base, seq, request) of members below the window
        self._saturated: set[int] = set()
        self._below_sum = 0

    def __len__(self) -> int:
        return self.n

    # ---- membership ------------------------------------------------------------------------------
    def add(self, i: int, computed: int, out_left: int, seq: int, has_first: bool) -> None:
        """Request ``i`` decodes from now on (``computed`` tokens, ``out_left`` still to generate)."""
        b = computed - self.steps
        ob = out_left + self.steps
        self.base[i] = b
        self.out_base[i] = ob
        self.seq[i] = seq
        self.n += 1
        self._base_sum += b
        self._phase[(b - 1) % self.bs] += 1
        heapq.heappush(self._finish, (ob, seq, i))
        if not has_first:
            self.no_first.append(i)
        if self.window is not None:
            if computed + 1 >= self.window:
                self._saturated.add(i)
            else:
                heapq.heappush(self._below, (-b, seq, i))
                self._below_sum += b

    def add_many(self, members: list[tuple[int, int, int, int, bool]]) -> None:
        """Several requests join at once, ``(request, computed, out_left, seq, has_first)`` each: `add` for each,
        with the finish order built in one pass."""
        g, bs, window = self.steps, self.bs, self.window
        base, out_base, seqs, phase, fin = self.base, self.out_base, self.seq, self._phase, self._finish
        total = 0
        for i, computed, out_left, seq, has_first in members:
            b = computed - g
            base[i] = b
            out_base[i] = out_left + g
            seqs[i] = seq
            total += b
            phase[(b - 1) % bs] += 1
            fin.append((out_left + g, seq, i))
            if not has_first:
                self.no_first.append(i)
            if window is not None:
                if computed + 1 >= window:
                    self._saturated.add(i)
                else:
                    heapq.heappush(self._below, (-b, seq, i))
                    self._below_sum += b
        self.n += len(members)
        self._base_sum += total
        heapq.heapify(fin)

    def remove(self, i: int) -> tuple[int, int]:
        """Take request ``i`` out of the group: its (computed tokens, tokens left to generate) now."""
        b = self.base[i]
        self.seq[i] = -1
        self.n -= 1
        if self.no_first and i in self.no_first:
            self.no_first.remove(i)
        self._base_sum -= b
        self._phase[(b - 1) % self.bs] -= 1
        if self.window is not None:
            if i in self._saturated:
                self._saturated.discard(i)
            else:
                self._below_sum -= b
        return b + self.steps, self.out_base[i] - self.steps

    def remove_all(self) -> list[tuple[int, int, int]]:
        """Empty the group: ``(request, computed, out_left)`` of every member."""
        g, seq = self.steps, self.seq
        out = [(i, self.base[i] + g, self.out_base[i] - g) for _, s, i in self._finish if seq[i] == s]
        for i, _, _ in out:
            seq[i] = -1
        self.n = 0
        self._base_sum = 0
        self._phase = [0] * self.bs
        self._finish.clear()
        self.no_first.clear()
        self._below.clear()
        self._saturated.clear()
        self._below_sum = 0
        return out

    # ---- what the next steps need ---------------------------------------------------------------------
    def context(self) -> int:
        """Tokens the next step's decode attention reads: each member's context with its new token (to the window)."""
        n = self.n
        if self.window is None:
            return self._base_sum + n * (self.steps + 1)
        w, g, below = self.window, self.steps, self._below
        while below:
            nb, seq, i = below[0]
            if self.seq[i] != seq or i in self._saturated:  # left the group since
                heapq.heappop(below)
                continue
            if -nb + g + 1 < w:
                break
            heapq.heappop(below)
            self._saturated.add(i)
            self._below_sum -= -nb
        sat = len(self._saturated)
        return self._below_sum + (n - sat) * (g + 1) + sat * w

    def new_blocks(self, k: int) -> int:
        """KV blocks the group needs for ``k`` more decode steps (a member crosses into a new block every block size)."""
        bs = self.bs
        full, r = divmod(k, bs)
        total = full * self.n if full else 0
        if r:
            # A member whose (computed - 1) mod bs is s crosses within r steps when s + r >= bs: s in [bs - r, bs),
            # the members of phases [start, start + r) (circular) at steps == 0.
            phase = self._phase
            start = (bs - r - self.steps) % bs
            end = start + r
            total += sum(phase[start:end]) if end <= bs else sum(phase[start:]) + sum(phase[:end - bs])
        return total

    def steps_to_finish(self) -> int:
        """Decode steps until the next member finishes (its last token generated)."""
        fin = self._finish
        while True:
            ob, seq, i = fin[0]
            if self.seq[i] == seq and self.out_base[i] == ob:
                return ob - self.steps
            heapq.heappop(fin)

    # ---- advancing ------------------------------------------------------------------------------------
    def advance(self, k: int) -> list[tuple[int, int]]:
        """Every member computes ``k`` more tokens; those that generated their last token leave: ``(request,
        computed)`` in admission order."""
        self.steps += k
        self.no_first.clear()
        done = []
        fin, g = self._finish, self.steps
        while fin and fin[0][0] <= g:
            ob, seq, i = heapq.heappop(fin)
            if self.seq[i] == seq and self.out_base[i] == ob:
                done.append((i, self.remove(i)[0]))
        return done
