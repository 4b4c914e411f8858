"""The SGLang driver's code around SGLang, and the real tier's engine choice, on a machine without SGLang.

SGLang needs a CUDA GPU, so here its ``Engine`` is `tests.real.sglang_fake` — a stand-in that streams like
SGLang 0.5.17's ``async_generate``, used only to test the request loop, the telemetry and row assembly, the
translation of a config into ``Engine`` arguments and the failure classification around it. The driver's
measurements come from real SGLang on a GPU, never from this fake.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.sglang_config import SglangConfig
from rsi_env.engine.workload import Workload
from rsi_env.errors import InvalidConfigError, PolicyError
from rsi_env.real import sglang_driver, tier
from rsi_env.real.sglang_args import engine_kwargs, resolved_flags
from rsi_env.real.sglang_metrics import gauge_summary, read_metrics
from rsi_env.real.tier import RealTier, classify_failure
from tests.real import sglang_fake
from tests.real.sglang_fake import FakeEngine

ROOT = Path(__file__).resolve().parents[2]
HAVE = {"model_path", "load_format", "skip_tokenizer_init", "enable_metrics", "random_seed", "max_running_requests",
        "chunked_prefill_size", "page_size", "cuda_graph_max_bs_decode", "attention_backend", "sampling_backend",
        "schedule_policy", "tp_size", "dp_size"}
SHARED = Workload.from_dict({"name": "shared", "seed": 5, "requests": 12, "prompt_tokens": 16, "output_tokens": 6,
                             "arrival": {"process": "poisson", "rate": 200},
                             "shared_prefix": {"groups": 2, "tokens": 64}})
BURST = Workload.from_dict({"name": "burst", "seed": 3, "requests": 8, "prompt_tokens": {"dist": "uniform",
                            "min": 8, "max": 32}, "output_tokens": 5, "arrival": {"process": "burst"}})


def _gauges() -> dict[str, list[float]]:
    return {"sglang:num_running_reqs": [3.0, 1.0], "sglang:num_queue_reqs": [2.0], "sglang:token_usage": [0.25, 0.5],
            "sglang:num_retracted_requests_total": [0.0]}


def _run(engine: FakeEngine, w: Workload, **kw):
    return engine.loop.run_until_complete(sglang_driver.run_trace(engine, w.trace(), 32000, w.name,
                                                                  metrics=_gauges, **kw))


def test_every_request_goes_with_its_exact_tokens_and_greedy_exact_length_sampling():
    engine = FakeEngine(skip_tokenizer_init=True)
    trace = SHARED.trace()
    timings, c = _run(engine, SHARED, record=3)
    by_rid = {call["rid"]: call for call in engine.calls}
    assert sorted(by_rid) == sorted(f"shared-{i}" for i in range(len(trace)))
    for i in range(len(trace)):
        call = by_rid[f"shared-{i}"]
        assert call["input_ids"] == trace.prompt_token_ids(i, 32000)
        n = int(trace.output_len[i])
        assert call["sampling_params"] == {"max_new_tokens": n, "ignore_eos": True, "temperature": 0.0}
    # Times on one clock: arrival <= first token <= finish, and the streamed tokens took their time.
    assert np.all(timings.arrival <= timings.first_token) and np.all(timings.first_token < timings.finish)
    assert np.all(timings.finish - timings.first_token >= (trace.output_len - 1) * engine.token_delay_s * 0.9)
    # Poisson arrivals are kept: requests start at their trace times (give or take the event loop).
    assert np.allclose(timings.arrival, trace.arrival_s, atol=0.05)
    assert [len(t) for t in c["output_token_ids"].values()] == [int(x) for x in trace.output_len[:3]]


def test_sglangs_own_counters_become_the_telemetrys():
    engine = FakeEngine(skip_tokenizer_init=True, retract={"shared-2": 1, "shared-7": 2})
    _, c = _run(engine, SHARED)
    prompts = [len(call["input_ids"]) for call in engine.calls]
    assert c["prefix_cache_queries"] == sum(prompts)
    # The fake's cache hits are the shared prefixes after each group's first request: SGLang's cached_tokens, summed.
    assert 0 < c["prefix_cache_hits"] < c["prefix_cache_queries"]
    assert c["num_preemptions"] == 3
    assert c["kv_cache_usage_peak"] == 0.5 and c["mean_running"] == 4.0 and c["mean_queued"] == 2.0
    assert c["gauge_samples"] >= 1


def test_sglangs_own_time_stamps_are_kept_per_request_on_the_drivers_clock():
    timings, c = _run(FakeEngine(skip_tokenizer_init=True, enable_metrics=True), SHARED)
    got = {k: np.array(v, dtype=float) for k, v in c["engine_stamps"].items()}
    assert list(got) == list(sglang_driver.ENGINE_STAMPS)
    # Where the first token went, in order: sent, received by the tokenizer manager, by the scheduler, batched,
    # processed, streamed to the driver (to within the two clocks' 0.1 ms); the fake's scheduler takes 0.1 ms to
    # receive and 0.1 ms to batch.
    path = [timings.arrival, got["received_s"], got["queued_s"], got["scheduled_s"], got["prefilled_s"],
            timings.first_token]
    for a, b in zip(path, path[1:], strict=False):
        assert np.all(a <= b + 1e-4)
    assert np.allclose(got["queued_s"] - got["received_s"], 1e-4, atol=1e-5)
    assert np.allclose(got["scheduled_s"] - got["queued_s"], 1e-4, atol=1e-5)
    # Without SGLang's metrics there are none, and a stamp it did not send is never a zero.
    _, bare = _run(FakeEngine(skip_tokenizer_init=True), SHARED)
    assert all(x is None for col in bare["engine_stamps"].values() for x in col)
    assert np.isnan(sglang_driver.engine_stamps({"queue_time": 0.5, "request_received_ts": 0}, 100.0)).all()


def test_a_short_or_aborted_request_fails_the_measurement():
    with pytest.raises(RuntimeError, match="1 requests produced a different number of tokens than asked"):
        _run(FakeEngine(skip_tokenizer_init=True, short=("burst-4",)), BURST)
    with pytest.raises(RuntimeError, match="SGLang aborted request burst-1: fake abort"):
        _run(FakeEngine(skip_tokenizer_init=True, abort=("burst-1",)), BURST)


def test_the_output_tokens_are_recorded_in_either_streaming_mode():
    _, whole = _run(FakeEngine(skip_tokenizer_init=True), BURST, record=2)
    _, deltas = _run(FakeEngine(skip_tokenizer_init=True, incremental_streaming_output=True), BURST, record=2,
                     incremental=True)
    assert whole["output_token_ids"] == deltas["output_token_ids"]
    assert [len(t) for t in whole["output_token_ids"].values()] == [5, 5]


def test_a_config_becomes_the_engine_arguments_of_the_installed_release():
    cfg = SglangConfig(page_size=16, chunked_prefill_size=2048, cuda_graph_max_bs=64, schedule_policy="lpm")
    kw = engine_kwargs(cfg, {"attention_backend": "triton", "sampling_backend": "pytorch"}, HAVE,
                       model_path="/m", load_format="dummy")
    assert kw == {"model_path": "/m", "load_format": "dummy", "skip_tokenizer_init": True, "enable_metrics": True,
                  "random_seed": 0, "page_size": 16, "chunked_prefill_size": 2048, "schedule_policy": "lpm",
                  "cuda_graph_max_bs_decode": 64,  # 0.5.17 keeps --cuda-graph-max-bs only as a CLI alias
                  "attention_backend": "triton", "sampling_backend": "pytorch"}
    assert engine_kwargs(cfg, {}, HAVE | {"cuda_graph_max_bs"}, model_path="/m",
                         load_format="dummy")["cuda_graph_max_bs"] == 64  # a release with the field uses it
    for extra, words in [({"max_running_requests": 8}, "is one of the config's flags"),
                         ({"load_format": "auto"}, "the driver sets load_format itself"),
                         ({"attention_bakend": "triton"}, "unexpected keyword argument 'attention_bakend'")]:
        with pytest.raises(InvalidConfigError, match=words):
            engine_kwargs(cfg, extra, HAVE, model_path="/m", load_format="dummy")
    with pytest.raises(InvalidConfigError, match="has none of"):
        engine_kwargs(SglangConfig(dp_size=2), {}, HAVE - {"dp_size"}, model_path="/m", load_format="dummy")


def test_asking_for_the_pass_lines_turns_on_the_level_they_are_logged_at():
    # SGLang's offline Engine logs at "error" and its Prefill/Decode batch lines are info: without this a row's
    # passes are empty
    have = HAVE | {"decode_log_interval", "log_level"}
    kw = engine_kwargs(SglangConfig(), {"decode_log_interval": 1}, have, model_path="/m", load_format="dummy")
    assert (kw["decode_log_interval"], kw["log_level"]) == (1, "info")
    kw = engine_kwargs(SglangConfig(), {"decode_log_interval": 1, "log_level": "debug"}, have, model_path="/m",
                       load_format="dummy")
    assert kw["log_level"] == "debug"  # a level given is kept
    assert "log_level" not in engine_kwargs(SglangConfig(), {}, have, model_path="/m", load_format="dummy")


def test_the_resolved_flags_are_read_from_the_engine():
    info = FakeEngine(skip_tokenizer_init=True, cuda_graph_max_bs_decode=96).get_server_info()
    r = resolved_flags(info)
    assert (r["chunked_prefill_size"], r["mem_fraction_static"], r["page_size"], r["cuda_graph_max_bs"]) == (
        8192, 0.83, 1, 96)
    assert r["max_running_requests"] == 48 and r["max_total_num_tokens"] == sglang_fake.KV_TOKENS
    assert set(SglangConfig().to_dict()) <= set(r)


@pytest.fixture
def fake_sglang(tmp_path, monkeypatch):
    """The fake installed as ``sglang`` in this process and on a child's ``PYTHONPATH``."""
    root = sglang_fake.install(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    return root


def test_the_driver_writes_one_row_per_workload_with_the_telemetry_and_what_sglang_resolved(tmp_path, fake_sglang,
                                                                                          monkeypatch):
    monkeypatch.setenv("FAKE_SGLANG_KWARGS", str(tmp_path / "kwargs.json"))
    monkeypatch.setattr(sglang_driver, "read_metrics", _gauges)
    paths = []
    for w in (BURST, SHARED):
        paths.append(tmp_path / f"{w.name}.yaml")
        paths[-1].write_text(json.dumps(w.to_dict()))
    out = tmp_path / "out.jsonl"
    argv = ["--model", "tiny-llama", "--out", str(out), "--hardware", "h200", "--slo-from-workload",
            "--set", "chunked_prefill_size=512", "--set", "max_running_requests=4", "--set", "cuda_graph_max_bs=8",
            "--server-arg", "attention_backend=triton", "--server-arg", "sampling_backend=pytorch"]
    for p in paths:
        argv += ["--workload", str(p)]
    assert sglang_driver.main(argv) == 0
    kwargs = json.loads((tmp_path / "kwargs.json").read_text())
    assert kwargs["load_format"] == "dummy" and kwargs["skip_tokenizer_init"] and kwargs["enable_metrics"]
    assert (kwargs["chunked_prefill_size"], kwargs["max_running_requests"], kwargs["cuda_graph_max_bs_decode"],
            kwargs["attention_backend"], kwargs["sampling_backend"]) == (512, 4, 8, "triton", "pytorch")
    assert not Path(kwargs["model_path"]).exists()  # the model folder is removed afterwards
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["workload"] for r in rows] == ["burst", "shared"]
    for r, w in zip(rows, (BURST, SHARED), strict=True):
        tel = r["telemetry"]
        assert r["engine"] == "sglang" and r["sglang_version"] == sglang_fake.VERSION
        assert r["flags"] == {"chunked_prefill_size": 512, "max_running_requests": 4, "cuda_graph_max_bs": 8}
        assert r["resolved"]["max_running_requests"] == 4 and r["resolved"]["cuda_graph_max_bs"] == 8
        assert r["server_args"]["attention_backend"] == "triton" and "internal_states" not in r["server_args"]
        assert r["workload_hash"] == w.content_hash and len(r["requests"]["first_token_s"]) == w.requests
        stamps = [r["requests"][k] for k in sglang_driver.ENGINE_STAMPS]  # SGLang's own, with its metrics on
        assert all(len(col) == w.requests and all(x > 0 for x in col) for col in stamps)
        assert "engine_stamps" not in r["counters"]
        assert tel["error"] is None and tel["tier"] == "real" and tel["out_tok_per_s"] > 0
        assert tel["num_gpu_blocks"] == sglang_fake.KV_TOKENS  # pages of one token
        assert tel["kv_cache_usage_peak"] == 0.5 and tel["mean_batch_size"] == 4.0
        assert set(r["unavailable"]) == {"steps", "profile"} and not any(tel["profile"].values())
        lines = r["passes"]["lines"]  # the stand-in logs one prefill pass a request, after the warm-up's
        assert r["passes"]["decode_log_interval"] == 40 and lines["kind"] == ["prefill"] * w.requests
        assert sum(lines["new_token"]) + sum(lines["cached_token"]) == int(w.trace().prompt_len.sum())
    assert rows[0]["telemetry"]["prefix_cache_hit_rate"] == 0.0 < rows[1]["telemetry"]["prefix_cache_hit_rate"]


@pytest.mark.parametrize("mode", ["frozen", "live"])
def test_the_heaps_are_frozen_after_the_warm_up_when_asked(tmp_path, fake_sglang, monkeypatch, mode):
    """Frozen (SGLang's default): this process's heap, then SGLang's processes' (``Engine.freeze_gc``), once, after
    every warm-up request and before the first measured one; live: neither. Each row says which, with its pauses."""
    monkeypatch.setattr(sglang_driver, "read_metrics", _gauges)
    order: list[str] = []
    monkeypatch.setattr(sglang_driver, "freeze_heap", lambda: order.append("heap") or 0)
    (tmp_path / "burst.yaml").write_text(json.dumps(BURST.to_dict()))
    out = tmp_path / "out.jsonl"
    argv = ["--model", "tiny-llama", "--out", str(out), "--hardware", "h200", "--workload", str(tmp_path / "burst.yaml")]
    started = len(sglang_fake.ENGINES)
    assert sglang_driver.main(argv + (["--gc", "live"] if mode == "live" else [])) == 0
    engine = sglang_fake.ENGINES[started]
    warm = [i for i, c in enumerate(engine.calls) if not str(c["rid"]).startswith("burst-")]
    assert warm and warm == list(range(len(warm))) and len(engine.calls) == len(warm) + BURST.requests
    assert (order, engine.frozen_after) == ((["heap"], [len(warm)]) if mode == "frozen" else ([], []))
    row = json.loads(out.read_text())
    gc_row = row["counters"]["driver_gc"]
    assert row["gc"] == mode and set(gc_row) == {"frozen_objects", "generations", "listed", "total_s"}
    assert all(g in {"0", "1", "2"} and v["collections"] >= 1 and 0 <= v["max_s"] <= v["total_s"]
               for g, v in gc_row["generations"].items())


def test_the_driver_refuses_a_bad_flag_before_starting_sglang(tmp_path, capsys):
    rc = sglang_driver.main(["--model", "tiny-llama", "--out", str(tmp_path / "o"), "--workload", "x.yaml",
                             "--set", "schedule_policy=priority"])
    assert rc == 2 and "rsi-env-error: invalid_config: schedule_policy='priority'" in capsys.readouterr().err


def test_the_driver_refuses_another_card_than_the_rows_name_before_starting_sglang(tmp_path, fake_sglang, capsys,
                                                                                   monkeypatch):
    monkeypatch.setenv("FAKE_SGLANG_KWARGS", str(tmp_path / "kwargs.json"))
    monkeypatch.setattr(sglang_driver, "gpu_names", lambda: ["NVIDIA H100 80GB HBM3"])
    rc = sglang_driver.main(["--model", "tiny-llama", "--out", str(tmp_path / "o"), "--workload", "x.yaml",
                             "--hardware", "h200"])
    err = capsys.readouterr().err
    assert rc == 2 and "rsi-env-error: wrong_hardware: rows for 'h200' asked" in err and "H100 80GB HBM3" in err
    assert not (tmp_path / "kwargs.json").exists()  # no engine was started


def test_the_multiprocess_prometheus_files_are_read_as_sglang_writes_them(tmp_path):
    """SGLang's metric classes are prometheus_client's own; a child process writes them as SGLang's scheduler does."""
    code = """if True:
        from prometheus_client import Counter, Gauge
        labels = ["model_name", "tp_rank"]
        Gauge("sglang:num_running_reqs", "d", labels, multiprocess_mode="mostrecent").labels("m", "0").set(5)
        Gauge("sglang:num_queue_reqs", "d", labels, multiprocess_mode="mostrecent").labels("m", "0").set(7)
        Gauge("sglang:token_usage", "d", labels, multiprocess_mode="mostrecent").labels("m", "0").set(0.4)
        Counter("sglang:num_retracted_requests_total", "d", labels).labels("m", "0").inc(3)
        Gauge("vllm:other", "d", multiprocess_mode="mostrecent").set(1)
    """
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    m = read_metrics(str(tmp_path))
    assert m["sglang:num_retracted_requests_total"] == [3.0] and "vllm:other" not in m
    assert gauge_summary(m) == (0.4, 5.0, 7.0)
    assert read_metrics(str(tmp_path / "absent")) == {}


def test_failure_classification_in_sglangs_words():
    died = "Received sigquit from a child process. It usually means the child failed.\n"
    kv = ("Scheduler hit an exception: Traceback (most recent call last):\n  File x\nRuntimeError: Not enough memory. "
          "Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.3\n" + died)
    assert classify_failure(kv, -9, False, 60, "sglang") == (
        "invalid_config: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
        "mem_fraction_static=0.3")
    weights = ("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.1. "
               "Raise --mem-fraction-static above 0.160 (minimum viable = 1 - available/pre = 0.1590).\n")
    assert classify_failure(weights, 1, False, 60, "sglang").startswith(
        "invalid_config: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.1.")
    assert classify_failure("AssertionError: chunked_prefill_size must be divisible by page_size\n", 1, False, 60,
                            "sglang") == "invalid_config: chunked_prefill_size must be divisible by page_size"
    assert classify_failure("ValueError: Unknown schedule_policy: policy='priority'\n" + died, -9, False, 60,
                            "sglang") == "invalid_config: Unknown schedule_policy: policy='priority'"
    assert classify_failure("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", 1, False, 60,
                            "sglang").startswith("oom: torch.OutOfMemoryError: CUDA out of memory")
    rank = ("RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), "
            "a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.\nmore\n")
    assert classify_failure(rank, 1, False, 60, "sglang").startswith(
        "crash: exit 1: Rank 0 scheduler died during initialization (exit code: -9).")
    # vLLM's classification is unchanged: an assertion is not a refusal there.
    assert classify_failure("AssertionError: x\n", 1, False, 60) == "crash: exit 1: AssertionError: x"


def test_the_engine_choice_and_its_errors(monkeypatch):
    with pytest.raises(InvalidConfigError, match="runs no engine named 'tensorrt'"):
        RealTier(engine="tensorrt")
    assert RealTier().engine == "vllm"
    # The store keys rows by engine_version (warm starts and calibration match "0.26" / "0.26.%"): SGLang's rows
    # must never read as a vLLM release's (vLLM had 0.5.x releases too).
    monkeypatch.setattr(tier, "installed_sglang_version", lambda: "0.5.17")
    assert RealTier(engine="sglang").engine_version == "sglang-0.5.17"
    monkeypatch.setattr(tier, "installed_sglang_version", lambda: None)
    t = RealTier(engine="sglang")
    assert t.engine_version == "none"
    [tel] = t.measure_all({"schedule_policy": "lpm"}, "tiny-llama", "h200", [BURST])
    assert tel.error is not None and tel.error.startswith("crash: SGLang is not installed here")
    assert t.config(EngineConfig()) == SglangConfig() and t.config(None) == SglangConfig()
    with pytest.raises(InvalidConfigError, match="vLLM's flags given to the SGLang tier"):
        t.config(EngineConfig(max_num_seqs=8))
    with pytest.raises(InvalidConfigError, match="SGLang's flags given to the vLLM tier"):
        RealTier().config(SglangConfig(tp_size=2))
    with pytest.raises(InvalidConfigError, match="unexpected keyword argument 'max_num_seqs'"):
        t.measure_all({"max_num_seqs": 8}, "tiny-llama", "h200", [BURST])
    with pytest.raises(PolicyError):
        t.scheduled({})
    with pytest.raises(InvalidConfigError, match="garbage-collector modes"):
        RealTier(engine="sglang", gc="off")
    # Each engine's own collector mode unless one is named: SGLang's rows are measured frozen, vLLM's live.
    assert (RealTier(engine="sglang").gc, RealTier().gc) == ("frozen", "live")
    assert (RealTier(engine="sglang", gc="live").gc, RealTier(gc="frozen").gc) == ("live", "frozen")


def _fake_python(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_the_sglang_tier_runs_its_driver_with_the_config_and_reads_its_refusal(tmp_path):
    py = _fake_python(tmp_path / "python", f'printf "%s\\n" "$@" > {tmp_path}/argv\n'
                      'echo "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." >&2\n'
                      "exit 1\n")
    t = RealTier(engine="sglang", python=py, engine_args={"attention_backend": "triton"}, timeout_s=60)
    t.engine_version = "sglang-0.5.17"  # as if installed: the fake python stands in for the driver
    [tel] = t.measure_all(SglangConfig(page_size=16, schedule_policy="lpm"), "tiny-llama", "h200", [BURST])
    assert tel.error == "invalid_config: Not enough memory. Please try to increase --mem-fraction-static."
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:2] == ["-m", "rsi_env.real.sglang_driver"]
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert sets == ["schedule_policy=\"lpm\"", "page_size=16"]
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--server-arg"] == ['attention_backend="triton"']
    assert "--usage-context" not in argv and "--no-profile" not in argv and "--profile-deadline-s" not in argv
    assert argv[argv.index("--gc") + 1] == "frozen"  # SGLang's default


def test_the_sglang_tier_end_to_end_through_a_driver_process(tmp_path, fake_sglang):
    """RealTier -> `python -m rsi_env.real.sglang_driver` (a real process) -> the fake SGLang -> rows -> Telemetry;
    the driver's heap frozen after the warm-up, its pauses through each workload in the row."""
    t = RealTier(engine="sglang", engine_args={"attention_backend": "triton"}, timeout_s=120, gc="frozen",
                 env={"PYTHONPATH": str(fake_sglang), "FAKE_SGLANG_KWARGS": str(tmp_path / "kwargs.json")})
    t.engine_version = f"sglang-{sglang_fake.VERSION}"
    tels = t.measure_all(SglangConfig(chunked_prefill_size=512, max_running_requests=4), "tiny-llama", "h200",
                         [BURST, SHARED])
    assert [x.error for x in tels] == [None, None], tels
    assert all(x.out_tok_per_s > 0 for x in tels) and tels[1].prefix_cache_hit_rate > 0
    assert [r["workload"] for r in t.last_rows] == ["burst", "shared"]
    assert json.loads((tmp_path / "kwargs.json").read_text())["attention_backend"] == "triton"
    rec = t.record_fields(SglangConfig(tp_size=2), load_model("tiny-llama"), load_hardware("h200"), [BURST, SHARED],
                          tels)
    assert rec is not None and rec["resolved"][0]["max_running_requests"] == 4
    assert rec["extras"][1]["counters"]["prefix_cache_hits"] > 0 and len(rec["gpu_seconds"]) == 2
    assert all(x["gc"] == "frozen" and x["counters"]["driver_gc"]["frozen_objects"] > 1000 for x in rec["extras"])


def test_a_failed_workload_leaves_no_task_on_the_engines_loop():
    """The sampler is awaited even when a request fails, so nothing keeps running into the next workload."""
    engine = FakeEngine(skip_tokenizer_init=True, short=("burst-0",))
    with pytest.raises(RuntimeError):
        _run(engine, BURST)
    assert [x for x in asyncio.all_tasks(engine.loop) if not x.done()] == []
