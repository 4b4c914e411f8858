"""The launch stage (`rsi_env.calibrate.launch`): ``piecewise_layer_s`` read off the real engine's step traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsi_env.calibrate.launch import LAUNCH, fit_launch, launch_error, launch_groups
from rsi_env.calibrate.stages import run_launch_calibration
from rsi_env.calibrate.step_groups import price, step_groups
from rsi_env.engine import EngineConfig, load_hardware, load_model
from rsi_env.sim.calibration import load_calibration
from rsi_env.sim.cost import GRAPH_MODES, StepCost

ROOT = Path(__file__).resolve().parents[2]
LEASE13 = ROOT / "data" / "measurements" / "h200-vllm0.26" / "campaign13.jsonl"
SPEC = {"name": "many_small", "seed": 1, "requests": 8, "prompt_tokens": 100, "output_tokens": 20}


def _row(gaps: dict[str, float], cycles: int = 12) -> dict:
    """A Llama-3.1-8B row of ``cycles`` x (three decode steps of 40 requests, then one with a 200-token prompt
    beside them), each step's gap set by its kind: ``dd`` a decode step a decode step follows, ``dp`` one a
    piecewise step follows, ``pd`` the piecewise step."""
    cols: dict[str, list] = {c: [] for c in ("t", "tokens", "decode_reqs", "prefill_reqs", "prefill_tokens",
                                             "running")}
    t = 0.0

    def add(gap: float, dec: int, pre: int, ptok: int) -> None:
        nonlocal t
        t += gap
        for c, v in zip(cols, (t, dec + ptok, dec, pre, ptok, dec + pre), strict=True):
            cols[c].append(v)

    add(0.0, 40, 0, 0)
    for _ in range(cycles):
        add(gaps["dd"], 40, 0, 0)
        add(gaps["dd"], 40, 0, 0)
        add(gaps["dp"], 40, 0, 0)
        add(gaps["pd"], 40, 1, 200)
    return {"model": "llama-3.1-8b", "flags": {}, "workload": "many_small", "workload_spec": SPEC, "steps": cols,
            "telemetry": {"error": None},
            "resolved": {"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], "enforce_eager": False}}


def test_the_stage_recovers_the_launch_cost_the_steps_were_timed_with():
    """Steps timed as the cost model prices them with 300 us a layer: fitted from 51 us, the stage finds 300 us,
    and the steps it reads are only those a piecewise step follows (the decode-only ones say nothing of it)."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h200")
    base = load_calibration("h200", "0.26").with_coefficients({LAUNCH: 51e-6})
    true = base.with_coefficients({LAUNCH: 300e-6})
    cost = StepCost(m, hw, EngineConfig().resolve(m, hw, "0.26"), true)
    kinds = {(g.mode, g.next_mode): g for g in step_groups(_row({"dd": 0.006, "dp": 0.007, "pd": 0.008}))}
    assert len(kinds) == 3
    timed = _row({"dd": price(cost, kinds[(2, 2)]), "dp": price(cost, kinds[(2, 1)]), "pd": price(cost, kinds[(1, 2)])})
    runs = launch_groups([timed])
    assert [len(r.groups) for r in runs] == [1] and runs[0].groups[0].next_mode == 1
    fitted = fit_launch(runs, base, hw)
    assert getattr(fitted, LAUNCH) == pytest.approx(300e-6, rel=1e-3)
    assert {n for n in base.to_dict() if getattr(fitted, n) != getattr(base, n)} == {LAUNCH}
    assert launch_error(runs, fitted, hw)["median_real_over_priced"] == pytest.approx(1.0, abs=1e-3)
    assert launch_error(runs, base, hw)["median_real_over_priced"] > 1.3  # 51 us prices those steps far too fast
    # A step that only a bound can explain is fitted to that bound.
    assert getattr(fit_launch(launch_groups([_row({"dd": 0.006, "dp": 1.0 / 8, "pd": 0.008})]), base, hw),
                   LAUNCH) == pytest.approx(2e-3)


def test_runs_the_stage_cannot_read_are_left_out():
    """Under async scheduling a piecewise step's launch is in the gap before the previous step's output; without it,
    in its own. Runs whose launches go otherwise (MoE, several GPUs, enforce_eager) or that failed give nothing."""
    row = _row({"dd": 0.006, "dp": 0.012, "pd": 0.006})
    (run,) = launch_groups([row])
    assert [(g.mode, g.next_mode) for g in run.groups] == [(GRAPH_MODES["FULL"], GRAPH_MODES["PIECEWISE"])]
    (sync,) = launch_groups([{**row, "resolved": {**row["resolved"], "async_scheduling": False}}])
    assert [g.mode for g in sync.groups] == [GRAPH_MODES["PIECEWISE"]]
    assert launch_groups([{**row, "flags": {"enforce_eager": True}}]) == []
    assert launch_groups([{**row, "flags": {"tensor_parallel_size": 2}}]) == []
    assert launch_groups([{**row, "model": "qwen3-30b-a3b"}]) == []
    assert launch_groups([{**row, "telemetry": {"error": "crash: boom"}}]) == []
    with pytest.raises(ValueError, match="no groups"):
        fit_launch([], load_calibration("h200", "0.26"), load_hardware("h200"))


def test_the_launch_stage_alone_sets_one_term_and_records_itself(tmp_path, capsys):
    """`rsi-env calibrate launch`: only ``piecewise_layer_s`` moves, the base is named, the split and
    the priced steps before and after are recorded."""
    from rsi_env.cli import main

    base = load_calibration("h200", "0.26")
    rep = run_launch_calibration("h200", [str(LEASE13)], out=str(tmp_path / "c.yaml"))
    cal = load_calibration("h200", "0.26", tmp_path / "c.yaml")
    stage = cal.provenance["launch_stage"]
    assert cal.provenance["base"] == base.id != cal.id and stage["terms"] == [LAUNCH]
    assert {n for n in base.to_dict() if n not in ("id", "provenance") and getattr(cal, n) != getattr(base, n)} <= {
        LAUNCH}
    assert stage["value"] == getattr(cal, LAUNCH) and stage["n_held_out_configs"] >= 1
    assert stage["all_configs"]["median_real_over_priced"] == pytest.approx(1.0, abs=0.02)
    assert "launch stage after" in rep["summary"]
    assert main(["calibrate", "launch", "--hardware", "h200", "--measurements", str(LEASE13), "--base",
                 str(tmp_path / "c.yaml"), "--out", str(tmp_path / "d.yaml")]) == 0
    assert load_calibration("h200", "0.26", tmp_path / "d.yaml").provenance["base"] == cal.id
    # Runs with no step the stage can read (here: none at all) are refused with what was missing.
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["calibrate", "launch", "--hardware", "h200", "--measurements", str(tmp_path / "empty.jsonl")]) == 2
    assert "has steps followed by a piecewise step" in capsys.readouterr().err


def test_the_shipped_calibration_reproduces_its_launch_stage():
    """The shipped calibration's last stage is the launch stage: the step traces it names, priced by the simulator
    as it stands, give the numbers it recorded."""
    cal = load_calibration("h200", "0.26")
    stage = cal.provenance["launch_stage"]
    rows = [json.loads(x) for m in stage["measurements"] for x in (ROOT / m).read_text().splitlines() if x.strip()]
    assert launch_error(launch_groups(rows), cal, load_hardware("h200")) == stage["all_configs"]
    assert stage["all_configs"]["median_real_over_priced"] == pytest.approx(1.0, abs=0.01)


EAGER_RUNS = ROOT / "data" / "measurements" / "h200x2-vllm0.26" / "eager_steps.jsonl"


def _eager_row(step_s: float, batch: int = 40, steps: int = 30) -> dict:
    """An enforce_eager Llama-3.1-8B row of ``steps`` decode steps of ``batch`` requests, each ``step_s`` apart."""
    cols: dict[str, list] = {c: [] for c in ("t", "tokens", "decode_reqs", "prefill_reqs", "prefill_tokens",
                                             "running")}
    for k in range(steps):
        for c, v in zip(cols, (k * step_s, batch, batch, 0, 0, batch), strict=True):
            cols[c].append(v)
    return {"model": "llama-3.1-8b", "flags": {"enforce_eager": True}, "workload": "many_small",
            "workload_spec": SPEC, "steps": cols, "telemetry": {"error": None},
            "resolved": {"cudagraph_capture_sizes": [], "enforce_eager": True}}


def test_eager_runs_set_the_eager_launch_cost_and_nothing_else():
    """An enforce_eager run's every step launches its layers' kernels from Python: its groups time ``eager_layer_s``
    (the piecewise term never reads them, nor the eager term a compiled run's). Steps timed as the cost model prices
    them with 400 us a layer give 400 us back; a piecewise run beside it keeps its own term."""
    from rsi_env.calibrate.launch import EAGER

    m, hw = load_model("llama-3.1-8b"), load_hardware("h200")
    base = load_calibration("h200", "0.26").with_coefficients({EAGER: 100e-6})
    true = base.with_coefficients({EAGER: 400e-6})
    (g,) = step_groups(_eager_row(0.015))
    cost = StepCost(m, hw, EngineConfig(enforce_eager=True).resolve(m, hw, "0.26"), true)
    timed = _eager_row(price(cost, g))
    assert launch_groups([timed]) == []  # the piecewise term's runs only, by default
    (run,) = launch_groups([timed], (LAUNCH, EAGER))
    assert run.term == EAGER
    fitted = fit_launch([run], base, hw)
    assert getattr(fitted, EAGER) == pytest.approx(400e-6, rel=1e-3)
    assert {n for n in base.to_dict() if getattr(fitted, n) != getattr(base, n)} == {EAGER}
    both = launch_groups([timed, _row({"dd": 0.006, "dp": 0.012, "pd": 0.006})], (LAUNCH, EAGER))
    assert sorted(r.term for r in both) == [EAGER, LAUNCH]
    refit = fit_launch(both, base, hw)
    assert getattr(refit, EAGER) == pytest.approx(400e-6, rel=1e-3) and getattr(refit, LAUNCH) != getattr(base, LAUNCH)


def test_the_launch_stage_fits_the_terms_asked_for(tmp_path, capsys):
    """``rsi-env calibrate launch --terms``: only the runs of the terms asked for are read (a lease's eager runs stay
    out of a piecewise refit), each term fitted records its own entry; a stage that fits all its terms at once, or a
    term no run shows, is refused by name."""
    from rsi_env.calibrate.launch import EAGER
    from rsi_env.calibrate.stages import run_stage
    from rsi_env.cli import main

    shipped = load_calibration("h200", "0.26")
    base = shipped.with_coefficients({EAGER: 100e-6})
    rep = run_launch_calibration("h200", [str(EAGER_RUNS)], base=base, out=str(tmp_path / "e.yaml"), terms=(EAGER,))
    cal = load_calibration("h200", "0.26", tmp_path / "e.yaml")
    assert set(rep["terms"]) == {EAGER} and cal.provenance["eager_launch_stage"]["terms"] == [EAGER]
    assert cal.provenance["launch_stage"] == base.provenance["launch_stage"]  # the piecewise record is the base's
    assert {n for n in base.to_dict() if n not in ("id", "provenance") and getattr(cal, n) != getattr(base, n)} == {
        EAGER}
    assert getattr(cal, EAGER) == pytest.approx(getattr(shipped, EAGER), rel=1e-6)  # the shipped one's, from 100 us
    assert cal.provenance["eager_launch_stage"]["all_configs"]["median_real_over_priced"] == pytest.approx(1.0, abs=0.02)
    with pytest.raises(ValueError, match="shows"):
        run_launch_calibration("h200", [str(EAGER_RUNS)], terms=(LAUNCH,))
    with pytest.raises(ValueError, match="fits all its terms"):
        run_stage("memory", "h200", [str(EAGER_RUNS)], terms=("non_torch_bytes",))
    assert main(["calibrate", "launch", "--hardware", "h200", "--measurements", str(EAGER_RUNS), "--terms",
                 "eager_layer_s", "--out", str(tmp_path / "f.yaml")]) == 0
    assert "eager_layer_s" in capsys.readouterr().out


def test_the_shipped_calibration_reproduces_its_eager_launch_stage():
    """The shipped calibration's eager launch cost came from the training leases' enforce_eager step traces (the
    two-H200 host's, with no per-step compositions: their steady decode steps): priced by the simulator as it
    stands, they give the numbers it recorded, a median real/priced of 1, and none of them is an unseen set's."""
    from rsi_env.calibrate.launch import EAGER

    cal = load_calibration("h200", "0.26")
    stage = cal.provenance["eager_launch_stage"]
    assert stage["terms"] == [EAGER] and stage["value"] == getattr(cal, EAGER)
    assert not any("heldout" in m for m in stage["measurements"])
    rows = [json.loads(x) for m in stage["measurements"] for x in (ROOT / m).read_text().splitlines() if x.strip()]
    assert launch_error(launch_groups(rows, (EAGER,)), cal, load_hardware("h200")) == stage["all_configs"]
    assert stage["all_configs"]["median_real_over_priced"] == pytest.approx(1.0, abs=0.01)
