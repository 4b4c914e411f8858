"""The reference agent behind the chat protocol: `rsi_env.suite.reference_endpoint` serves an instance's reference
solution as tool calls, and ``rsi-env suite run --agent openai`` against it passes every instance (the chat path
carries a solution end to end); what it cannot serve it refuses, by name, and the attempt fails cleanly."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rsi_env.suite.chat import ChatEndpoint, play_chat
from rsi_env.suite.edits import apply_edits
from rsi_env.suite.instance import load
from rsi_env.suite.reference import reference_files
from rsi_env.suite.reference_endpoint import MODEL, ReferenceEndpoint, reference_plan
from rsi_env.suite.runner import read_attempts


def _post(url: str, body: object) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_suite_run_against_the_reference_endpoint_passes_every_instance(suite_file: Path, tmp_path: Path):
    with ReferenceEndpoint(str(suite_file)) as ref:
        out = subprocess.run([sys.executable, "-m", "rsi_env.cli", "suite", "run", "--suite", str(suite_file),
                              "--agent", "openai", "--base-url", ref.url, "--model", MODEL, "--workers", "2",
                              "--out", str(tmp_path), "--no-plot", "--json"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        served = ref.requests
    attempts = read_attempts(tmp_path)
    ended = [(a.instance, a.ended_by, a.passed) for a in attempts]  # what each attempt did, where one falls short
    assert served >= 2, (ended, out.stderr[-2000:])
    report = json.loads(out.stdout)
    assert report["pass_at_1"] == 1.0 and report["instances"] == 2 and report["tokens"] > 0, (report, ended)
    assert {a.instance for a in attempts} == {"opt-batching-test", "bug-bugfix-s5"}
    assert all(a.passed and a.ended_by == "submitted" and a.agent == "openai" for a in attempts), attempts


def test_the_plan_is_the_reference_agents_edits_then_submit(suite_file: Path):
    """Applied to the workspace a reset leaves, the plan's edits give exactly the reference files; then submit."""
    suite = load(str(suite_file))
    inst = suite.get("bug-bugfix-s5")
    plan = reference_plan(suite, inst.id)
    assert plan[-1] == ("submit", {}) and {name for name, _ in plan[:-1]} == {"edit_file"} and len(plan) >= 2
    env = inst.make_env()
    try:
        env.reset(seed=inst.seed)
        want = reference_files(inst, env)
        for path, text in want.items():
            edits = [(a["old"], a["new"]) for _, a in plan[:-1] if a["path"] == path]
            assert apply_edits(env.unwrapped.workspace.read(path), edits) == text, path
    finally:
        env.close()
    flag = reference_plan(suite, "opt-batching-test")
    assert [name for name, _ in flag] == ["edit_file", "submit"] and flag[0][1]["path"] == "serving.yaml"


def test_a_conversation_naming_no_instance_is_refused_and_the_attempt_fails_cleanly(suite_file: Path):
    suite = load(str(suite_file))
    inst = suite.get("opt-batching-test")
    with ReferenceEndpoint(str(suite_file)) as ref:
        env = inst.make_env()
        try:
            ep = play_chat(env, ChatEndpoint(ref.url, MODEL, timeout_s=30), seed=inst.seed)  # no instance named
        finally:
            env.close()
        assert ep.ended_by.startswith("endpoint:") and "HTTP 400" in ep.ended_by and not ep.passed
        status, body = _post(ref.url, {"model": MODEL, "tools": [{}], "messages": [
            {"role": "system", "content": "Suite instance: nope"}]})
        assert status == 400 and "no instance 'nope'" in body["error"]["message"]
        status, body = _post(ref.url, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        assert status == 400 and "tool calls" in body["error"]["message"]
        with urllib.request.urlopen(ref.url + "/models", timeout=10) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == MODEL


@pytest.mark.parametrize("body", [b"[1, 2]", b"not json"])
def test_a_malformed_request_is_named(suite_file: Path, body: bytes):
    with ReferenceEndpoint(str(suite_file)) as ref:
        req = urllib.request.Request(ref.url + "/chat/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 400
