"""`Req`: one request as SGLang's scheduler holds it (``schedule_batch.Req``), reduced to what the simulation needs.

Token ids are the workload's exact prompt (`rsi_env.engine.workload.Trace.prompt_token_ids`) and a seeded draw for
its output (greedy decoding of a dummy-weight model makes ids nobody can predict; only prefixes matter here). Every
request runs to exactly its output length (the real tier sends ``ignore_eos``).

KV bookkeeping follows SGLang's: ``kv`` tokens of the request's row are computed; the first ``protected`` of them
belong to the radix tree under ``last_node`` (locked by this request), the rest of the row's allocated pages
(``alloc - protected``) are the request's own.
"""

from __future__ import annotations

import math

from rsi_env.sim.sglang.radix import TreeNode

__all__ = ["Req"]


class Req:
    """A request's tokens, progress and KV row."""

    __slots__ = ("alloc", "arrival", "cached_tokens", "extend", "finish", "first_token", "generated", "i",
                 "kv", "last_node", "output_ids", "output_len", "prefix", "prompt", "protected", "retractions")

    def __init__(self, i: int, prompt: tuple[int, ...], output_ids: tuple[int, ...], arrival: float) -> None:
        self.i = i
        self.prompt = prompt
        self.output_ids = output_ids
        self.output_len = len(output_ids)
        self.arrival = arrival
        self.generated = 0       # output tokens sampled so far (len(req.output_ids) in SGLang)
        self.kv = 0              # tokens of the row whose KV is computed
        self.alloc = 0           # tokens of the row allocated (whole pages)
        self.prefix = 0          # tokens matched in the tree at admission (len(prefix_indices))
        self.protected = 0       # tokens of the row that belong to the tree (cache_protected_len)
        self.last_node: TreeNode | None = None
        self.extend = 0          # tokens this prefill batch computes
        self.cached_tokens = -1  # tokens found in the cache at first admission (-1: not admitted yet)
        self.retractions = 0
        self.first_token = math.nan
        self.finish = math.nan

    def fill_ids(self) -> tuple[int, ...]:
        """The tokens a prefill computes: the prompt and what was generated before a retraction."""
        return self.prompt + self.output_ids[:self.generated] if self.generated else self.prompt

    def fill_len(self) -> int:
        return len(self.prompt) + self.generated

    @property
    def max_new_left(self) -> int:
        """Output tokens still to sample."""
        return self.output_len - self.generated

    @property
    def own(self) -> int:
        """Slots of the pool this request holds outside the tree."""
        return self.alloc - self.protected

    def __repr__(self) -> str:
        return f"Req({self.i}, fill={self.fill_len()}, kv={self.kv}, gen={self.generated}/{self.output_len})"
