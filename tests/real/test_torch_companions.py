"""The torchvision trap: PyPI's CUDA builds of torch's companions beside the CPU torch are named, with the fix."""

from __future__ import annotations

from importlib import metadata

import pytest

from rsi_env.real.tier import RealTier, cuda_builds_beside_cpu_torch


def _versions(monkeypatch: pytest.MonkeyPatch, installed: dict[str, str]) -> None:
    def version(name: str) -> str:
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]
    monkeypatch.setattr(metadata, "version", version)


def test_cuda_companions_beside_the_cpu_torch_are_named(monkeypatch: pytest.MonkeyPatch):
    _versions(monkeypatch, {"torch": "2.13.0+cpu", "torchvision": "0.29.1", "torchaudio": "2.13.0+cpu"})
    assert cuda_builds_beside_cpu_torch() == ["torchvision"]
    _versions(monkeypatch, {"torch": "2.13.0+cpu"})
    assert cuda_builds_beside_cpu_torch() == []
    _versions(monkeypatch, {"torch": "2.13.0", "torchvision": "0.29.1"})  # the CUDA torch: they belong together
    assert cuda_builds_beside_cpu_torch() == []


def test_the_real_tier_refuses_to_start_vllm_beside_them_and_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch):
    tier = RealTier(timeout_s=5)
    if tier.engine_version == "none":
        pytest.skip("no vLLM here: the tier reports that first")
    _versions(monkeypatch, {"torch": "2.13.0+cpu", "torchvision": "0.29.1", "torchcodec": "0.14.0"})
    monkeypatch.setattr(RealTier, "_run", lambda *a, **k: pytest.fail("vLLM was started"))
    tel = tier.measure_all({}, "tiny-llama", "cpu", ["many_small"])
    assert tel[0].error is not None and "pip uninstall -y torchvision torchcodec" in tel[0].error
