"""`SglangScheduler`: SGLang 0.5.17's choice of the next batch, and what a finished batch leaves behind.

Read from ``managers/scheduler.py`` (``get_next_batch_to_run``, ``get_new_batch_prefill``,
``update_running_batch``), ``managers/schedule_batch.py`` (``check_decode_mem``, ``retract_decode``,
``release_req``) and ``mem_cache/radix_cache.py`` (``cache_unfinished_req``, ``cache_finished_req``). Mixed chunked
prefill is off (SGLang's default), so a batch is a prefill or a decode, never both:

- a **prefill** batch whenever the `PrefillAdder` admits anything: the chunked request's next chunk first, then the
  waiting queue in the policy's order while the request slots (``max_running_requests``) and the budgets last. A
  refusal for KV room marks the running batch full: no prefill is tried again until a running request leaves (or
  a prefill batch becomes the running batch, a new batch object in SGLang).
- else a **decode** step of the running batch. When its next tokens' pages do not fit even after evicting the
  cache, requests are retracted (fewest tokens generated first; of those, the longest prompt), their KV freed
  without caching, until the step fits (one request always stays); they return to the end of the queue keeping what
  they generated, and recompute it. The new-token ratio is set from the kept batch; otherwise it decays a step.

After a prefill, each request that sampled its first token joins the running batch and its prompt goes into the radix
tree (other requests can share it while it runs); the chunked request's computed chunks go in too. A finished
request's tokens go into the tree, the rest of its row back to the pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from rsi_env.engine.sglang_config import SglangConfig
from rsi_env.sim.sglang.adder import AddResult, PrefillAdder
from rsi_env.sim.sglang.kv_pool import TokenPool
from rsi_env.sim.sglang.policy import SchedulePolicy
from rsi_env.sim.sglang.radix import RadixCache
from rsi_env.sim.sglang.request import Req
from rsi_env.sim.sglang.sizing import SglangPlan
from rsi_env.sim.sglang.token_ratio import RETRACT_DECODE_STEPS, NewTokenRatio

__all__ = ["Batch", "SglangScheduler"]


@dataclass
class Batch:
    """One forward pass: a prefill of ``reqs`` (each computing ``req.extend`` tokens) or a decode step of them."""

    is_prefill: bool
    reqs: list[Req]


class SglangScheduler:
    """The waiting queue, the running batch, the chunked request, the KV pool and its radix tree."""

    def __init__(self, cfg: SglangConfig, plan: SglangPlan, seed: int = 0) -> None:
        self.pool = TokenPool(plan.max_total_num_tokens, plan.page_size)
        self.cache = RadixCache(self.pool, disable=cfg.disable_radix_cache)
        self.policy = SchedulePolicy(cfg.schedule_policy, self.cache, seed)
        self.ratio = NewTokenRatio(cfg.schedule_conservativeness)
        self.max_running = plan.max_running_requests
        self.max_prefill_tokens = plan.max_prefill_tokens
        self.chunk = plan.chunked_prefill_size
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.chunked: Req | None = None
        self.batch_is_full = False
        self.num_retractions = 0
        self.finished: list[Req] = []  # finished by the last `process`
        self.in_flight: list[Req] = []  # the batch `next_batch` returned, until `process` takes it

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running or self.chunked)

    def used_tokens(self) -> int:
        """Slots neither free nor evictable (SGLang's token usage numerator)."""
        return self.pool.size - self.pool.available - self.cache.evictable_size

    # ---- the next batch --------------------------------------------------------------------------
    def next_batch(self) -> Batch | None:
        """A prefill batch if the adder admits anything, else a decode step of the running batch (None: idle)."""
        batch = self._new_prefill_batch()
        if batch is None and self.running:
            batch = self._update_running_batch()
        if batch is None:
            self.ratio.reset()  # SGLang resets the ratio whenever a loop finds nothing to run
        self.in_flight = batch.reqs if batch is not None else []
        return batch

    def _new_prefill_batch(self) -> Batch | None:
        if (self.batch_is_full or not self.waiting) and self.chunked is None:
            return None
        slots = self.max_running - len(self.running)
        if slots <= 0 and self.chunked is None:
            self.batch_is_full = True
            return None
        self.policy.calc_priority(self.waiting)
        adder = PrefillAdder(self.cache, self.running, self.ratio.current, self.max_prefill_tokens, self.chunk)
        if self.chunked is not None:
            self.chunked = adder.add_chunked_req(self.chunked)
        for req in self.waiting:
            if len(adder.can_run) >= slots:
                self.batch_is_full = True
            if self.batch_is_full:
                break
            fill = req.fill_ids()
            req.prefix, req.last_node = self.cache.match_prefix(fill[:len(fill) - 1])
            res = adder.add_one_req(req)
            if res is not AddResult.CONTINUE:
                if res is AddResult.NO_TOKEN:
                    self.batch_is_full = True
                break
        if not adder.can_run:
            return None
        admitted = set(map(id, adder.can_run))
        self.waiting = [r for r in self.waiting if id(r) not in admitted]
        if adder.new_chunked is not None:
            assert self.chunked is None
            self.chunked = adder.new_chunked
        for req in adder.can_run:
            self._alloc_extend(req)
        return Batch(True, adder.can_run)

    def _alloc_extend(self, req: Req) -> None:
        """Allocate the pages a prefill of ``req`` writes (SGLang's prepare_for_extend), evicting as needed."""
        if req.alloc == 0:  # newly admitted: its row starts with the cached prefix, which its lock holds
            req.kv = req.alloc = req.protected = req.prefix
            if req.cached_tokens < 0:
                req.cached_tokens = req.prefix
        need = self.pool.pages(req.kv + req.extend) - req.alloc
        self._take(need)
        req.alloc += need

    def _take(self, tokens: int) -> None:
        self.cache.evict_for(tokens)
        if self.pool.available < tokens:
            raise RuntimeError(f"KV pool out of memory: {tokens} slots needed, {self.pool.available} free and "
                               f"{self.cache.evictable_size} evictable (admission should have prevented it)")
        self.pool.take(tokens)

    def _decode_need(self, reqs: list[Req]) -> int:
        return sum(self.pool.pages(r.kv + 1) - r.alloc for r in reqs)

    def _decode_fits(self, reqs: list[Req]) -> bool:
        need = self._decode_need(reqs)
        self.cache.evict_for(need)
        return self.pool.available >= need

    def _update_running_batch(self) -> Batch:
        if not self._decode_fits(self.running):
            self._retract()
        else:
            self.ratio.decay_step()
        for r in self.running:
            need = self.pool.pages(r.kv + 1) - r.alloc
            self._take(need)
            r.alloc += need
        return Batch(False, list(self.running))

    def _retract(self) -> None:
        """Retract requests until the decode step fits (SGLang's retract_decode), keeping at least one."""
        keep = sorted(self.running, key=lambda r: (r.generated, -len(r.prompt)), reverse=True)
        first = True
        while first or not self._decode_fits(keep):
            if len(keep) == 1:
                break
            first = False
            req = keep.pop()
            self._release(req, insert=False)
            self.cache.evict_for(len(keep) * RETRACT_DECODE_STEPS)
            req.retractions += 1
            self.num_retractions += 1
            self.waiting.append(req)
        if not self._decode_fits(keep):
            raise RuntimeError(f"KV pool of {self.pool.size} tokens cannot decode even one request "
                               f"({keep[0]!r}); SGLang aborts it")
        kept = set(map(id, keep))
        self.running = [r for r in self.running if id(r) in kept]
        self.ratio.after_retract(self.running)
        self.batch_is_full = False

    # ---- after the forward pass ------------------------------------------------------------------
    def process(self, batch: Batch) -> list[Req]:
        """Advance ``batch``'s requests by what the pass computed; returns those that sampled a token."""
        sampled: list[Req] = []
        self.finished = []
        self.in_flight = []
        was_empty = not self.running
        for req in batch.reqs:
            if batch.is_prefill:
                req.kv += req.extend
                if req is self.chunked:  # a middle chunk: no token yet, its chunks go into the tree
                    self._cache_unfinished(req)
                    continue
            else:
                req.kv += 1
            req.generated += 1
            sampled.append(req)
            if req.generated >= req.output_len:
                self._release(req, insert=True)
                self.finished.append(req)
            elif batch.is_prefill:
                self._cache_unfinished(req)
                self.running.append(req)
        if self.finished:
            done = set(map(id, self.finished))
            self.running = [r for r in self.running if id(r) not in done]
            self.batch_is_full = False
        if was_empty and self.running:  # the prefill batch became the running batch, a new one: not full
            self.batch_is_full = False
        return sampled

    def _cache_unfinished(self, req: Req) -> None:
        """Put the request's computed whole pages into the tree and lock them for it (cache_unfinished_req)."""
        if self.cache.disable:
            return
        key = req.fill_ids()[:req.kv]
        found, node = self.cache.insert(key)
        self.pool.give_back(found - req.protected)  # its copies of pages the tree already had
        self.cache.inc_lock_ref(node)
        if req.last_node is not None:
            self.cache.dec_lock_ref(req.last_node)
        req.protected = len(key) // self.pool.page_size * self.pool.page_size
        req.last_node = node

    def _release(self, req: Req, insert: bool) -> None:
        """Free the request's row: with ``insert`` its computed whole pages go into the tree (cache_finished_req)."""
        if insert and not self.cache.disable:
            key = req.fill_ids()[:req.kv]
            found, _ = self.cache.insert(key)
            aligned = len(key) // self.pool.page_size * self.pool.page_size
            self.pool.give_back(req.own - (aligned - found))
        else:
            self.pool.give_back(req.own)
        if req.last_node is not None:
            self.cache.dec_lock_ref(req.last_node)
        req.kv = req.alloc = req.protected = req.prefix = 0
        req.last_node = None

    def check(self) -> None:
        """Raise if slots are not conserved: free + tree + every live request's own == the pool."""
        live = {id(r): r for r in (*self.running, *self.in_flight, *([self.chunked] if self.chunked else []))}
        held = sum(r.own for r in live.values())
        total = self.pool.available + self.cache.total_size() + held
        if total != self.pool.size:
            raise RuntimeError(f"KV slots not conserved: {self.pool.available} free + {self.cache.total_size()} "
                               f"in the tree + {held} held = {total} != {self.pool.size}")
        self.cache.check()
