"""`SglangEngineSim`: SGLang's scheduler loop over one trace, each forward pass priced by the sim's cost model.

One iteration is SGLang's ``event_loop_overlap``: receive the requests that have arrived, pick the next batch
(`SglangScheduler.next_batch`), run it (priced by `rsi_env.sim.cost.StepCost`), then process its result (tokens,
finishes, the radix tree). Nothing to run: wait for the next arrival (``idle`` in the profile).

SGLang's overlap scheduler prepares batch N+1 on the CPU while the GPU runs batch N; the cost model prices that as
it prices vLLM's async scheduling (the slower side sets the step's time, `StepCost.combine`). Its loop picks pass N+1
as soon as pass N is launched, so the choice sees only the requests that had arrived when pass N started (a long
prompt's last chunk runs alone instead of beside a request that came during its first). Not modelled: the same
loop's results of pass N processed after pass N+1 is chosen (a request that finished in N decoded once more in N+1,
a prefix computed in N matched from N+2 on).

Where a prefill follows a decode the device waits for its scheduling: SGLang's clock shows the last decode of a run,
whose loop iteration builds the prefill batch among the running ones, at 13.4 ms against 10.4 ms for a decode
mid-run (many_small, ~255 running, H100), while a prefill after a prefill costs what its kernels do (research/sglang_fit/
engine_clock.py). The sim adds ``cpu_switch_per_req_s`` per running request to such a prefill's wall time, outside
`StepCost.combine`'s overlap (profile part ``engine_cpu``). A decode pass above the largest CUDA graph runs SGLang's
forward eagerly: besides its per-layer launches (`StepCost.dispatch`), ``uncaptured_per_req_s`` per request is added
the same way (0 where the calibration does not fit it).

The cost model's coefficients are SGLang's calibration of the chip where one is fitted, else the chip's vLLM one
(`rsi_env.sim.sglang.simulate.sglang_calibration`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rsi_env.engine.profile import PARTS, Profile
from rsi_env.engine.workload import Trace
from rsi_env.sim.cost import GRAPH_MODES, StepCost
from rsi_env.sim.sglang.radix import repeated_path_tokens
from rsi_env.sim.sglang.request import Req
from rsi_env.sim.sglang.scheduler import Batch, SglangScheduler

__all__ = ["SglangEngineSim", "SglangResult", "make_requests"]


@dataclass
class SglangResult:
    """Per-request timestamps and SGLang's counters of one simulated run."""

    reqs: list[Req]
    num_steps: int
    num_prefill_steps: int
    num_retractions: int
    cached_tokens: int
    prompt_tokens: int
    usage_peak: float  # slots neither free nor evictable, as a fraction of the pool (SGLang's token usage)
    busy_time: float
    running_time_integral: float
    profile: Profile = field(default_factory=Profile)


def make_requests(trace: Trace, vocab_size: int) -> list[Req]:
    """The trace's requests with their exact prompt ids and a seeded draw of output ids."""
    lo = 10 if vocab_size > 100 else 0
    out = []
    for i in range(len(trace)):
        prompt = tuple(trace.prompt_token_ids(i, vocab_size))
        n_out = int(trace.output_len[i])
        ids = np.random.default_rng([trace.seed, 3, i]).integers(lo, vocab_size, n_out)
        out.append(Req(i, prompt, tuple(int(x) for x in ids), float(trace.arrival_s[i])))
    return out


class SglangEngineSim:
    """One SGLang engine, one trace: :meth:`run` simulates until every request has finished."""

    def __init__(self, scheduler: SglangScheduler, cost: StepCost, reqs: list[Req], closed_concurrency: int = 0,
                 check_invariants: bool = False) -> None:
        self.sched = scheduler
        self.cost = cost
        self.reqs = reqs
        self.closed = closed_concurrency
        self.check = check_invariants

    def run(self) -> SglangResult:
        reqs, n = self.reqs, len(self.reqs)
        if self.closed:  # a closed-loop client sends its next request a front-end round trip after the last finished
            for k, r in enumerate(reqs):
                r.arrival = 0.0 if k < self.closed else math.inf
            order = list(range(n))
        else:
            order = sorted(range(n), key=lambda k: reqs[k].arrival)
        self.order, self.next_arr, self.issued = order, 0, min(self.closed, n) if self.closed else n
        self.now = reqs[order[0]].arrival if n else 0.0
        t_first = self.now
        parts = [0.0] * len(PARTS)
        busy = run_int = 0.0
        steps = prefills = done = 0
        usage_peak = 0
        sched = self.sched
        seen = self.now  # arrivals up to here are visible to the next choice (the pass in flight started here)
        after_decode = False  # the pass in flight is a decode
        while done < n:
            self._receive(seen)
            batch = sched.next_batch()
            if batch is None:
                if seen < self.now:  # nothing to add: the loop waits for the pass in flight, then looks again
                    seen = self.now
                    continue
                if self.next_arr >= self.issued:
                    raise RuntimeError(f"scheduler deadlock: {len(sched.waiting)} waiting, none can be scheduled")
                t_arr = max(self.now, reqs[order[self.next_arr]].arrival)
                parts[-1] += t_arr - max(self.now, t_first)
                self.now = seen = t_arr
                continue
            usage_peak = max(usage_peak, sched.used_tokens())
            running = len(sched.running)
            dt = self._price(batch, running, parts, after_decode)
            after_decode = not batch.is_prefill
            seen = self.now  # the overlap loop picks the next pass as soon as this one is launched
            self.now += dt
            busy += dt
            run_int += dt * running
            steps += 1
            prefills += batch.is_prefill
            for r in sched.process(batch):
                if r.first_token != r.first_token:
                    r.first_token = self.now
            for r in sched.finished:
                r.finish = self.now
                done += 1
                if self.closed and self.issued < n:
                    reqs[order[self.issued]].arrival = self.now + self.cost.cal.frontend_s
                    self.issued += 1
            if self.check:
                sched.check()
        self.cost.engine_cpu_rest(parts, busy)
        return SglangResult(
            reqs=reqs, num_steps=steps, num_prefill_steps=prefills, num_retractions=sched.num_retractions,
            cached_tokens=sum(max(r.cached_tokens, 0) for r in reqs),
            prompt_tokens=sum(len(r.prompt) for r in reqs),
            usage_peak=usage_peak / max(sched.pool.size, 1), busy_time=busy, running_time_integral=run_int,
            profile=Profile(*parts))

    def _receive(self, until: float) -> None:
        """Requests that arrived by ``until`` join the waiting queue, in arrival order."""
        reqs, order = self.reqs, self.order
        while self.next_arr < self.issued and reqs[order[self.next_arr]].arrival <= until:
            self.sched.waiting.append(reqs[order[self.next_arr]])
            self.next_arr += 1

    def _price(self, batch: Batch, running: int, parts: list[float], after_decode: bool = False) -> float:
        """The pass's wall time on the cost model (its parts added to ``parts``); a prefill ``after_decode`` waits
        for its scheduling among the ``running`` requests too."""
        cost = self.cost
        if batch.is_prefill:
            tokens = sum(r.extend for r in batch.reqs)
            pairs = sum(cost.chunk_pairs(r.extend, r.kv) for r in batch.reqs)
            ctx = float(sum(r.kv for r in batch.reqs))
            new = sum(1 for r in batch.reqs if r.kv == r.prefix)
            switch = cost.cal.cpu_switch_per_req_s * running if after_decode else 0.0
            return switch + cost.step_time(tokens, len(batch.reqs), running + len(batch.reqs), 0.0, pairs, ctx,
                                           False, new, parts)
        bs = len(batch.reqs)
        ctx = float(sum(r.kv + 1 for r in batch.reqs))
        if cost.cal.kv_shared_read > 0.0:  # a shared prefix's KV read once from HBM, then from L2 (a fraction)
            ctx -= cost.cal.kv_shared_read * repeated_path_tokens(r.last_node for r in batch.reqs)
        t = cost.step_time(bs, bs, bs, ctx, 0.0, 0.0, True, 0, parts)
        if cost.cal.uncaptured_per_req_s > 0.0 and cost.graph_mode(bs, True) == GRAPH_MODES["NONE"]:
            t += cost.cal.uncaptured_per_req_s * bs  # the eager forward's per-request work, above the largest graph
        return t
