"""`step_groups`: a real step trace's steps grouped by CUDA-graph mode and decode requests, priced by `StepCost`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsi_env.calibrate.step_groups import MIN_STEPS, price, step_groups
from rsi_env.engine import EngineConfig, load_hardware, load_model
from rsi_env.sim.calibration import load_calibration
from rsi_env.sim.cost import GRAPH_MODES, StepCost

LEASE7 = Path(__file__).resolve().parents[2] / "data" / "measurements" / "h200x2-vllm0.26" / "campaign7.jsonl"
SPEC = {"name": "many_small", "seed": 1, "requests": 8, "prompt_tokens": 100, "output_tokens": 20}


def _row(steps: list[tuple[float, int, int, int, int]], workload: str = "many_small", max_graph: int = 512) -> dict:
    """A real row whose trace has the given (time, decode requests, prompt requests, prompt tokens, running)."""
    cols: dict[str, list] = {c: [] for c in ("t", "tokens", "decode_reqs", "prefill_reqs", "prefill_tokens",
                                             "running")}
    for t, dec, pre, ptok, run in steps:
        for c, v in zip(cols, (t, dec + ptok, dec, pre, ptok, run), strict=True):
            cols[c].append(v)
    return {"workload": workload, "workload_spec": {**SPEC, "name": workload}, "steps": cols,
            "resolved": {"cudagraph_capture_sizes": [1, 2, 4, max_graph], "enforce_eager": False}}


def test_steps_are_grouped_by_how_vllm_ran_them_and_by_decode_requests():
    steps, t = [(0.0, 0, 1, 100, 1)], 0.0
    # each block's last step is followed by a step of another kind: a group of its own, too small to keep
    for _ in range(MIN_STEPS + 1):  # decode only, in a full graph: 6 ms
        t += 0.006
        steps.append((t, 40, 0, 0, 40))
    for _ in range(MIN_STEPS + 1):  # 40 decodes and two prompts (240 tokens): piecewise, 9 ms
        t += 0.009
        steps.append((t, 40, 2, 200, 42))
    for _ in range(MIN_STEPS + 1):  # 300 decodes and four prompts (700 tokens): past the largest graph, 40 ms
        t += 0.040
        steps.append((t, 300, 4, 400, 304))
    t += 1.0  # the engine idle: not a step
    steps.append((t, 300, 4, 400, 304))
    for _ in range(MIN_STEPS - 1):  # too few to be a group
        t += 0.010
        steps.append((t, 200, 0, 0, 200))
    groups = step_groups(_row(steps))
    by_mode = {g.mode: g for g in groups}
    assert len(groups) == 3 and set(by_mode) == set(GRAPH_MODES.values())
    full, pw, none = by_mode[GRAPH_MODES["FULL"]], by_mode[GRAPH_MODES["PIECEWISE"]], by_mode[GRAPH_MODES["NONE"]]
    assert full.real_s == pytest.approx(0.006) and full.decode_reqs == 40 and full.prefill_reqs == 0
    assert pw.real_s == pytest.approx(0.009) and pw.tokens == 240 and pw.n == MIN_STEPS
    assert none.real_s == pytest.approx(0.040) and none.tokens == 700 and none.n == MIN_STEPS  # the idle gap left out
    assert full.decode_ctx == pytest.approx(100 + 20 / 2)  # the workload's mean prompt plus half its output
    assert (full.next_mode, pw.next_mode, none.next_mode) == (full.mode, pw.mode, none.mode)
    assert none.next_tokens == 700
    # a smaller largest graph turns the piecewise steps into uncaptured ones
    assert {g.mode for g in step_groups(_row(steps, max_graph=128))} == {GRAPH_MODES["FULL"], GRAPH_MODES["NONE"]}
    # no groups where the trace has no compositions, or where the workload's contexts are not its mean's
    assert step_groups(_row(steps, workload="long_context")) == ()
    old = _row(steps)
    old["steps"]["decode_reqs"] = [-1] * len(steps)
    assert step_groups(old) == ()


def test_a_group_is_priced_as_the_step_of_its_mean_composition():
    m, hw = load_model("llama-3.1-8b"), load_hardware("h200")
    cost = StepCost(m, hw, EngineConfig().resolve(m, hw, "0.26"), load_calibration("h200", "0.26"))
    steps = [(0.0, 0, 1, 100, 1)] + [(0.01 * (k + 1), 300, 4, 400, 304) for k in range(MIN_STEPS + 1)]
    (g,) = step_groups(_row(steps))  # the last step, followed by none, is a group too small to keep
    expected = cost.step_time(700, 304, 304, 300 * g.decode_ctx, 4 * cost.chunk_pairs(100, 0), 0.0, False, 4)
    assert price(cost, g) == pytest.approx(expected)


def test_with_async_scheduling_a_step_is_priced_beside_the_next_steps_launches():
    """vLLM launches step k+1 before it emits step k's output: a decode step followed by one past the largest CUDA
    graph takes that step's launches into its own gap; without async scheduling each step pays its own."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h200")
    cal = load_calibration("h200", "0.26")
    decode = [(0.006 * (k + 1), 300, 0, 0, 300) for k in range(MIN_STEPS + 2)]
    alternating = [(0.02 * (k + 1), 300, 0, 0, 300) if k % 2 == 0 else (0.02 * (k + 1), 300, 4, 400, 304)
                   for k in range(2 * MIN_STEPS + 2)]
    groups = {(g.mode, g.next_mode): g for g in step_groups(_row(alternating))}
    before_uncaptured = groups[(GRAPH_MODES["FULL"], GRAPH_MODES["NONE"])]
    (alone,) = [g for g in step_groups(_row(decode)) if g.next_mode == GRAPH_MODES["FULL"]]
    for flag, shifted in ((True, True), (False, False)):
        cost = StepCost(m, hw, EngineConfig(async_scheduling=flag).resolve(m, hw, "0.26"), cal)
        launches = cost.dispatch(700)
        assert launches > 0.005  # an uncaptured step's launches: milliseconds
        assert (price(cost, before_uncaptured) > price(cost, alone) + 0.5 * launches) is shifted


def test_the_seventh_leases_dense_traces_have_groups_of_every_mode():
    rows = [json.loads(line) for line in LEASE7.read_text().splitlines() if line.strip()]
    assert {r["model"] for r in rows} == {"llama-3.1-8b", "qwen2.5-7b", "mistral-7b"}
    groups = [g for r in rows for g in step_groups(r)]
    assert len(groups) > 50 and {g.mode for g in groups} == set(GRAPH_MODES.values())
    assert all(g.real_s > 0 and g.n >= MIN_STEPS for g in groups)
    assert {r["workload"] for r in rows if step_groups(r)} <= {"burst_256", "short_long", "many_small",
                                                               "closed_short_long", "closed_many_small"}


def test_a_trace_without_compositions_gives_its_steady_decode_steps():
    """The first leases' traces say only how many requests ran and sampled each step: a step that ran and sampled as
    many as the steps on either side of it is read as a decode of them all (a full graph within the largest size, none
    with enforce_eager); a step where a request joined, left or was chunked is not read, nor its neighbours."""
    t, gen, run = [0.0], [1], [1]
    for k in range(3 * MIN_STEPS):  # 40 requests decoding, one joining at the middle step (a prompt beside them)
        t.append(t[-1] + (0.020 if k == 3 * MIN_STEPS // 2 else 0.006))
        n = 40 if k < 3 * MIN_STEPS // 2 else 41
        gen.append(n)
        run.append(n)
    row = {"workload": "many_small", "workload_spec": SPEC, "steps": {"t": t, "gen": gen, "running": run,
                                                                       "tokens": [-1] * len(t)},
           "resolved": {"cudagraph_capture_sizes": [1, 2, 4, 512], "enforce_eager": False}}
    (g,) = step_groups(row)  # 40 and 41 decodes share a bin; the steps next to the edges have no next step read
    assert g.mode == g.next_mode == GRAPH_MODES["FULL"] and g.prefill_reqs == 0 and 40 < g.decode_reqs < 41
    assert g.real_s == pytest.approx(0.006)  # the joining step (20 ms) and the steps beside it are out
    assert g.n == 3 * MIN_STEPS - 6
    eager = {**row, "resolved": {"cudagraph_capture_sizes": [], "enforce_eager": True}}
    assert {g.mode for g in step_groups(eager)} == {GRAPH_MODES["NONE"]}
