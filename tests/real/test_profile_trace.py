"""Aggregating a profiler trace into the profile's parts (`rsi_env.real.profile_trace`), on traces laid out by hand.

The real engine's traces are tested in test_profile_real.py; here each slice of a small timeline is placed so that
the expected seconds per part can be added up by hand.
"""

from __future__ import annotations

import asyncio
import gzip
import json

import numpy as np
import pytest

from rsi_env.engine import PARTS
from rsi_env.engine.telemetry import RequestTimings
from rsi_env.real.profile_replay import profile_run, windows
from rsi_env.real.profile_trace import busy_intervals, part_of, profile_of_run, read_trace, sample_trace
from rsi_env.real.step_trace import StepTrace

BASE_S = 1000.0  # the trace's time 0, seconds since the epoch


def step(ts: float, dur: float, ctx: int, gen: int, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": f"execute_context_{ctx}({ctx * 100})_generation_{gen}({gen})",
            "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def kernel(name: str, ts: float, dur: float, stream: int = 7) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": stream}


def op(name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def by_part(seconds: list[float]) -> dict[str, float]:
    return {p: round(x * 1e6, 6) for p, x in zip(PARTS, seconds, strict=True)}  # microseconds


@pytest.mark.parametrize(("name", "part"), [
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", "weights"), ("sm90_xmma_gemm_bf16bf16_bf16f32", "weights"),
    ("triton_poi_fused_add_rms_norm_0", "weights"), ("_C::onednn_mm", "weights"), ("Memcpy HtoD (Pinned -> Device)",
                                                                                   "weights"),
    ("flash_fwd_splitkv_kernel", "attention"), ("vllm::unified_attention_with_output", "attention"),
    ("_C::cpu_attention_with_kv_cache", "attention"), ("BatchPrefillWithPagedKVCacheKernel", "attention"),
    ("reshape_and_cache_flash_kernel", "kv_read"), ("_C::cpu_attn_reshape_and_cache", "kv_read"),
    ("vllm::unified_kv_cache_update", "kv_read"), ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "comm"),
    ("cross_device_reduce_1stage", "comm"),
])
def test_kernels_and_ops_go_to_their_part_by_name(name: str, part: str):
    assert part_of(name) == part


def gpu_trace() -> dict:
    """Three steps: a prefill one, then two decode steps with the engine idle between them."""
    events = [
        step(0, 100, ctx=2, gen=0),                                 # prefill step, its period [0, 150)
        kernel("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", 20, 30),  # weights 30
        kernel("flash_fwd_splitkv_kernel", 50, 20),                   # attention 20 (the step has prompt tokens)
        kernel("reshape_and_cache_flash_kernel", 70, 5),              # kv 5
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 75, 10),   # comm 10; launch 0-20, 85-100; engine 100-150
        step(150, 40, ctx=0, gen=2),                                  # decode, period [150, 400)
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 160, 50),           # weights 50, past its execution's end
        kernel("flash_fwd_splitkv_kernel", 210, 10),                  # decode attention: kv_read 10; launch 150-160
        step(400, 20, ctx=0, gen=2),                                  # engine 220-250 and 380-400, idle 250-380
        kernel("triton_poi_fused_add_rms_norm_0", 405, 10),           # weights 10; launch 400-405, 415-420
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 30, "dur": 400, "pid": 1, "tid": 1},
    ]
    return {"baseTimeNanoseconds": int(BASE_S * 1e9), "traceEvents": events}


def test_a_gpu_trace_splits_its_timeline_into_parts_by_kind_of_step():
    idle = [(BASE_S + 250e-6, BASE_S + 380e-6)]
    got = {k: by_part(v) for k, v in sample_trace(gpu_trace(), idle).items()}
    assert got["prefill"] == {"weights": 30, "attention": 20, "kv_read": 5, "comm": 10, "engine_cpu": 50,
                              "launch": 35, "idle": 0}
    assert got["decode"] == {"weights": 60, "attention": 0, "kv_read": 10, "comm": 0, "engine_cpu": 50,
                             "launch": 20, "idle": 130}
    # Without the replay's idle intervals the wait for the arrival is the engine's own.
    assert by_part(sample_trace(gpu_trace())["decode"])["engine_cpu"] == 180


def test_overlapping_device_work_is_counted_once():
    events = [step(0, 10, 1, 0), kernel("nvjet_a", 0, 50, stream=7), kernel("flash_fwd_kernel", 40, 20, stream=8)]
    got = by_part(sample_trace({"baseTimeNanoseconds": 0, "traceEvents": events})["prefill"])
    assert got["weights"] == 50 and got["attention"] == 10 and sum(got.values()) == 60


def test_on_a_cpu_build_the_worker_s_top_level_ops_are_the_device_work():
    events = [step(0, 100, ctx=1, gen=0, tid=5),
              op("aten::linear", 10, 30, tid=5), op("aten::mm", 12, 26, tid=5),  # nested: counted once, as linear
              op("vllm::unified_attention_with_output", 50, 20, tid=5),
              op("_C::cpu_attention_with_kv_cache", 52, 16, tid=5),
              op("aten::mm", 0, 100, tid=9)]  # another thread's op: not the worker's
    got = by_part(sample_trace({"baseTimeNanoseconds": 0, "traceEvents": events})["prefill"])
    assert got == {"weights": 30, "attention": 20, "kv_read": 0, "comm": 0, "engine_cpu": 0, "launch": 50, "idle": 0}


def test_a_trace_without_engine_steps_gives_nothing():
    assert sample_trace({"traceEvents": [kernel("nvjet", 0, 10)]}) == {}


def test_gzipped_and_plain_traces_read_alike(tmp_path):
    (tmp_path / "a.pt.trace.json").write_text(json.dumps(gpu_trace()))
    (tmp_path / "b.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(gpu_trace()).encode()))
    assert read_trace(tmp_path / "a.pt.trace.json") == read_trace(tmp_path / "b.pt.trace.json.gz") == gpu_trace()


def test_busy_intervals_are_the_union_of_the_requests():
    assert busy_intervals([0, 1, 5, 6], [2, 3, 7, 6.5]) == [(0, 3), (5, 7)]
    assert busy_intervals([], []) == []


def sample() -> dict[str, list[float]]:
    prefill = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 5.0]  # idle in a sample never counts towards a fraction
    decode = [2.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    return {"prefill": prefill, "decode": decode}


def test_a_run_s_profile_weighs_each_kind_of_step_by_its_own_time():
    # Two busy stretches, [0, 4] and [10, 12]: 6 s busy, 6 s idle.
    arrival, finish = [0.0, 10.0], [4.0, 12.0]
    t = [1.0, 2.0, 3.0, 4.0, 10.5, 11.0, 12.0]
    prompt = [100, 0, 0, 0, 50, 0, 0]  # prefill steps: 1 s and 0.5 s (from the stretch's start); decode 4.5 s
    p = profile_of_run(sample(), arrival, finish, t, prompt)
    assert p.to_dict() == pytest.approx({"weights": 3.0, "attention": 0.75, "kv_read": 2.25, "comm": 0.0,
                                         "engine_cpu": 0.0, "launch": 0.0, "idle": 6.0})
    assert p.total_s == pytest.approx(12.0)


def test_a_kind_not_sampled_takes_the_pooled_fractions():
    arrival, finish = [0.0], [4.0]
    only_decode = {"decode": [2.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0]}
    p = profile_of_run(only_decode, arrival, finish, [1.0, 2.0, 3.0, 4.0], [100, 0, 0, 0])
    assert p.to_dict() == pytest.approx({"weights": 2.0, "attention": 0.0, "kv_read": 2.0, "comm": 0.0,
                                         "engine_cpu": 0.0, "launch": 0.0, "idle": 0.0})
    # Without a step trace (or with kinds unknown, -1) the pooled sample splits the busy time.
    pooled = profile_of_run(sample(), arrival, finish, [1.0, 2.0], [-1, -1])
    assert pooled.to_dict() == pytest.approx({"weights": 2.0, "attention": 2 / 3, "kv_read": 4 / 3, "comm": 0.0,
                                              "engine_cpu": 0.0, "launch": 0.0, "idle": 0.0})
    assert profile_of_run({}, arrival, finish).empty


def test_profiled_windows_spread_over_the_run():
    assert windows(10) == [(0, 10)]
    assert windows(64) == [(0, 64)]
    assert windows(400) == [(0, 16), (100, 116), (200, 216), (300, 316)]


def test_no_replay_starts_once_the_driver_s_deadline_has_passed():
    """The guard runs before the engine is touched (there is none here): the measurement's row is written in time."""
    timings = RequestTimings(np.zeros(1), np.ones(1), np.ones(1), np.ones(1), np.ones(1))
    prof, info = asyncio.run(profile_run(None, None, 0, "w", StepTrace(), timings, {}, "/nonexistent", deadline=0.0))
    assert prof.empty and "deadline" in info["error"]
