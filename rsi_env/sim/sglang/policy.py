"""`SchedulePolicy`: the order SGLang's scheduler tries waiting requests in (``managers/schedule_policy.py``, 0.5.17).

- ``fcfs``: the queue as it stands (arrivals are appended; a retracted request goes back to the end).
- ``lpm``: longest cached prefix first. A request that finds at most 32 tokens in the cache but shares at least 32
  with a request ahead of it in the queue waits (in-batch prefix caching: the first one computes the prefix, the rest
  then find it cached). Above 128 waiting requests the matching is skipped and the queue is left as it stands.
- ``dfs-weight``: a depth-first walk of the radix tree, heavier subtrees (more waiting requests ending in them)
  first; the requests ending on a node follow those of its subtrees.
- ``lof``: longest output (``max_new_tokens``) first. ``random``: a shuffle, from the run's seed.
- ``routing-key``: requests whose routing key the running batch holds go first; no request here has a key, so
  the queue stands (as fcfs).

A cache-aware policy with the radix cache disabled is fcfs, as in SGLang. Sorts are stable, as Python's.
"""

from __future__ import annotations

import numpy as np

from rsi_env.sim.sglang.kv_pool import TokenPool
from rsi_env.sim.sglang.radix import RadixCache, TreeNode
from rsi_env.sim.sglang.request import Req

__all__ = ["IN_BATCH_CHECK_THRESHOLD", "IN_BATCH_DEPRIORITIZE_THRESHOLD", "LPM_MAX_QUEUE", "SchedulePolicy"]

IN_BATCH_CHECK_THRESHOLD = 32
IN_BATCH_DEPRIORITIZE_THRESHOLD = 32
LPM_MAX_QUEUE = 128


class SchedulePolicy:
    """Sorts the waiting queue in place before each prefill batch is formed."""

    def __init__(self, policy: str, cache: RadixCache, seed: int = 0) -> None:
        if policy in ("lpm", "dfs-weight") and cache.disable:
            policy = "fcfs"
        self.policy = policy
        self.cache = cache
        self.rng = np.random.default_rng(seed)

    def calc_priority(self, waiting: list[Req]) -> None:
        p = self.policy
        if p in ("fcfs", "routing-key") or (p == "lpm" and len(waiting) > LPM_MAX_QUEUE):
            return
        if p == "lof":
            waiting.sort(key=lambda r: -r.output_len)
        elif p == "random":
            order = self.rng.permutation(len(waiting))
            waiting[:] = [waiting[k] for k in order]
        elif p == "lpm":
            self._longest_prefix(waiting)
        elif p == "dfs-weight":
            self._dfs_weight(waiting)
        else:
            raise ValueError(f"Unknown schedule_policy: policy={p!r}")

    def _match(self, r: Req) -> tuple[int, TreeNode]:
        fill = r.fill_ids()
        return self.cache.match_prefix(fill[:len(fill) - 1])

    def _longest_prefix(self, waiting: list[Req]) -> None:
        in_queue = RadixCache(TokenPool(1 << 62, 1))
        matched: dict[int, float] = {}
        for r in waiting:
            n, _ = self._match(r)
            matched[r.i] = -n
            if n <= IN_BATCH_CHECK_THRESHOLD:
                fill = r.fill_ids()
                if in_queue.match_prefix(fill)[0] >= IN_BATCH_DEPRIORITIZE_THRESHOLD:
                    matched[r.i] = float("inf")
                else:
                    in_queue.insert(fill)
        waiting.sort(key=lambda r: matched[r.i])

    def _dfs_weight(self, waiting: list[Req]) -> None:
        by_node: dict[TreeNode, list[Req]] = {}
        for r in waiting:
            by_node.setdefault(self._match(r)[1], []).append(r)
        root = self.cache.root
        weight: dict[TreeNode, int] = {node: len(rs) for node, rs in by_node.items()}
        for node in reversed(self.cache.nodes()):  # children before parents
            assert node.parent is not None
            weight[node.parent] = weight.get(node.parent, 0) + weight.get(node, 0)
        out: list[Req] = []
        # Post-order walk, heavier children first: a node's requests follow its whole subtree.
        stack: list[tuple[TreeNode, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                out.extend(by_node.get(node, ()))
                continue
            stack.append((node, True))
            children = sorted(node.children.values(), key=lambda c: -weight.get(c, 0))
            stack.extend((c, False) for c in reversed(children))
        waiting[:] = out
