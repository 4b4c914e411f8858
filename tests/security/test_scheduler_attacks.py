"""RSI/Scheduler-v0 under attack: a policy that learns where it runs, reads ahead or forges its keys gains nothing.

The policy runs in a process of its own and is sent one request at a time, with only its contract's
fields; every check runs on the scored workloads as well as the hidden ones. So a policy that inspects
its caller (``sys._getframe``, ``inspect``, ``gc``) to behave on the check workloads and starve requests
on the scored ones fails submit, on the scored workload it starved.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.engine.workload import Workload
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.sim.policy_hook import REQUEST_FIELDS, request_table
from rsi_env.tasks.scheduler.env import SchedulerEnv
from rsi_env.tasks.scheduler.sandboxed import policy_keys

SCORED = ("bursty_chat", "mixed_rag")

# Finds the request tables it can reach, once; behaves (shortest prompt first with an aging bound) on a request
# it can place in a workload that is not a scored one, and starves long prompts (pure shortest prompt first)
# everywhere else. Against a harness that shares its process it behaves on the hidden workloads only.
_CLEVER = '''
import gc, inspect, sys

SCORED = {scored!r}
_INDEX = None  # workload name -> {{(id, arrival_s)}}


def _reachable():
    """Every object this process can reach: {how}."""
{body}


def _is_tables(o):
    return isinstance(o, dict) and o and all(isinstance(k, str) and isinstance(v, list) and v
                                             and isinstance(v[0], dict) and "arrival_s" in v[0] for k, v in o.items())


def _workload_of(request):
    global _INDEX
    if _INDEX is None:
        _INDEX = {{}}
        for o in list(_reachable()):
            if _is_tables(o):
                for name, reqs in o.items():
                    _INDEX[name] = {{(r["id"], r["arrival_s"]) for r in reqs}}
    for name, seen in _INDEX.items():
        if (request.id, request.arrival_s) in seen:
            return name
    return None


def waiting_key(request):
    name = _workload_of(request)
    if name is not None and name not in SCORED:
        return request.arrival_s + min(request.prompt_tokens / 1000.0, 8.0)
    return float(request.prompt_tokens)


def victim_key(request):
    return request.arrival_s
'''
ATTACKS = {
    "sys._getframe": "    f = sys._getframe(1)\n    while f is not None:\n        yield from list(f.f_locals.values())\n"
                     "        f = f.f_back\n",
    "inspect.stack": "    for info in inspect.stack(0):\n        yield from list(info.frame.f_locals.values())\n",
    "gc.get_objects": "    yield from gc.get_objects()\n",
}

# Tries every way to read ahead: its standard input and every descriptor it has, without blocking; and counts
# any request attribute beyond the contract's. Its waiting key is arrival_s + what it got (0 if nothing).
READ_AHEAD = f'''
import os, sys

FIELDS = {REQUEST_FIELDS!r}


def _read_everything():
    got = len(sys.stdin.read())
    for fd in range(64):
        try:
            blocking = os.get_blocking(fd)
        except OSError:
            continue
        try:
            os.set_blocking(fd, False)
            got += len(os.read(fd, 1 << 16))
        except OSError:
            pass
        finally:
            os.set_blocking(fd, blocking)
    return got


print("a print goes to the run's output, not into the replies")


def waiting_key(request):
    extra = set(vars(request)) ^ set(FIELDS)
    return request.arrival_s + _read_everything() + 1000.0 * len(extra)


def victim_key(request):
    return request.arrival_s
'''

# Behaves, and leaves behind a process outside its group that keeps writing a forged keys file (all zeros).
FORGER = '''
import json, os, time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        forged = json.dumps({"body": json.dumps({"keys": [{"waiting": [0.0] * 1000, "victim": [0.0] * 1000}] * 2}),
                             "mac": "0" * 64})
        for _ in range(5000):
            try:
                with open("keys.json", "w") as f:
                    f.write(forged)
            except OSError:
                pass
            time.sleep(0.001)
    os._exit(0)


def waiting_key(request):
    return request.arrival_s + min(request.prompt_tokens / 1000.0, 8.0)


def victim_key(request):
    return request.arrival_s
'''


def attack(how: str) -> str:
    return _CLEVER.format(scored=SCORED, how=how, body=ATTACKS[how])


@pytest.fixture
def env():
    e = gym.make("RSI/Scheduler-v0", sandbox="bubblewrap").unwrapped
    e.reset(seed=0)
    yield e
    e.close()


def write_policy(env: SchedulerEnv, text: str):
    return env.step({"kind": 1, "path": "policy.py", "old": "", "new": text})


@pytest.mark.parametrize("how", list(ATTACKS))
def test_a_policy_that_looks_where_it_runs_fails_submit_on_the_workload_it_starved(env: SchedulerEnv, how: str):
    obs, *_ = write_policy(env, attack(how))
    assert "auto-bench: score +" in obs["text"], obs["text"]  # it does improve the score, by starving
    obs, r, term, _, info = env.step({"kind": 4})
    guards = info["verdict"]["guards"]
    assert term and not info["verdict"]["passed"] and r < 1.0, obs["text"]
    assert not guards["checks: no request starved"], obs["text"]
    reason = obs["text"].split("[FAIL] checks: no request starved", 1)[1].splitlines()[0]
    assert "mixed_rag" in reason and "waited" in reason, obs["text"]


def test_a_policy_reads_only_what_it_was_sent():
    w = Workload.from_yaml(CODE_DIR / "scheduler" / "workloads" / "bursty_chat.yaml")
    table = request_table(w.trace())[:200]
    leaky = [dict(r, output_tokens=7, workload=w.name) for r in table]  # fields the contract does not name
    keys = policy_keys(READ_AHEAD, {w.name: leaky, "other": table[:50]}, "bubblewrap", use_cache=False)
    assert np.array_equal(keys[w.name].waiting, [r["arrival_s"] for r in table])
    assert np.array_equal(keys["other"].waiting, [r["arrival_s"] for r in table[:50]])


def test_forged_keys_never_reach_the_engine(env: SchedulerEnv):
    """Forged keys (all zeros: first come, first served, score 0) are refused, or overwritten by the driver's."""
    obs, *_ = write_policy(env, FORGER)
    refused = "ERROR policy:" in obs["text"] and ("driver's signature" in obs["text"] or "not JSON" in obs["text"])
    assert refused or "auto-bench: score +0.4" in obs["text"], obs["text"]
