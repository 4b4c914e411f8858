"""Running a suite: the reference passes and null does not, every attempt is read from the env (not the agent),
a run started again resumes, an agent that breaks fails alone, the report's numbers follow from the attempts,
and each attempt's trajectory lands in the experience store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rsi_env.errors import SuiteError
from rsi_env.store.record import default_store
from rsi_env.suite import agents
from rsi_env.suite.instance import load
from rsi_env.suite.report import summarize, write_report
from rsi_env.suite.runner import ATTEMPTS_FILE, read_attempts, run_attempt, run_suite, sample_instances


def test_the_reference_passes_every_instance_and_null_none(suite_file: Path):
    for iid in ("opt-batching-test", "bug-bugfix-s5"):
        ref = run_attempt(str(suite_file), iid, "reference", 0)
        assert ref.passed and ref.binary == 1.0 and ref.submitted and ref.error is None, ref
        null = run_attempt(str(suite_file), iid, "null", 0)
        assert not null.passed and null.submitted and null.binary == 0.0, null


def test_a_flag_instance_needs_its_fraction_of_the_ceiling(suite_file: Path, tmp_path: Path):
    """vLLM's defaults beat themselves by nothing; 64 sequences scores below 95 % of the 128-sequence ceiling."""
    suite = load(str(suite_file))
    inst = suite.get("opt-batching-test")
    env = inst.make_env()
    try:
        env.reset(seed=inst.seed)
        agents.write_files(env, {"serving.yaml": "max_num_seqs: 64\n"})
        agents.submit_unless_ended(env)
        v = env.unwrapped.verdict
        assert v is not None and not v.passed and "FAIL] improvement" in env.unwrapped.text, env.unwrapped.text
    finally:
        env.close()


def test_an_agent_that_breaks_fails_its_attempt_and_the_run_goes_on(suite_file: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch):
    def boom(self, env, instance, rng):
        raise RuntimeError("the agent fell over")

    monkeypatch.setattr(agents.NullAgent, "play", boom)
    suite = load(str(suite_file))
    out = run_suite(suite, suite.instances, "null", out_dir=tmp_path, progress=lambda line: None)
    assert len(out) == 2 and all(not a.passed and a.error and "fell over" in a.error for a in out)


def test_a_run_resumes_from_its_attempts_file(suite_file: Path, tmp_path: Path):
    suite = load(str(suite_file))
    lines: list[str] = []
    first = run_suite(suite, suite.instances[:1], "null", k=2, out_dir=tmp_path, progress=lines.append)
    assert len(first) == 2 and len((tmp_path / ATTEMPTS_FILE).read_text().splitlines()) == 2
    lines.clear()
    again = run_suite(suite, suite.instances[:1], "null", k=3, out_dir=tmp_path, progress=lines.append)
    assert len(again) == 3 and lines[0].startswith("resuming: 2 of 3")
    assert sum(1 for ln in lines if ln.startswith("[")) == 1  # only the third attempt ran
    with (tmp_path / ATTEMPTS_FILE).open("a") as f:  # a torn line, from a killed run
        f.write('{"suite": "rsi-bench')
    assert len(read_attempts(tmp_path)) == 3


def test_two_workers_give_what_one_gives(suite_file: Path, tmp_path: Path):
    suite = load(str(suite_file))
    one = run_suite(suite, suite.instances, "reference", out_dir=tmp_path / "one", progress=lambda line: None)
    two = run_suite(suite, suite.instances, "reference", workers=2, out_dir=tmp_path / "two",
                    progress=lambda line: None)
    assert [(a.instance, a.passed, round(a.reward, 9)) for a in one] == \
        [(a.instance, a.passed, round(a.reward, 9)) for a in two]


def test_the_report_follows_from_the_attempts(suite_file: Path, tmp_path: Path):
    suite = load(str(suite_file))
    ref = run_suite(suite, suite.instances, "reference", out_dir=tmp_path, progress=lambda line: None)
    null = run_suite(suite, suite.instances, "null", k=2, out_dir=tmp_path, progress=lambda line: None)
    r = summarize(ref)
    assert r["pass_at_1"] == 1.0 and r["instances"] == 2 and r["by_front"]["bug-fixing"]["pass_at_1"] == 1.0
    n = summarize(null, k=2)
    assert n["pass_at_1"] == 0.0 and n["pass_at_2"] == 0.0 and n["attempts"] == 4 and n["submitted"] == 4
    reports = write_report(tmp_path, read_attempts(tmp_path), k=1)
    assert set(reports) == {"null", "reference"}
    assert (tmp_path / "report.png").stat().st_size > 1000 and "| reference | 2 |" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "report.json").read_text())["reference"]["pass_at_1"] == 1.0


def test_every_attempt_lands_in_the_store_with_its_observations(suite_file: Path, tmp_path: Path):
    suite = load(str(suite_file))
    out = run_suite(suite, suite.instances[:1], "reference", out_dir=tmp_path, progress=lambda line: None)
    store = default_store()
    assert store is not None
    rows = store.trajectories("instance = ? AND agent = ?", ("opt-batching-test", "reference"))
    assert rows and rows[-1]["passed"] == 1 and rows[-1]["result"]["episode"] == out[0].episode
    assert any("submission PASSED" in t for t in rows[-1]["observations"])
    episodes = store.episodes("id = ?", (out[0].episode,))
    assert episodes and episodes[0]["passed"] == 1


def test_bad_requests_are_named():
    with pytest.raises(SuiteError, match="unknown suite"):
        load("rsi-bench-v0")
    with pytest.raises(SuiteError, match="unknown agent"):
        agents.make_agent("genius")
    with pytest.raises(SuiteError, match="unknown search"):
        agents.make_agent("search:nope")
    with pytest.raises(SuiteError, match="--base-url"):
        agents.make_agent("openai")


def test_a_sample_is_fixed_by_its_seed(suite_file: Path):
    suite = load(str(suite_file))
    assert sample_instances(suite.instances, 1, 0) == sample_instances(suite.instances, 1, 0)
    assert sample_instances(suite.instances, None, 0) == list(suite.instances)
    with pytest.raises(SuiteError):
        sample_instances(suite.instances, 0, 0)
    assert np.isfinite(suite.get("opt-batching-test").criterion["ceiling"])
