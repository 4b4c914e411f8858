"""RSI/BugFix-v0: every instance fails a hidden check, the reference fix (the clean engine) earns the binary
reward and the bugged workspace does not, the generator is deterministic, and hostile code is contained."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rsi_env  # noqa: F401  (registers the envs)
import rsi_env.engine.config
import rsi_env.sim.engine
import rsi_env.tasks.bugfix.kv_cache
from rsi_env.sandbox.episode import EpisodeSandbox
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.tasks.bugfix import checks, generator
from rsi_env.tasks.bugfix.checks import check_workspace, hidden_job, reference, run_workspace
from rsi_env.tasks.bugfix.env import BugFixEnv
from rsi_env.tasks.bugfix.generator import catalogue_hash, generate
from rsi_env.tasks.bugfix.mutations import BUG_CLASSES, apply_mutations, load_mutations
from rsi_env.tasks.bugfix.templates import CLEAN_ENGINE, ENGINE_FILES, LOCAL_IMPORT, clean_modules, clean_workspace

BACKEND = "bubblewrap"
CLEAN = clean_workspace()


def reference_fix(env: BugFixEnv):
    """The reference solution: each injected bug reverted by an edit, which leaves the clean engine's text."""
    assert env.instance is not None
    muts = load_mutations()
    out = None
    for m in reversed(env.instance.mutations):
        out = env.step({"kind": 1, "path": muts[m].file, "old": muts[m].new, "new": muts[m].old})
    return out


def shell(env: Any, command: str, timeout_s: float = 120.0) -> str:
    """``command`` in a code task's episode sandbox, built as the env builds it, with its ``sandbox_profile()``."""
    assert env.episode_sandbox is not None and env.workspace is not None
    if env.episode_sandbox.profile is None:  # until the base env passes sandbox_profile() itself
        env.episode_sandbox = EpisodeSandbox(env.sandbox_backend, env.workspace.root, profile=env.sandbox_profile())
    res = env.episode_sandbox.run(command, timeout_s=timeout_s, max_output=1 << 20)
    return res.output


def seed_of_class(bug_class: str, shown: bool = False) -> int:
    """The first precomputed seed whose only bug is of ``bug_class`` (``shown``: the task's workloads show it)."""
    return next(s for s, i in sorted(generator._table().items())
                if i.bug_classes == (bug_class,) and not (shown and i.difficulty["distance"] == 2))


@pytest.fixture(scope="module")
def env():
    e = gym.make("RSI/BugFix-v0", sandbox=BACKEND).unwrapped
    yield e
    e.close()


def test_the_workspace_is_bugfix_s_engine_loop_over_the_package_s_pool_and_config():
    src = {m: Path(m.__file__).read_text() for m in (rsi_env.tasks.bugfix.kv_cache, rsi_env.engine.config)}
    assert CLEAN["kv_cache.py"] == src[rsi_env.tasks.bugfix.kv_cache]
    assert CLEAN["config.py"] == src[rsi_env.engine.config]
    assert CLEAN["engine.py"] == CLEAN_ENGINE.read_text().replace(*LOCAL_IMPORT)
    kv, engine, config = clean_modules()  # what workspaces are judged against: the same sources
    assert (kv, config) == (rsi_env.tasks.bugfix.kv_cache, rsi_env.engine.config) and engine.__file__ == str(CLEAN_ENGINE)
    assert {"tests/test_kv_cache.py", "tests/test_engine.py", "tests/conftest.py"} <= set(CLEAN)


def test_every_bug_operator_lands_once_and_changes_its_file():
    muts = load_mutations()
    assert {m.bug_class for m in muts.values()} == set(BUG_CLASSES)
    for m in muts.values():
        assert CLEAN[m.file].count(m.old) == 1, m.id
        assert apply_mutations(CLEAN, [m.id])[m.file] != CLEAN[m.file]


def test_the_clean_engine_passes_every_hidden_check_in_a_sandbox():
    job = hidden_job("qwen2.5-7b", "l4")
    got = run_workspace(CLEAN, job, BACKEND)
    assert got.error is None
    ref = reference(job)
    assert got.out["runs"] == ref["runs"] and got.out["pool_ops"] == ref["pool_ops"]
    assert all(c.ok for c in check_workspace(CLEAN, BACKEND)), check_workspace(CLEAN, BACKEND)


def test_the_precomputed_instances_are_fresh_and_a_sample_still_fails_its_checks():
    table = generator._table()
    assert len(table) >= 64, "stale instances.yaml: python -m rsi_env.tasks.bugfix.generator --seeds 0-63"
    for seed in (1, 17, 42):
        inst = table[seed]
        job = hidden_job("qwen2.5-7b", "l4")
        verdict = checks._judge(run_workspace(inst.files(), job, BACKEND), reference(job), job)  # uncached
        assert tuple(c.name for c in verdict if not c.ok) == inst.failing


def test_the_generator_is_deterministic_per_seed():
    assert generate(9, BACKEND) == generator._table()[9]  # the table was drawn in another process
    assert catalogue_hash() == catalogue_hash()


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(min_value=10_000, max_value=10**9))
def test_any_seed_gives_an_instance_that_fails_a_hidden_check(seed: int):
    inst = generate(seed, BACKEND)
    assert inst.failing and 1 <= inst.difficulty["level"] <= 6
    assert not all(c.ok for c in check_workspace(inst.files(), BACKEND))


@pytest.mark.parametrize("bug_class", BUG_CLASSES)
def test_bugged_workspace_fails_and_the_reference_fix_passes(env: BugFixEnv, bug_class: str):
    seed = seed_of_class(bug_class)
    env.reset(seed=seed)
    assert env.instance is not None and env.instance.bug_classes == (bug_class,)
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and r < 1.0 and not info["verdict"]["passed"], obs["text"]
    env.reset(seed=seed)
    reference_fix(env)
    assert env.engine_files() == {f: CLEAN[f] for f in ENGINE_FILES}
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and info["verdict"]["passed"] and r >= 1.0, obs["text"]


def test_two_bug_instance_needs_both_fixes(env: BugFixEnv):
    seed = next(s for s, i in sorted(generator._table().items())
                if len(i.mutations) == 2 and len({load_mutations()[m].file for m in i.mutations}) == 2)
    env.reset(seed=seed)
    first = load_mutations()[env.instance.mutations[0]]
    env.step({"kind": 1, "path": first.file, "old": first.new, "new": first.old})
    obs, _, _, _, info = env.step({"kind": 4})
    assert not info["verdict"]["passed"], obs["text"]


def test_visible_tests_run_in_the_episode_sandbox(env: BugFixEnv):
    seed = next(s for s, i in sorted(generator._table().items()) if i.difficulty["visible_caught"])
    env.reset(seed=seed)
    out = shell(env, "python -m pytest -q -p no:cacheprovider tests/ 2>&1 | tail -3")
    assert "failed" in out, out
    reference_fix(env)
    out = shell(env, "python -m pytest -q -p no:cacheprovider tests/ 2>&1 | tail -3")
    assert "5 passed" in out, out


def test_a_bench_shows_symptoms_not_the_hidden_checks(env: BugFixEnv):
    env.reset(seed=seed_of_class("lost_request"))
    obs, *_ = env.step({"kind": 3})
    assert "requests never finished" in obs["text"] and "kv_pressure" not in obs["text"], obs["text"]


@pytest.mark.parametrize("code, expect", [
    ("def broken(:\n", "SyntaxError"),
    ("while True:\n    pass\n", "did not finish within 3 s"),
    ("import os\nos._exit(0)\n", "no report"),
    (f"raise SystemExit(open({str(CODE_DIR / 'bugfix' / 'hidden' / 'checks.yaml')!r}).read())\n", "No such file"),
])
def test_a_broken_engine_comes_back_as_an_error_and_the_env_survives(env: BugFixEnv, code: str, expect: str,
                                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(checks, "TIMEOUT_S", 3.0)
    env.reset(seed=seed_of_class("token_budget"))
    obs, r, term, _, _ = env.step({"kind": 1, "path": "engine.py", "old": "", "new": code})
    assert expect in obs["text"] and "ERROR crash" in obs["text"], obs["text"]
    assert "kv_pressure" not in obs["text"] and not term
    obs, _, _, _, info = env.step({"kind": 4})
    assert not info["verdict"]["passed"] and not info["verdict"]["guards"]["hidden: workspace runs"]
    monkeypatch.undo()  # the fix is judged afresh, under the usual timeout
    # and with time to spare for the step: on a loaded two-core host (CI, pytest's other worker beside a vLLM
    # engine) the submit's sandbox runs may outlast the 15 s a step shares, which test_hangs is about, not this
    monkeypatch.setattr(env, "action_timeout_s", 60.0)
    env.reset(seed=seed_of_class("token_budget"))
    reference_fix(env)
    info = env.step({"kind": 4})[4]
    assert info["verdict"]["passed"], info["verdict"]


def test_a_forged_report_earns_no_more_than_a_fix_and_fails_the_checks(env: BugFixEnv):
    """Engine code that writes its own report (every request instant, huge rates) and exits."""
    forged = ("import json, os\nt = {'out_tok_per_s': 1e9, 'req_per_s': 1e6, 'goodput_req_per_s': 1e6}\n"
              "runs = [{'telemetry': t, 'first': [0.0], 'finish': [0.0], 'unfinished': 0, 'pool': {}}] * 6\n"
              "json.dump({'pool_ops': [], 'resolve': [], 'runs': runs}, open('out.json', 'w'))\nos._exit(0)\n")
    seed = seed_of_class("throughput_collapse", shown=True)
    env.reset(seed=seed)
    env.step({"kind": 1, "path": "engine.py", "old": "", "new": forged})
    forged_score = env.last_score
    obs, _, _, _, info = env.step({"kind": 4})
    assert not info["verdict"]["passed"] and not info["verdict"]["guards"]["hidden: scheduler matches vLLM"]
    env.reset(seed=seed)
    reference_fix(env)
    assert env.last_score > 0 and forged_score <= env.last_score + 1e-9


def test_engine_code_never_runs_in_the_env_s_process(env: BugFixEnv):
    marker = f"/tmp/rsi-bugfix-{uuid.uuid4().hex[:8]}"
    env.reset(seed=seed_of_class("kv_leak"))
    env.step({"kind": 1, "path": "kv_cache.py", "old": "", "new": f"open({marker!r}, 'w').write('x')\n"
              + CLEAN["kv_cache.py"]})
    assert not os.path.exists(marker)
    assert "kv_cache" not in sys.modules and "engine" not in sys.modules


def test_shell_cannot_see_the_hidden_checks_and_a_deleted_file_is_reported(env: BugFixEnv):
    env.reset(seed=seed_of_class("kv_leak"))
    out = shell(env, f"ls {CODE_DIR}/bugfix/hidden; cat {CODE_DIR}/bugfix/instances.yaml | head -3; echo end")
    assert "end" in out and "mutations.yaml" not in out and "catalogue" not in out
    shell(env, "rm engine.py")
    obs, *_ = env.step({"kind": 3})
    assert "missing from the workspace" in obs["text"], obs["text"]


def test_docker_gives_the_same_verdicts_as_bubblewrap(dockerd: None):
    inst = generator._table()[1]
    for files in (CLEAN, inst.files()):
        assert check_workspace(files, "docker") == check_workspace(files, BACKEND)
