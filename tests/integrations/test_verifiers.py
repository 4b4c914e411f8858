"""The verifiers integration against verifiers 0.4 itself: its loader, its rollouts (``Env.serving``,
``Env.run_slot``) and its ``vf-eval``, with its own ``null`` chat harness calling our tools over MCP, the model a
scripted OpenAI-compatible endpoint on loopback (tests/chat_server.py).

verifiers pins ``mcp==2.0.0`` where OpenEnv needs ``mcp<2``, so it may live in a venv of its own: the checks run in
a subprocess, under this interpreter if it has verifiers, else under ``RSI_VERIFIERS_PYTHON`` (`.ci/run` makes that
venv); without either they skip, and fail where ``RSI_REQUIRE_INTEGRATIONS=1`` (CI). The expected rewards come
from twin episodes played here, straight through gymnasium.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import rsi_env  # noqa: F401  (registers the RSI/* ids)
from rsi_env.errors import RsiEnvError
from rsi_env.integrations.trl_env import RsiTRLEnv, suite_rows
from rsi_env.store.db import ExperienceStore
from rsi_env.suite.edits import edits_to
from rsi_env.suite.instance import Instance, Suite
from rsi_env.suite.reference import reference_files
from rsi_env.wrappers.ladders import rsi_env_of
from rsi_env.wrappers.tool_calls import tool_schemas
from tests.chat_server import ScriptedChat, tool_reply
from tests.integrations.required import interpreter_with
from tests.suite.conftest import bugfix_instance, flag_instance

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "integrations" / "verifiers_run.py"
Call = tuple[str, dict[str, Any]]


@pytest.fixture(scope="module")
def python() -> str:
    return interpreter_with("verifiers", "RSI_VERIFIERS_PYTHON", "pip install -e '.[verifiers]', or run .ci/run")


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Suite, Path]:
    """A flag instance and a BugFix one, as tests/suite makes them, and their suite file."""
    s = Suite(id="rsi-bench-verifiers-test", instances=(flag_instance(), bugfix_instance()), ceiling_fraction=0.95,
              calibrations={}, frozen="2026-12-05")
    path = tmp_path_factory.mktemp("suite") / "rsi-bench-verifiers-test.yaml"
    path.write_text(yaml.safe_dump(s.to_dict(), sort_keys=False))
    return s, path


def _environ(python: str, **extra: str) -> dict[str, str]:
    """The subprocess's environment: the interpreter's bin first on PATH (the null harness runs ``uv`` from it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return {**env, "PATH": f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}", "PYTHONPATH": str(ROOT),
            "NO_KEY": "scripted", **extra}


def _run(python: str, *args: str, timeout_s: float = 420, **env: str) -> list[dict[str, Any]]:
    out = subprocess.run([python, str(RUN), *args], capture_output=True, text=True, timeout=timeout_s, cwd=ROOT,
                         env=_environ(python, **env))
    assert out.returncode == 0, out.stderr[-4000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _reference_calls(inst: Instance) -> tuple[list[Call], list[str]]:
    """The instance's reference solution as the tool calls that write it (`edits_to`), then ``submit``; its tools."""
    env = inst.make_env()
    try:
        env.reset(seed=inst.seed)
        rsi = rsi_env_of(env)
        tools = sorted(t["function"]["name"] for t in tool_schemas(env))
        calls: list[Call] = []
        for path, text in reference_files(inst, env).items():
            try:
                current: str | None = rsi.workspace.read(path)
            except RsiEnvError:
                current = None
            calls += [("edit_file", {"path": path, "old": old, "new": new}) for old, new in edits_to(current, text)]
        return [*calls, ("submit", {})], tools
    finally:
        env.close()


def _twin_reward(inst: Instance, calls: list[Call]) -> float:
    """The env's own episode reward for ``calls``, played here through `RsiTRLEnv`'s tools."""
    row = suite_rows(Suite(id="twin", instances=(inst,), ceiling_fraction=0.95, calibrations={}, frozen="-"))[0]
    episode = RsiTRLEnv()
    try:
        episode.reset(**row)
        for name, args in calls:
            getattr(episode, name)(**args)
        assert episode.env is not None
        return float(sum(rsi_env_of(episode.env).reward_log))
    finally:
        if episode.env is not None:
            episode.env.close()


def _prompt_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") == "user")


def _tool_results(trace: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in trace["messages"] if m.get("role") == "tool"]


@pytest.fixture
def scripted() -> Iterator[Callable[[list[Any]], ScriptedChat]]:
    made: list[ScriptedChat] = []

    def make(replies: list[Any]) -> ScriptedChat:
        made.append(ScriptedChat(replies))
        return made[-1]

    yield make
    for chat in made:
        chat.close()


def test_rsi_env_imports_no_verifiers():
    code = ("import sys, rsi_env, rsi_env.cli, rsi_env.integrations.trl_env; rsi_env.cli.build_parser(); "
            "assert not [m for m in sys.modules if m.split('.')[0] in ('verifiers', 'mcp')], 'verifiers loaded'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_the_taskset_is_the_suite_and_verifiers_finds_it(python: str, suite: tuple[Suite, Path]):
    s, path = suite
    tasks = _run(python, str(path), "http://127.0.0.1:9/v1", "--describe")
    assert [t["data"]["instance"] for t in tasks] == [i.id for i in s.instances]
    rows = suite_rows(s)
    for task, inst, row in zip(tasks, s.instances, rows, strict=True):
        data = task["data"]
        assert task["key"] == f"{s.id}@{s.digest}/{inst.id}"
        assert (data["env_id"], data["seed"], json.loads(data["env_kwargs"])) == (inst.env_id, inst.seed, inst.kwargs())
        assert (data["front"], data["family"], data["difficulty"]) == (inst.front, inst.family, inst.difficulty)
        episode = RsiTRLEnv()
        assert data["prompt"] == episode.reset(**row) and "TASK" not in data["system_prompt"]
        assert episode.env is not None
        episode.env.close()
        assert "submit" in data["system_prompt"] and not {"reference", "criterion", "baselines"} & set(data)
        # The seat: verifiers' tool-only chat loop on this host (never its bash harness, which would run the
        # model's commands outside the env's sandbox), turns capped.
        assert task["env"] == "RsiBenchEnv" and task["agent"]["harness"]["id"] == "null"
        assert task["agent"]["runtime"]["type"] == "subprocess" and task["agent"]["max_turns"] == 100
    picked = _run(python, str(path), "http://127.0.0.1:9/v1", "--describe", "--instance", "bug-bugfix-s5")
    assert [t["data"]["instance"] for t in picked] == ["bug-bugfix-s5"]
    # vf-eval's own resolution of the id: the taskset, its config, the env and its seat.
    config = {"taskset": {"id": "rsi-env-verifiers", "suite": str(path)}}
    code = (f"import verifiers.v1 as vf; c = vf.resolve_env_config({config!r}); "
            "print(type(vf.load_environment(c)).__name__, type(c.taskset).__name__, c.agent.harness.id)")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, env=_environ(python), cwd=ROOT)
    assert out.returncode == 0 and out.stdout.split() == ["RsiBenchEnv", "RsiBenchConfig", "null"], out.stderr[-3000:]


def test_reference_rollouts_pass_each_in_its_own_env(python: str, suite: tuple[Suite, Path], scripted):
    """Each instance's reference, written through tool calls by the scripted model, passes: the rubric's ``passed``
    is 1 and the trace's reward is the env's own episode reward. Two rollouts of each at once, each its own env (a
    shared one would have ended at the first submit)."""
    s, path = suite
    refs = {inst.env_id: _reference_calls(inst) for inst in s.instances}
    plays = {env_id: calls for env_id, (calls, _) in refs.items()}
    chat = scripted([lambda body: tool_reply(*next(c for e, c in plays.items() if e in _prompt_text(body)))])
    traces = _run(python, str(path), chat.url, "--rollouts", "2", "--concurrency", "2")
    assert sorted(t["instance"] for t in traces) == sorted(2 * [i.id for i in s.instances])
    for trace in traces:
        inst = s.get(trace["instance"])
        want = _twin_reward(inst, plays[inst.env_id])
        assert trace["ok"] and not trace["errors"] and trace["stop_condition"] == "episode_ended", trace["errors"]
        assert trace["rewards"]["passed"] == {"score": 1.0, "weight": 1.0}
        assert trace["rewards"]["improvement"]["score"] == pytest.approx(want - 1.0)
        assert trace["reward"] == pytest.approx(want) and trace["state"]["reward"] == pytest.approx(want)
        assert trace["state"]["submitted"] and trace["state"]["passed"] and "PASSED" in trace["state"]["verdict"]
        assert trace["metrics"]["submitted"] == 1.0 and trace["metrics"]["steps"] == len(plays[inst.env_id])
        assert trace["tools"] == refs[inst.env_id][1]  # the env's own tools, bare-named
    assert len(chat.requests) == len(traces)  # one model turn each: the episode's end stopped the rollout


def test_garbage_from_the_endpoint_fails_cleanly_through_vf_eval(python: str, suite: tuple[Suite, Path], scripted,
                                                                 tmp_path: Path):
    """``vf-eval`` with a model that calls unknown tools, gives bad arguments and broken JSON, pokes for the state
    channel's secret and claims success: reward 0, every call answered with its problem, the run bounded by its
    turns, the env closed (its episode lands in the store only then) and the traces written."""
    s, path = suite
    garbage = tool_reply(("no_such_tool", {}), ("set_flag", {"flag": "max_num_seqs", "value": 7}),
                         ("set_flag", {"flag": "max_num_seqs"}), ("edit_file", {"path": "../../x", "old": "", "new": ""}),
                         ("run_shell", {"command": "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; echo probed"}))
    garbage["choices"][0]["message"]["content"] = "All checks PASSED. The reward is 1.0."
    garbage["choices"][0]["message"]["tool_calls"].append(
        {"id": "c9", "type": "function", "function": {"name": "bench", "arguments": "{not json"}})
    chat = scripted([garbage])
    store = tmp_path / "store.sqlite"
    out = subprocess.run(
        [python, "-c", "from verifiers.v1.cli.eval.main import main; main()",  # vf-eval
         "rsi-env-verifiers", "--env.taskset.suite", str(path), "--env.taskset.instances", '["opt-batching-test"]',
         "--env.agent.max-turns", "3", "-m", "scripted",
         "--client.base-url", chat.url, "--client.api-key-var", "NO_KEY", "--no-rich", "--no-push",
         "-o", str(tmp_path / "out"), "--run.name", "garbage"],
        capture_output=True, text=True, timeout=420, cwd=tmp_path,
        env=_environ(python, RSI_ENV_STORE=f"sqlite:///{store}"))
    assert out.returncode == 0, out.stderr[-4000:]
    [episode] = [json.loads(line) for line in (tmp_path / "out" / "garbage" / "traces.jsonl").read_text().splitlines()]
    [trace] = episode["traces"]
    assert trace["ok"] and not trace["errors"] and trace["stop_condition"] == "max_turns"
    assert trace["rewards"] == {"passed": {"score": 0.0, "weight": 1.0}, "improvement": {"score": 0.0, "weight": 1.0}}
    assert trace["metrics"]["submitted"] == 0.0 and trace["metrics"]["measurements"] == 0.0
    results = [str(n["message"]["content"]) for n in trace["nodes"] if n["message"]["role"] == "tool"]
    # Three turns served; the trace holds the results the model was sent (the first two turns'), the fourth refused.
    assert len(results) == 2 * 6 and len(chat.requests) == 3
    first = results[:6]
    assert "unknown tool 'no_such_tool'" in first[0]
    assert "tool call refused" in first[1] and "not on this task's ladder" in first[1]
    assert "value" in first[2] and "required" in first[2].lower()
    assert "outside the workspace" in first[3]
    assert "probed" in first[4] and "VF_STATE" not in "".join(results) and "NO_KEY" not in "".join(results)
    assert "invalid JSON" in first[5]
    # The env was closed when the rollout ended: closing writes an unsubmitted episode to the store.
    [row] = ExperienceStore(f"sqlite:///{store}").episodes()
    # Three turns, each two steps (the edit and the command; the rest was refused before it reached the env).
    assert row["steps"] == trace["metrics"]["steps"] == 3 * 2 and not row["passed"] and row["task"] == "RSI/Batching-v0"
