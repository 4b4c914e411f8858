"""RSI/VLLMBugFix-v0's judging of an engine report, which a process running the agent's code wrote (no engine here).

The agent's module runs in the harness's process, so what that process tells the supervisor can be anything: a key
missing, a list of the wrong length, a string where a number was. Whatever it holds, the hidden checks
(`checks.judge`) and the bench (`tier.judge_bench`) answer without raising, the checks pass only where every number
they read equals the clean engine's, and a bench never pays more than the clean engine's rate (its verified 100 %
only where the schedule's numbers equal the clean engine's). The clean report here is a stand-in built from the job,
the shape the harness writes: these tests are of the judging code, not of vLLM. The engine time both read is
the supervisor's (``measured``): the times the engine's process reports move no rate, and a report is read
only under the supervisor's signature.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.workload import Workload
from rsi_env.sandbox.hidden import CheckResult
from rsi_env.tasks.vllm_bugfix import checks as checks_module
from rsi_env.tasks.vllm_bugfix.checks import CHECK_NAMES, RETAKE_FLOOR, THROUGHPUT_RETAKES, hidden_job, judge
from rsi_env.tasks.vllm_bugfix.env import BENCH_REPS, WORKLOAD_DIR
from rsi_env.tasks.vllm_bugfix.runs import ENGINE_ARGS, EngineRun, job_for, read_report
from rsi_env.tasks.vllm_bugfix.tier import UNVERIFIED_RATE, judge_bench

SAME = ("tokens", "steps", "preemptions", "prefix_hits", "prefix_queries")
WORKLOADS = [Workload.from_dict(yaml.safe_load((WORKLOAD_DIR / f"{n}.yaml").read_text()))
             for n in ("vbf_chat", "vbf_long", "vbf_burst")]
CPU = load_hardware("cpu")
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**9, 10**9), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=4), st.lists(st.integers(-3, 3), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def clean_report(job: dict[str, Any]) -> dict[str, Any]:
    """A report of the harness's shape for ``job``: every request served, its numbers made up but consistent."""
    phases, measured = {}, {}
    for ph in job["phases"]:
        reps = []
        for k, requests in enumerate(ph["reps"]):
            steps = 10 + len(requests)
            reps.append({"steps": steps, "wall_s": 0.5 + k, "cpu_s": 0.4 + k, "stalled": "",
                         "tokens": [[(i * 7 + j) % 97 for j in range(m)] for i, (_, m) in enumerate(requests)],
                         "first": [0.01 * (i + 1) for i in range(len(requests))],
                         "finish": [0.2 + 0.01 * i for i in range(len(requests))],
                         "step_cpu": [0.04] * steps, "step_wall": [0.05] * steps,
                         "preemptions": float(k), "prefix_hits": 32.0 * k, "prefix_queries": 96.0})
        phases[ph["name"]] = reps
        measured[ph["name"]] = [{"cpu_s": r["cpu_s"] + 0.01, "wall_s": r["wall_s"] + 0.01} for r in reps]
    return {"vllm_version": "0.32.0", "device": "cpu", "startup_s": 1.0, "phases": phases, "measured": measured,
            "free_blocks": 63,
            "num_blocks": 64, "resolved": {"max_num_seqs": 8, "block_size": 32, "num_gpu_blocks": 64}}


HIDDEN = hidden_job()
BENCH = job_for(WORKLOADS, BENCH_REPS)
CLEAN_HIDDEN, CLEAN_BENCH = clean_report(HIDDEN), clean_report(BENCH)


@st.composite
def corrupted(draw: st.DrawFn, report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with one to three values somewhere inside it replaced by junk, or deleted."""
    out = copy.deepcopy(report)
    for _ in range(draw(st.integers(1, 3))):
        node: Any = out
        for _depth in range(6):
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            k = draw(st.sampled_from(keys))
            child = node[k]
            if isinstance(child, (dict, list)) and child and draw(st.booleans()):
                node = child
                continue
            if draw(st.booleans()):
                del node[k]
            else:
                node[k] = draw(JUNK)
            break
    return out


def _checked_equal(got: dict[str, Any], clean: dict[str, Any]) -> bool:
    """Whether every number the hidden checks read equals the clean report's."""
    if got.get("resolved") != clean["resolved"] or got.get("free_blocks") != clean["free_blocks"] \
            or got.get("num_blocks") != clean["num_blocks"]:
        return False
    for name, reps in clean["phases"].items():
        mine = got["phases"][name]
        if any(m.get(k) != r[k] for m, r in zip(mine, reps, strict=True) for k in SAME if k != "steps"):
            return False
    return True


def test_the_clean_report_passes_every_check_and_its_bench_is_verified():
    res = judge(EngineRun(copy.deepcopy(CLEAN_HIDDEN)), CLEAN_HIDDEN, HIDDEN)
    assert [c.name for c in res] == list(CHECK_NAMES) and all(c.ok for c in res), res
    bench = judge_bench(EngineRun(copy.deepcopy(CLEAN_BENCH)), CLEAN_BENCH, WORKLOADS, CPU)
    assert bench.verified == [True] * 3 and all(t.ok for t in bench.telemetry)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_malformed_report_is_judged_never_raised_and_passes_only_with_the_clean_numbers(data):
    got = data.draw(corrupted(CLEAN_HIDDEN))
    res = judge(EngineRun(got), CLEAN_HIDDEN, HIDDEN)
    assert [c.name for c in res] == list(CHECK_NAMES)
    if all(c.ok for c in res):
        assert _checked_equal(got, CLEAN_HIDDEN)
    # the throughput's second measurement is the agent's too
    again = judge(EngineRun(copy.deepcopy(CLEAN_HIDDEN)), CLEAN_HIDDEN, HIDDEN, [(CLEAN_HIDDEN, got)])
    assert [c.name for c in again] == list(CHECK_NAMES)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_malformed_bench_report_never_raises_nor_pays_more_than_the_clean_rate(data):
    got = data.draw(corrupted(CLEAN_BENCH))
    res = judge_bench(EngineRun(got), CLEAN_BENCH, WORKLOADS, CPU)
    assert len(res.telemetry) == len(res.verified) == len(WORKLOADS)
    for w, t, c, ok in zip(WORKLOADS, res.telemetry, res.clean, res.verified, strict=True):
        if t.ok:
            assert t.out_tok_per_s <= c.out_tok_per_s * (1.0 if ok else UNVERIFIED_RATE) * (1 + 1e-12)
        if ok:
            assert all(g.get(k) == r[k] for g, r in zip(got["phases"][w.name], CLEAN_BENCH["phases"][w.name],
                                                        strict=True) for k in SAME)


def test_a_report_whose_times_are_not_one_per_request_is_a_failed_workload():
    got = copy.deepcopy(CLEAN_BENCH)
    for rep in got["phases"]["vbf_chat"]:
        rep["first"], rep["finish"] = [0.0], [0.01]
    res = judge_bench(EngineRun(got), CLEAN_BENCH, WORKLOADS, CPU)
    assert not res.telemetry[0].ok and "malformed" in (res.telemetry[0].error or "")
    assert res.telemetry[1].ok and res.telemetry[2].ok


def _scaled(report: dict[str, Any], reported: float, measured: float) -> dict[str, Any]:
    """``report`` with every time the engine's process reports times ``reported``, the supervisor's times ``measured``."""
    out = copy.deepcopy(report)
    for reps in out["phases"].values():
        for r in reps:
            r["cpu_s"], r["wall_s"] = r["cpu_s"] * reported, r["wall_s"] * reported
            r["step_cpu"] = [t * reported for t in r["step_cpu"]]
            r["step_wall"] = [t * reported for t in r["step_wall"]]
    for times in out["measured"].values():
        for m in times:
            m["cpu_s"], m["wall_s"] = m["cpu_s"] * measured, m["wall_s"] * measured
    return out


def test_throughput_reads_the_supervisors_times_never_the_reported_ones():
    slow_but_clean_looking = _scaled(CLEAN_HIDDEN, reported=0.5, measured=3.0)
    res = {c.name: c for c in judge(EngineRun(slow_but_clean_looking), CLEAN_HIDDEN, HIDDEN)}
    assert not res["throughput"].ok and res["throughput"].reason.startswith("0.33x"), res["throughput"]
    assert all(c.ok for n, c in res.items() if n != "throughput")
    fast_but_slow_looking = _scaled(CLEAN_HIDDEN, reported=10.0, measured=1.0)
    assert all(c.ok for c in judge(EngineRun(fast_but_slow_looking), CLEAN_HIDDEN, HIDDEN))
    bench = judge_bench(EngineRun(_scaled(CLEAN_BENCH, reported=0.5, measured=2.0)), CLEAN_BENCH, WORKLOADS, CPU)
    for t, c in zip(bench.telemetry, bench.clean, strict=True):
        assert t.out_tok_per_s == pytest.approx(c.out_tok_per_s / 2)


def test_a_report_is_read_only_under_the_supervisors_signature():
    secret = "ab" * 32
    text = json.dumps(CLEAN_HIDDEN, sort_keys=True)
    mac = hmac.new(bytes.fromhex(secret), text.encode(), hashlib.sha256).hexdigest()
    assert read_report(json.dumps({"body": text, "mac": mac}).encode(), secret).out == CLEAN_HIDDEN
    for forged in (json.dumps(CLEAN_HIDDEN), json.dumps({"body": text, "mac": "0" * 64}),
                   json.dumps({"body": text.replace("0.01", "0.02"), "mac": mac}), "not json"):
        run = read_report(forged.encode(), secret)
        assert run.out == {} and "signature" in (run.error or ""), run
    assert "left no report" in (read_report(None, secret, "the log", "exit 1").error or "")


def _scripted_check(monkeypatch: pytest.MonkeyPatch, workspace: list[float], clean: list[float],
                    first_clean: float = 1.0, edit: Callable[[dict[str, Any]], None] | None = None,
                    ) -> tuple[list[CheckResult], list[str]]:
    """`check_workspace` where each engine run's supervisor times are the next factor of ``workspace`` (the
    workspace's runs, each report changed by ``edit`` too) or ``clean`` (fresh clean runs) times the clean report's;
    the order the runs came in. A run beyond the factors given fails the test (StopIteration)."""
    order: list[str] = []
    ws, cl = iter(workspace), iter(clean)

    def run_engine(files: Any, job: Any, shadowed: Any, backend: str, timeout_s: float = 0.0,
                   trusted: bool = False) -> EngineRun:
        order.append("clean" if trusted else "workspace")
        report = _scaled(CLEAN_HIDDEN, reported=1.0, measured=next(cl) if trusted else next(ws))
        if edit is not None and not trusted:
            edit(report)
        return EngineRun(report)

    monkeypatch.setattr(checks_module, "run_engine", run_engine)
    monkeypatch.setattr(checks_module, "clean_run",
                        lambda *a, **k: EngineRun(_scaled(CLEAN_HIDDEN, reported=1.0, measured=first_clean)))
    monkeypatch.setattr(checks_module, "hidden_job", lambda: HIDDEN)
    files = {ENGINE_ARGS: f"# {workspace} {clean} {edit}\n"}  # a key of its own: no remembered verdict
    return checks_module.check_workspace(files, (), fresh=True), order


def test_a_throughput_shortfall_is_retaken_beside_fresh_clean_runs_in_alternating_order(monkeypatch):
    # the first run and two retakes fall short under a co-tenant's load; the third pair is quiet
    res, order = _scripted_check(monkeypatch, workspace=[1.6, 1.5, 1.6, 1.0], clean=[1.0, 1.0, 1.0])
    assert all(c.ok for c in res), res
    assert order == ["workspace", "clean", "workspace", "workspace", "clean", "clean", "workspace"]


def test_a_fix_slower_in_earnest_fails_every_retake(monkeypatch):
    res, order = _scripted_check(monkeypatch, workspace=[1.25] * 4, clean=[1.0] * 3)
    thr = {c.name: c for c in res}["throughput"]
    assert not thr.ok and thr.reason.startswith("0.80x"), thr
    assert order.count("workspace") == 1 + THROUGHPUT_RETAKES and order.count("clean") == THROUGHPUT_RETAKES


def test_a_retake_beside_a_slower_clean_run_counts_and_stops_the_retakes(monkeypatch):
    # the clean engine, measured beside it, was as slowed as the workspace: the pair clears the bar
    res, order = _scripted_check(monkeypatch, workspace=[1.5, 1.5], clean=[1.5])
    assert all(c.ok for c in res) and len(order) == 3, (res, order)


def test_a_different_schedule_is_never_retaken(monkeypatch):
    phase = yaml.safe_load(checks_module.CHECKS_FILE.read_text())["throughput_phase"]

    def one_more_step(report: dict[str, Any]) -> None:
        report["phases"][phase][0]["steps"] += 1

    res, order = _scripted_check(monkeypatch, workspace=[1.0], clean=[], edit=one_more_step)
    thr = {c.name: c for c in res}["throughput"]
    assert not thr.ok and thr.reason.endswith("schedule)") and order == ["workspace"], (thr, order)


def test_a_collapse_beyond_any_hosts_noise_is_not_retaken(monkeypatch):
    res, order = _scripted_check(monkeypatch, workspace=[1.0 / (RETAKE_FLOOR * 0.9)], clean=[])
    thr = {c.name: c for c in res}["throughput"]
    assert not thr.ok and order == ["workspace"], (thr, order)
    # just above the floor, it is
    res, order = _scripted_check(monkeypatch, workspace=[1.0 / (RETAKE_FLOOR * 1.1)] * 4, clean=[1.0] * 3)
    assert order.count("workspace") == 1 + THROUGHPUT_RETAKES


def test_a_verdict_failing_another_check_is_not_retaken(monkeypatch):
    def one_wrong_token(report: dict[str, Any]) -> None:
        report["phases"][next(iter(report["phases"]))][0]["tokens"][0][0] += 1

    res, order = _scripted_check(monkeypatch, workspace=[1.5], clean=[], edit=one_wrong_token)
    got = {c.name: c for c in res}
    assert not got["greedy tokens"].ok and not got["throughput"].ok and order == ["workspace"], (got, order)
