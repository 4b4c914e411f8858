"""rsi-bench-v2: rsi-bench-v1 as frozen, plus SGLang's flag instances (``engine="sglang"``), whose ceilings were
found on SGLang's simulator with the calibrations the file names."""

from __future__ import annotations

import random

import pytest

from rsi_env.cli import main as cli_main
from rsi_env.suite.agents import ReferenceAgent
from rsi_env.suite.instance import load
from rsi_env.wrappers.ladders import rsi_env_of

V1, V2 = load("rsi-bench-v1"), load("rsi-bench-v2")
SGLANG = [i for i in V2.instances if i.env_kwargs.get("engine") == "sglang"]


def test_v2_keeps_every_v1_instance_as_frozen_and_adds_sglang_s():
    v1 = {i.id: i.to_dict() for i in V1.instances}
    v2 = {i.id: i.to_dict() for i in V2.instances}
    assert all(v2[k] == d for k, d in v1.items())
    added = set(v2) - set(v1)
    assert added == {i.id for i in SGLANG} and len(SGLANG) >= 6
    assert {i.family for i in SGLANG} == {"SGLang-Batching", "SGLang-KVCache"}
    assert all(i.id.startswith("opt-sglang-") and i.engine_version == "sglang-0.5.17" for i in SGLANG)
    assert {k: V2.calibrations[k] for k in V1.calibrations} == dict(V1.calibrations)  # v1's ceilings' simulator


def test_sglang_ceilings_name_sglang_s_calibration_and_this_install_uses_it():
    keys = {f"{i.env_kwargs['hardware']}@sglang-0.5.17" for i in SGLANG}
    assert keys <= set(V2.calibrations)
    assert V2.calibrations["h100-sxm@sglang-0.5.17"].startswith("h100-sxm-sglang-0.5-")  # SGLang's own fit
    assert V2.calibrations["h200@sglang-0.5.17"].startswith("h200-vllm0.26-")  # no SGLang fit: the chip's vLLM one
    assert V2.check_calibrations() == []


def test_the_listing_of_v2_hides_references(capsys: pytest.CaptureFixture[str]):
    import json

    assert cli_main(["suite", "list", "--suite", "rsi-bench-v2", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["count"] == len(V2.instances) and all("reference" not in i for i in listed["instances"])


@pytest.mark.parametrize("inst", random.Random(0).sample(SGLANG, min(2, len(SGLANG))), ids=lambda i: i.id)
def test_a_sample_of_sglang_ceilings_reproduces_and_its_reference_passes(inst):
    env = inst.make_env()
    try:
        rsi = rsi_env_of(env)
        assert rsi.engine_kind.name == "sglang"
        ReferenceAgent().play(env, inst, None)  # type: ignore[arg-type]
        assert rsi.verdict is not None and rsi.verdict.passed, rsi.text
        assert rsi.verdict.score == pytest.approx(inst.criterion["ceiling"], abs=1e-6)
        frozen = V2.calibrations[f"{inst.env_kwargs['hardware']}@sglang-0.5.17"]
        assert all(t.calibration == frozen for t in rsi.base_tels)
    finally:
        env.close()
