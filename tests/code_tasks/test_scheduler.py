"""RSI/Scheduler-v0: the reference policy earns the binary reward, FCFS does not, and hostile
policies are contained — they run in a sandbox, never in the env's process, and never touch a measurement."""

from __future__ import annotations

import os
import sys
import uuid

import gymnasium as gym
import numpy as np
import pytest

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.engine import load_hardware, load_model
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.workload import Workload
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.sim import simulate
from rsi_env.sim.policy_hook import PolicyError, PolicyKeys, request_table, simulate_policy
from rsi_env.tasks.scheduler import sandboxed as sandboxed_policy
from rsi_env.tasks.scheduler.checks import check_policy
from rsi_env.tasks.scheduler.env import SchedulerEnv
from rsi_env.tasks.scheduler.sandboxed import policy_keys

# Shortest prompt first, with an aging bound: a prompt is passed over for at most 8 s.
REFERENCE = '''
def waiting_key(request):
    return request.arrival_s + min(request.prompt_tokens / 1000.0, 8.0)


def victim_key(request):
    return request.arrival_s
'''
STARVING = '''
def waiting_key(request):
    return float(request.prompt_tokens)   # pure shortest-prompt-first: long prompts can wait forever


def victim_key(request):
    return request.arrival_s
'''


@pytest.fixture
def env(dockerd: None):
    e = gym.make("RSI/Scheduler-v0").unwrapped
    e.reset(seed=0)
    yield e
    e.close()


def write_policy(env: SchedulerEnv, text: str):
    return env.step({"kind": 1, "path": "policy.py", "old": "", "new": text})


def test_reference_policy_passes_and_fcfs_does_not(env: SchedulerEnv):
    assert env.sandbox_backend == "docker" and env._info()["sandbox"] == "docker"
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and r < 1.0 and "FAIL] improvement" in obs["text"] and not info["verdict"]["passed"]
    env.reset(seed=0)
    obs, r, _, _, _ = write_policy(env, REFERENCE)
    assert r > 0.2 and "auto-bench: score +0.4" in obs["text"]
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and info["verdict"]["passed"] and r >= 1.0, obs["text"]
    assert info["verdict"]["guards"]["checks: no request starved"]


# Seeds 0 to 4 all pass (seed 1 by the smallest margin, +6.7 % against the 4 % required); two of them keep this short.
@pytest.mark.parametrize("seed", [2, 3])
def test_reference_policy_passes_on_other_seeds(env: SchedulerEnv, seed: int):
    env.reset(seed=seed)
    write_policy(env, REFERENCE)
    obs, r, term, _, info = env.step({"kind": 4})
    assert info["verdict"]["passed"], obs["text"]


def test_a_starving_policy_fails_the_hidden_checks(env: SchedulerEnv):
    write_policy(env, STARVING)
    obs, _, _, _, info = env.step({"kind": 4})
    assert not info["verdict"]["guards"]["checks: no request starved"], obs["text"]
    assert not info["verdict"]["passed"] and "waited" in obs["text"]


def test_a_random_policy_fails_determinism(env: SchedulerEnv):
    write_policy(env, "import random\n\ndef waiting_key(r):\n    return r.arrival_s + random.random()\n\n"
                      "def victim_key(r):\n    return r.arrival_s\n")
    obs, _, _, _, info = env.step({"kind": 4})
    assert not info["verdict"]["guards"]["checks: deterministic"], obs["text"]


def test_submit_measures_the_policy_it_checks(env: SchedulerEnv):
    """Benching a starving policy, then reverting to FCFS, must not pair the first's score with the second's checks."""
    write_policy(env, STARVING)
    env.step({"kind": 3})
    write_policy(env, (CODE_DIR / "scheduler" / "policy.py").read_text())
    obs, _, _, _, info = env.step({"kind": 4})
    assert not info["verdict"]["passed"] and "FAIL] improvement" in obs["text"], obs["text"]


@pytest.mark.parametrize("policy, expect", [
    ("def waiting_key(r):\n    return float('nan')\n\ndef victim_key(r):\n    return 0.0\n", "finite number"),
    ("def waiting_key(r):\n    raise ValueError('boom')\n\ndef victim_key(r):\n    return 0.0\n", "ValueError: boom"),
    ("while True:\n    pass\n", "did not finish"),
    ("def victim_key(r):\n    return 0.0\n", "must define a function waiting_key"),
    ("import json, os\nopen('keys.json', 'w').write(json.dumps({'bursty_chat': {'waiting': [0], 'victim': [0]}}))\n"
     "os._exit(0)\n", "exited before answering request 0"),
    ("import os\nos.system('yes')\n", "produced no keys"),
    ("def waiting_key(r) -> float:\n    return 'soon'\n\ndef victim_key(r):\n    return 0.0\n", "could not convert"),
])
def test_hostile_or_broken_policies_come_back_as_errors(env: SchedulerEnv, policy: str, expect: str,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sandboxed_policy, "KEYS_TIMEOUT_S", 2.0)
    obs, r, term, trunc, _ = write_policy(env, policy)
    assert expect in obs["text"] and "ERROR policy:" in obs["text"], obs["text"]
    assert np.isfinite(r) and not term
    obs, *_ = write_policy(env, REFERENCE)  # the env still works
    assert "score +0.4" in obs["text"]


def test_the_policy_never_runs_in_the_env_s_process(env: SchedulerEnv):
    marker = f"/tmp/rsi-policy-{uuid.uuid4().hex[:8]}"
    obs, *_ = write_policy(env, f"open({marker!r}, 'w').write('x')\n" + REFERENCE)
    assert "score +0.4" in obs["text"]
    assert not os.path.exists(marker)  # the sandbox's /tmp is private
    assert "policy" not in sys.modules


def test_shell_commands_run_in_the_episode_sandbox_and_cannot_see_hidden_checks(env: SchedulerEnv):
    res = env._run_shell(f"cat policy.py | head -1; ls {CODE_DIR}/scheduler/hidden; echo end")
    assert res.backend == "docker" and "end" in res.output and "checks.yaml" not in res.output
    res = env._run_shell("rm policy.py; echo gone")
    assert "gone" in res.output
    obs, *_ = env.step({"kind": 3})
    assert "policy.py" in obs["text"] and "ERROR policy:" in obs["text"]


@pytest.mark.parametrize("backend", ["bubblewrap", "local"])
def test_every_backend_gives_the_same_keys(dockerd: None, backend: str):
    w = Workload.from_yaml(CODE_DIR / "scheduler" / "workloads" / "bursty_chat.yaml")
    tables = {w.name: request_table(w.trace())[:50]}
    assert np.array_equal(policy_keys(REFERENCE, tables, backend, use_cache=False)[w.name].waiting,
                          policy_keys(REFERENCE, tables, "docker", use_cache=False)[w.name].waiting)


def test_arrival_keys_reproduce_the_engine_s_priority_policy():
    model, hw = load_model("qwen2.5-7b"), load_hardware("l4")
    w = Workload.from_yaml(CODE_DIR / "scheduler" / "workloads" / "mixed_rag.yaml")
    arrival = w.trace().arrival_s
    tel, _ = simulate_policy(EngineConfig(), model, hw, w, PolicyKeys(arrival, arrival))
    assert tel == simulate(EngineConfig(scheduling_policy="priority"), model, hw, w)


def _small(name: str, prompt_tokens: int) -> Workload:
    return Workload.from_dict({"name": name, "seed": 1, "requests": 40, "prompt_tokens": prompt_tokens,
                               "output_tokens": 16, "arrival": {"process": "poisson", "rate": 20}})


@pytest.fixture
def small_checks(tmp_path):
    """A check file with one small hidden workload, so that a check runs in a second or two."""
    path = tmp_path / "checks.yaml"
    path.write_text("starvation_slack_s: 10.0\nworkloads:\n  - {name: tiny, seed: 2, requests: 40, prompt_tokens: 64, "
                    "output_tokens: 16, arrival: {process: poisson, rate: 20}}\n")
    return path


def test_checks_run_on_the_scored_workloads_and_skip_only_what_cannot_run_there(small_checks):
    model, hw = load_model("qwen2.5-7b"), load_hardware("l4")
    fit, unfit = _small("fits", 256), _small("too_long", 40000)  # 40000 tokens: beyond Qwen2.5-7B's context

    def run(skip_unfit: bool) -> dict[str, object]:
        return {c.name: c for c in check_policy(REFERENCE, EngineConfig(), model, hw, scored=[fit, unfit],
                                                skip_unfit=skip_unfit, backend="bubblewrap", checks=small_checks)}

    kept = run(skip_unfit=False)["no request lost"]
    assert not kept.ok and kept.reason.startswith("too_long: first come, first served cannot run it")
    skipped = run(skip_unfit=True)["no request starved"]
    assert skipped.ok and skipped.reason.startswith("on 1 scored and 1 hidden workloads; not checked on this "
                                                    "engine: too_long (first come, first served cannot run it")


def test_keys_at_submission_must_be_the_keys_measured(small_checks):
    model, hw = load_model("qwen2.5-7b"), load_hardware("l4")
    w = _small("fits", 256)
    arrival = w.trace().arrival_s
    measured = {w.name: PolicyKeys(arrival, arrival)}  # first come, first served's: not what REFERENCE gives
    res = {c.name: c for c in check_policy(REFERENCE, EngineConfig(), model, hw, scored=[w], measured=measured,
                                           backend="bubblewrap", checks=small_checks)}
    assert not res["deterministic"].ok and "than when it was measured, on fits" in res["deterministic"].reason


def test_the_driver_sends_the_contract_s_fields():
    from rsi_env.sim import policy_hook
    from rsi_env.tasks.scheduler import run_policy  # the driver is standard library only: it keeps its own copy

    assert run_policy.FIELDS == policy_hook.REQUEST_FIELDS


def test_keys_are_validated():
    with pytest.raises(PolicyError, match="one number per request"):
        PolicyKeys.parse({"waiting": [1.0], "victim": [1.0, 2.0]}, 2, "w")
    with pytest.raises(PolicyError, match="finite"):
        PolicyKeys.parse({"waiting": [1.0, True], "victim": [1.0, 2.0]}, 2, "w")


def test_the_real_tier_gets_the_policy_keys_and_cpu_workloads(monkeypatch):
    """tier="real" wiring, with the engine replaced by a recorder (tests/real/test_scheduler_real.py runs vLLM)."""
    from rsi_env.engine.telemetry import Telemetry
    from rsi_env.real.tier import RealTier

    calls: list[dict] = []

    def measure_all(self, cfg, model, hw, workloads, policy_keys):
        calls.append({"model": model.name, "hw": hw.name, "keys": policy_keys,
                      "workloads": [w.name for w in workloads]})
        return [Telemetry(out_tok_per_s=100.0, ttft_p99=1.0, tier="real") for _ in workloads]

    monkeypatch.setattr(RealTier, "_measure_all", measure_all)
    env = gym.make("RSI/Scheduler-v0", tier="real", hardware="cpu", model="tiny-llama", sandbox="bubblewrap").unwrapped
    env.reset(seed=0)
    assert env.tier.name == "real" and calls[0]["workloads"] == ["bursty_chat_cpu", "mixed_rag_cpu"]
    trace = env.workloads[0].trace()
    assert np.array_equal(calls[0]["keys"]["bursty_chat_cpu"].waiting, trace.arrival_s)  # the template: FCFS
    write_policy(env, REFERENCE)
    env.step({"kind": 3})
    expect = trace.arrival_s + np.minimum(trace.prompt_len / 1000.0, 8.0)
    assert np.allclose(calls[-1]["keys"]["bursty_chat_cpu"].waiting, expect)
    obs, *_ = env.step({"kind": 4})
    # The checks run on the sim tier, on the task's own model and hardware (the hidden workloads need it), and on the
    # scored workloads too: the _cpu copies fit there.
    assert "[ok] checks: no request lost: on 2 scored and 2 hidden" in obs["text"], obs["text"]
    assert "[ok] checks: deterministic" in obs["text"], obs["text"]
    env.close()
