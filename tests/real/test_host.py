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
    assert host._gpu_names() == []


def test_the_host_is_described_and_its_names_are_hashed(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    info = host_info()
    assert info["cpu"] and info["cpus"] == os.cpu_count()
    assert 1 <= info["cpus_usable"] <= info["cpus"]
    assert info["cuda_visible_devices"] == "1" and isinstance(info["gpus"], list)
    assert info["node"] != platform.node() and (info["node"] is None or len(info["node"]) == 12)
    assert host_info()["node"] == info["node"]  # the same host hashes the same
