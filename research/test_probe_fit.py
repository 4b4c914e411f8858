"""The probe stage: a calibration's CPU terms moved to the host's CPU probe (`Calibration.at_cpu_probe`,
`research/probe_fit.py`)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from probe_fit import run_probe_calibration

from rsi_env.engine import Workload
from rsi_env.errors import CalibrationError
from rsi_env.sim import simulate
from rsi_env.sim.calibration import COEFFICIENTS, CPU_TERMS, Calibration, load_calibration

BASE = load_calibration("h200", "0.26")
TRUTH = BASE.with_coefficients({"cpu_probe_ref_ms": 15.0, "cpu_probe_exp": 0.8})
WORKLOAD = Workload.from_dict({"name": "small_busy", "seed": 5, "requests": 120, "prompt_tokens": {
    "dist": "uniform", "min": 32, "max": 128}, "output_tokens": {"dist": "uniform", "min": 16, "max": 48},
    "arrival": {"process": "poisson", "rate": 150}})


def test_a_probe_scales_the_cpu_terms_and_nothing_else():
    moved = TRUTH.at_cpu_probe(30.0)
    f = 2.0 ** 0.8
    for n in COEFFICIENTS:
        want = getattr(TRUTH, n) * (f if n in CPU_TERMS else 1.0)
        assert getattr(moved, n) == pytest.approx(want, rel=1e-12), n
    assert moved.id == f"{TRUTH.id}@probe30ms"
    assert TRUTH.at_cpu_probe(15.0).to_dict() | {"id": TRUTH.id} == TRUTH.to_dict()  # at the reference: unchanged


def test_a_probe_needs_a_reference_and_a_positive_reading():
    with pytest.raises(CalibrationError, match="no CPU-probe reference"):
        Calibration(hardware="h200").at_cpu_probe(20.0)
    for bad in (0.0, -3.0, float("nan"), float("inf")):
        with pytest.raises(CalibrationError, match="positive number of milliseconds"):
            TRUTH.at_cpu_probe(bad)


def test_a_slower_probe_slows_the_cpu_bound_workload_not_the_gpu_bound_one():
    fast = simulate({}, "llama-3.1-8b", "h200", WORKLOAD, calibration=TRUTH.at_cpu_probe(12.0))
    slow = simulate({}, "llama-3.1-8b", "h200", WORKLOAD, calibration=TRUTH.at_cpu_probe(26.0))
    assert slow.tpot_p50 > 1.1 * fast.tpot_p50 and slow.ttft_p50 > fast.ttft_p50
    assert fast.calibration.endswith("@probe12ms")
    # a long prompt's prefill is the GPU's work: the probe moves it by far less than the CPU-bound decode above
    long = Workload.from_dict({"name": "one_long", "seed": 1, "requests": 1, "prompt_tokens": 32000,
                               "output_tokens": 2, "arrival": {"process": "burst"}})
    a = simulate({}, "llama-3.1-8b", "h200", long, calibration=TRUTH.at_cpu_probe(12.0))
    b = simulate({}, "llama-3.1-8b", "h200", long, calibration=TRUTH.at_cpu_probe(26.0))
    assert b.ttft_p50 / a.ttft_p50 < 1.05 < slow.tpot_p50 / fast.tpot_p50
    with pytest.raises(CalibrationError):
        simulate({}, "llama-3.1-8b", "h200", WORKLOAD,
                 calibration=BASE.with_coefficients({"cpu_probe_ref_ms": 0.0}).at_cpu_probe(12.0))


def _rows(probes: list[float]) -> list[str]:
    """Rows as the real tier writes them, of runs simulated at ``TRUTH`` and each run's probe."""
    out = []
    for k, probe in enumerate(probes):
        for model in ("llama-3.1-8b", "qwen2.5-7b"):
            tel = simulate({}, model, "h200", WORKLOAD, calibration=TRUTH.at_cpu_probe(probe))
            out.append(json.dumps({"model": model, "flags": {}, "workload": WORKLOAD.name,
                                   "workload_spec": WORKLOAD.to_dict(), "telemetry": tel.to_dict(),
                                   "resolved": {"num_gpu_blocks": tel.num_gpu_blocks}, "vllm_version": "0.26.0",
                                   "startup_s": 60.0 + k, "host": {"cpu_probe_ms": probe}}))
    return out


def test_the_probe_stage_finds_how_the_cpu_terms_move_and_holds_out_runs(tmp_path):
    path = tmp_path / "probed.jsonl"
    path.write_text("\n".join(_rows([11.0, 16.0, 24.0, 30.0])) + "\n")
    base = BASE.with_coefficients({"cpu_probe_ref_ms": 0.0, "cpu_probe_exp": 0.0})  # a calibration with no stage
    base_path = tmp_path / "base.yaml"
    dataclasses.replace(base, id="h200-vllm0.26-noprobe").save(base_path)
    report = run_probe_calibration("h200", [str(path)], base=load_calibration("h200", "0.26", base_path),
                                   out=str(tmp_path / "c.yaml"))
    assert "from 8 engine starts" in report["summary"]  # two models at each of four probes
    cal = load_calibration("h200", "0.26", tmp_path / "c.yaml")
    for probe in (11.0, 30.0):  # the fitted rule moves the CPU terms as the truth does
        assert cal.at_cpu_probe(probe).cpu_step_s == pytest.approx(TRUTH.at_cpu_probe(probe).cpu_step_s, rel=0.05)
    for n in set(COEFFICIENTS) - {"cpu_probe_ref_ms", "cpu_probe_exp"}:
        assert getattr(cal, n) == getattr(base, n), n
    stage = cal.provenance["probe_stage"]
    assert stage["runs"] == 8 and cal.provenance["base"] == "h200-vllm0.26-noprobe"
    before, after = stage["leave_one_run_out_before"], stage["leave_one_run_out_after"]
    assert after["tpot_p50_mape"] < 0.05 < before["tpot_p50_mape"]  # each start predicted by the others' rule
    # where the CPU state does follow the probe, the rule beats one constant factor (the others' mean), which cannot
    # tell a fast start from a slow one
    assert after["tpot_p50_mape"] < 0.5 * stage["leave_one_run_out_constant"]["tpot_p50_mape"]
    assert [f["factor"] for f in stage["factors"][::2]] == sorted(f["factor"] for f in stage["factors"][::2])
    # one engine start has no spread of probes to fit on; the stage goes alone; the real tier measures its own
    one = tmp_path / "one.jsonl"
    one.write_text("\n".join(_rows([20.0])) + "\n")
    with pytest.raises(ValueError, match="fewer than two different probes"):
        run_probe_calibration("h200", [str(one)])
    probed = simulate({}, "llama-3.1-8b", "h200", "short_long", calibration=cal.at_cpu_probe(20.0))
    assert probed.calibration is not None and probed.calibration.endswith("@probe20ms")
