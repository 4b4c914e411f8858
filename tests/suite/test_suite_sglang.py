"""The suites with SGLang's flag instances (``engine="sglang"``): rsi-bench-v2 to v5, each rsi-bench-v1 as frozen
plus SGLang's instances, whose ceilings were found on SGLang's simulator with the calibrations the file names. v5's
were found on the simulator and calibrations this install ships; v2's before its prefill passes were held to SGLang's
prefill CUDA graphs, v3's and v4's with SGLang's H100 coefficients before their refits, so this install reports their
drift and refuses to run them without --allow-drift."""

from __future__ import annotations

import json
import random

import pytest

from rsi_env.cli import main as cli_main
from rsi_env.suite.agents import ReferenceAgent
from rsi_env.suite.instance import Suite, load
from rsi_env.wrappers.ladders import rsi_env_of

V1, V2, V3, V4, V5 = (load(f"rsi-bench-v{n}") for n in range(1, 6))


def sglang_of(suite: Suite) -> list:
    return [i for i in suite.instances if i.env_kwargs.get("engine") == "sglang"]


@pytest.mark.parametrize("suite", [V2, V3, V4, V5], ids=lambda s: s.id)
def test_each_keeps_every_v1_instance_as_frozen_and_adds_sglang_s(suite: Suite):
    v1 = {i.id: i.to_dict() for i in V1.instances}
    got = {i.id: i.to_dict() for i in suite.instances}
    assert all(got[k] == d for k, d in v1.items())
    sglang = sglang_of(suite)
    assert set(got) - set(v1) == {i.id for i in sglang} and len(sglang) >= 6
    assert {i.family for i in sglang} == {"SGLang-Batching", "SGLang-KVCache"}
    assert all(i.id.startswith("opt-sglang-") and i.engine_version == "sglang-0.5.17" for i in sglang)
    assert {k: suite.calibrations[k] for k in V1.calibrations} == dict(V1.calibrations)  # v1's ceilings' simulator


def test_v5_s_sglang_ceilings_name_sglang_s_calibration_and_this_install_uses_it():
    keys = {f"{i.env_kwargs['hardware']}@sglang-0.5.17" for i in sglang_of(V5)}
    assert keys <= set(V5.calibrations)
    assert V5.calibrations["h100-sxm@sglang-0.5.17"].startswith("h100-sxm-sglang-0.5-")  # SGLang's own fit
    assert V5.calibrations["h200@sglang-0.5.17"].startswith("h200-vllm0.26-")  # no SGLang fit: the chip's vLLM one
    assert V5.check_calibrations() == []


@pytest.mark.parametrize("suite", [V2, V3, V4], ids=lambda s: s.id)
def test_an_earlier_draw_reports_its_drift_and_a_run_of_it_is_refused(suite: Suite, tmp_path,
                                                                        capsys: pytest.CaptureFixture[str]):
    drift = suite.check_calibrations()
    assert any(d.startswith("h100-sxm@sglang-0.5.17: frozen with calibration h100-sxm-sglang-0.5-") for d in drift)
    assert cli_main(["suite", "run", "--suite", suite.id, "--agent", "null", "--sample", "1",
                     "--out", str(tmp_path / "run")]) != 0
    assert "pass --allow-drift to run anyway" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("suite", [V2, V3, V4, V5], ids=lambda s: s.id)
def test_the_listing_hides_references(suite: Suite, capsys: pytest.CaptureFixture[str]):
    assert cli_main(["suite", "list", "--suite", suite.id, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["count"] == len(suite.instances) and all("reference" not in i for i in listed["instances"])


@pytest.mark.parametrize("inst", random.Random(0).sample(sglang_of(V5), min(2, len(sglang_of(V5)))),
                         ids=lambda i: i.id)
def test_a_sample_of_v5_s_sglang_ceilings_reproduces_and_its_reference_passes(inst):
    env = inst.make_env()
    try:
        rsi = rsi_env_of(env)
        assert rsi.engine_kind.name == "sglang"
        ReferenceAgent().play(env, inst, None)  # type: ignore[arg-type]
        assert rsi.verdict is not None and rsi.verdict.passed, rsi.text
        assert rsi.verdict.score == pytest.approx(inst.criterion["ceiling"], abs=1e-6)
        frozen = V5.calibrations[f"{inst.env_kwargs['hardware']}@sglang-0.5.17"]
        assert all(t.calibration == frozen for t in rsi.base_tels)
    finally:
        env.close()
