"""`StepTrace` on stand-ins for vLLM's per-step stats (no engine): columns, missing fields, slicing."""

from __future__ import annotations

from types import SimpleNamespace

from rsi_env.real.step_trace import COLUMNS, StepTrace


def _sched(tokens: int, padded: int, mode: str, running: int) -> SimpleNamespace:
    cg = SimpleNamespace(num_unpadded_tokens=tokens, num_padded_tokens=padded, runtime_mode=mode)
    return SimpleNamespace(cudagraph_stats=cg, num_running_reqs=running, num_waiting_reqs=3, kv_cache_usage=0.25)


def test_columns_modes_and_missing_fields():
    tr = StepTrace()
    tr.add(_sched(700, 700, "CUDAGraphMode.NONE", 256), SimpleNamespace(num_generation_tokens=250,
                                                                         num_preempted_reqs=1))
    tr.add(_sched(200, 208, "CUDAGraphMode.FULL", 200), None)
    tr.add(SimpleNamespace(), SimpleNamespace())  # a vLLM without these fields: recorded as unknown
    assert len(tr) == 3 and set(tr.cols) == set(COLUMNS)
    assert tr.cols["mode"] == [0, 2, -1] and tr.cols["tokens"] == [700, 200, -1] and tr.cols["padded"][1] == 208
    assert tr.cols["gen"] == [250, 0, 0] and tr.cols["preempted"] == [1, 0, 0] and tr.cols["running"][:2] == [256, 200]


def test_since_slices_and_shifts_time():
    tr = StepTrace()
    for k in range(5):
        tr.add(_sched(k, k, "PIECEWISE", k), None)
    cut = tr.since(2, t_origin=tr.cols["t"][2])
    assert cut["tokens"] == [2, 3, 4] and cut["mode"] == [1, 1, 1]
    assert cut["t"][0] == 0.0 and cut["t"] == sorted(cut["t"])


def test_iteration_details_give_the_composition_and_the_tokens_where_no_cuda_graph_stats_come():
    """vLLM 0.26's V2 model runner (its dense models) reports no CUDA-graph stats; the engine core's iteration
    details still say what the step scheduled."""
    tr = StepTrace()
    details = SimpleNamespace(num_ctx_requests=3, num_ctx_tokens=240, num_generation_requests=97,
                              num_generation_tokens=97)
    tr.add(SimpleNamespace(cudagraph_stats=None, iteration_details=details, num_running_reqs=100), None)
    tr.add(SimpleNamespace(cudagraph_stats=SimpleNamespace(num_unpadded_tokens=120, num_padded_tokens=128,
                                                           runtime_mode="PIECEWISE"),
                           iteration_details=SimpleNamespace(num_ctx_requests=1, num_ctx_tokens=20,
                                                             num_generation_requests=100,
                                                             num_generation_tokens=100)), None)
    assert tr.cols["tokens"] == [337, 120] and tr.cols["mode"] == [-1, 1]
    assert tr.cols["prefill_reqs"] == [3, 1] and tr.cols["prefill_tokens"] == [240, 20]
    assert tr.cols["decode_reqs"] == [97, 100]


def test_engine_itl_is_the_median_of_the_steps_engine_side_inter_token_latencies():
    """The engine core's own stamps, beside the frontend's: where the frontend lags, the two differ."""
    tr = StepTrace()
    tr.add(SimpleNamespace(), SimpleNamespace(inter_token_latencies_iter=[0.010, 0.030, 0.011]))
    tr.add(SimpleNamespace(), SimpleNamespace(inter_token_latencies_iter=[]))  # only first tokens: no decode
    tr.add(SimpleNamespace(), None)
    assert tr.cols["engine_itl"] == [0.011, -1, -1]
