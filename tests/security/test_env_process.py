"""The env process trusts nothing the agent can create in its workspace (issue 26, part 4).

The agent's shell can put anything where the env expects its own files: a FIFO (an open() for
reading or writing blocks forever), a directory, a symbolic link out of the workspace, a socket,
a device, a huge file, a YAML alias bomb. Each case must come back as text in the observation
within seconds, and the episode must go on. Every step here runs under a deadline, so a
regression fails instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rsi_env  # noqa: F401  (registers RSI/*)
from rsi_env.engine.safe_io import ECHO_MAX, load_yaml, read_text, shorten
from rsi_env.engine.workload import Workload
from rsi_env.errors import UnsafeFileError, WorkloadError, YamlError
from rsi_env.sandbox import EditError, Workspace
from rsi_env.sandbox.workspace import MAX_FILE_BYTES, remove_tree

DEADLINE_S = 20

# 314 bytes that expand to 9**9 strings: "billion laughs" in YAML.
ALIAS_BOMB = ("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
              "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
              "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
              "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
              "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n")


@contextlib.contextmanager
def deadline(seconds: float = DEADLINE_S) -> Iterator[None]:
    """Fail (TimeoutError) instead of hanging when the body blocks, in a FIFO's open() say, past ``seconds``."""
    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def timed_step(env: Any, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
    """One step under the deadline, checked against the Gymnasium contract."""
    with deadline():
        obs, r, term, trunc, info = env.step(action)
    assert env.observation_space.contains(obs), obs["text"]
    assert np.isfinite(r)
    return obs, float(r), term, trunc, info


@pytest.fixture
def env() -> Iterator[Any]:
    e = gym.make("RSI/KVCache-v0", shell_timeout_s=5.0).unwrapped
    e.reset(seed=0)
    yield e
    e.close()


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _directory(p: Path) -> None:
    p.mkdir()
    (p / "inner").write_text("x")


def _link_out(p: Path) -> None:
    p.symlink_to("/etc/passwd")


def _dangling_link(p: Path) -> None:
    p.symlink_to("/nonexistent/rsi-env-target")


def _socket(p: Path) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(p))
    s.close()  # the socket file stays


def _device(p: Path) -> None:
    try:
        os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # like /dev/zero: endless bytes
    except PermissionError:
        pytest.skip("no permission to make a device node here")


def _huge(p: Path) -> None:
    with open(p, "wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of zeros


PLANTS: dict[str, Callable[[Path], None]] = {"fifo": _fifo, "directory": _directory, "symlink": _link_out,
                                             "dangling-symlink": _dangling_link, "socket": _socket,
                                             "device": _device, "huge": _huge}


def plant(env: Any, rel: str, what: str) -> Path:
    """Replace the workspace file ``rel`` by ``what``, as the agent's shell can."""
    p = env.workspace.root / rel
    if p.is_dir() and not p.is_symlink():
        import shutil

        shutil.rmtree(p)
    else:
        p.unlink(missing_ok=True)
    PLANTS[what](p)
    return p


def still_usable(env: Any) -> None:
    """A valid flag action works and leaves ``serving.yaml`` a regular file again."""
    name = env.flag_names[0]
    obs, *_ = timed_step(env, env.flag_action(name, env.task.ladder(name)[0]))
    assert f"set {name}" in obs["text"]
    st = os.lstat(env.workspace.root / "serving.yaml")
    assert stat.S_ISREG(st.st_mode)


# ---- serving.yaml --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("what", sorted(PLANTS))
def test_planted_serving_yaml_never_blocks_or_escapes(env: Any, what: str) -> None:
    for action in ({"kind": 1, "path": "serving.yaml", "old": "max_model_len", "new": "max_model_len"},
                   {"kind": 0, "flag": 0, "value": 0.5}):
        plant(env, "serving.yaml", what)
        obs, *_ = timed_step(env, action)
        assert obs["text"]
    plant(env, "serving.yaml", what)
    obs, *_ = timed_step(env, {"kind": 1, "path": "serving.yaml", "old": "", "new": "max_model_len: 4096\n"})
    assert "applied" in obs["text"] or "refused" in obs["text"]
    plant(env, "serving.yaml", what)
    timed_step(env, {"kind": 3})
    still_usable(env)


def test_edit_reading_a_fifo_says_what_it_found(env: Any) -> None:
    plant(env, "serving.yaml", "fifo")
    obs, *_ = timed_step(env, {"kind": 1, "path": "serving.yaml", "old": "a", "new": "b"})
    assert "not a regular file" in obs["text"] and "FIFO" in obs["text"]


def test_env_write_replaces_a_planted_link_and_leaves_its_target_alone(env: Any, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the host's file\n")
    p = env.workspace.root / "serving.yaml"
    p.unlink()
    p.symlink_to(victim)
    timed_step(env, {"kind": 0, "flag": 0, "value": 1.0})
    assert victim.read_text() == "the host's file\n"
    assert not p.is_symlink() and p.is_file()


def test_a_fifo_planted_by_a_real_shell_action(env: Any) -> None:
    obs, *_ = timed_step(env, {"kind": 2, "command": "rm serving.yaml; mkfifo serving.yaml; ls -l serving.yaml"})
    if not (env.workspace.root / "serving.yaml").is_fifo():
        pytest.skip(f"the sandbox's shell could not make a FIFO here: {obs['text'][:200]}")
    timed_step(env, {"kind": 1, "path": "serving.yaml", "old": "x", "new": "y"})
    timed_step(env, {"kind": 0, "flag": 1, "value": 0.0})
    obs, _, term, *_ = timed_step(env, {"kind": 4})
    assert term


# ---- workload copies and submit --------------------------------------------------------------------------------
@pytest.mark.parametrize("what", sorted(PLANTS))
def test_planted_workload_copy_fails_the_guard_without_blocking(env: Any, what: str) -> None:
    plant(env, f"workloads/{env.workload_names[0]}.yaml", what)
    obs, _, term, _, info = timed_step(env, {"kind": 4})
    assert term
    assert info["verdict"]["guards"]["workloads"] is False


def test_an_alias_bomb_in_a_workload_copy_fails_the_guard(env: Any) -> None:
    (env.workspace.root / "workloads" / f"{env.workload_names[0]}.yaml").write_text(ALIAS_BOMB)
    _, _, term, _, info = timed_step(env, {"kind": 4})
    assert term and info["verdict"]["guards"]["workloads"] is False


@pytest.mark.parametrize("what", ["fifo", "socket", "dangling-symlink"])
def test_a_planted_workloads_folder_fails_the_guard(env: Any, what: str) -> None:
    plant(env, "workloads", what)
    _, _, term, _, info = timed_step(env, {"kind": 4})
    assert term and info["verdict"]["guards"]["workloads"] is False


def test_a_planted_workloads_folder_link_fails_the_guard(env: Any, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "workloads"
    shutil.copytree(env.workspace.root / "workloads", copy)
    shutil.rmtree(env.workspace.root / "workloads")
    (env.workspace.root / "workloads").symlink_to(copy)
    _, _, term, _, info = timed_step(env, {"kind": 4})
    assert term and info["verdict"]["guards"]["workloads"] is False


# ---- YAML ------------------------------------------------------------------------------------------------
def test_an_alias_bomb_in_serving_yaml_is_refused_fast(env: Any) -> None:
    obs, *_ = timed_step(env, {"kind": 1, "path": "serving.yaml", "old": "", "new": ALIAS_BOMB})
    assert "refused" in obs["text"] and "alias" in obs["text"]
    assert len(obs["text"]) < 1500
    still_usable(env)


@pytest.mark.parametrize("doc", ["x: &a 1\ny: *a\n", "x: &a 1\n", "x: !!python/object:os.system {}\n",
                                 "[" * 5000 + "]" * 5000, "{" * 3000, "a: " + "[" * 200 + "]" * 200])
def test_yaml_with_anchors_aliases_tags_or_deep_nesting_is_refused(doc: str) -> None:
    with deadline(), pytest.raises(YamlError):
        load_yaml(doc)


def test_plain_yaml_still_loads() -> None:
    assert load_yaml("max_num_seqs: 256\nblock_size: 16\ncudagraph_capture_sizes: [1, 2, 4]\nx: null\n") == {
        "max_num_seqs": 256, "block_size": 16, "cudagraph_capture_sizes": [1, 2, 4], "x": None}


def test_yaml_larger_than_the_cap_is_refused() -> None:
    with pytest.raises(YamlError, match="larger"):
        load_yaml("a: 1\n" * 400_000)


def test_workload_file_fifo_and_bomb_are_workload_errors(tmp_path: Path) -> None:
    fifo = tmp_path / "w.yaml"
    os.mkfifo(fifo)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    for p in (fifo, bomb, tmp_path):
        with deadline(), pytest.raises(WorkloadError):
            Workload.from_yaml(p)


# ---- echoes ----------------------------------------------------------------------------------------------
def test_refusals_truncate_what_they_echo(env: Any) -> None:
    long_key = "k" * 20000
    for new in (f"{long_key}: 1\n", f"max_num_seqs: '{long_key}'\n", f"max_num_seqs: [{', '.join(['1'] * 5000)}]\n"):
        obs, *_ = timed_step(env, {"kind": 1, "path": "serving.yaml", "old": "", "new": new})
        assert "refused" in obs["text"]
        assert "k" * (ECHO_MAX + 1) not in obs["text"] and len(obs["text"]) < 1500


def test_shorten_is_bounded_for_any_value() -> None:
    nested: list[Any] = []
    for _ in range(5000):
        nested = [nested, nested]  # shared: 2**5000 leaves if fully printed
    with deadline(5):
        for v in ("x" * 10**6, nested, {i: i for i in range(10**5)}, b"\x00" * 10**6, 1.5):
            assert len(shorten(v)) <= ECHO_MAX


# ---- the workspace's own I/O -------------------------------------------------------------------------------
@pytest.mark.parametrize("what", sorted(set(PLANTS) - {"huge"}))
def test_read_text_refuses_anything_but_a_regular_file(tmp_path: Path, what: str) -> None:
    p = tmp_path / "f"
    PLANTS[what](p)
    with deadline(), pytest.raises(UnsafeFileError):
        read_text("f", 1024, root=tmp_path)


def test_read_text_refuses_a_file_over_the_cap(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x" * 2000)
    with pytest.raises(UnsafeFileError, match="larger"):
        read_text("f", 1000, root=tmp_path)
    assert read_text("f", 2000, root=tmp_path) == "x" * 2000


def test_workspace_refuses_parents_planted_as_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with Workspace(["sub/policy.py"]) as ws:
        (ws.root / "sub").symlink_to(outside)
        for act in (lambda: ws.write("sub/policy.py", "x"), lambda: ws.edit("sub/policy.py", "", "x"),
                    lambda: ws.read("sub/policy.py")):
            with deadline(), pytest.raises(EditError):
                act()
        assert list(outside.iterdir()) == []


def test_workspace_write_replaces_planted_files(tmp_path: Path) -> None:
    with Workspace(["a.txt"]) as ws:
        for what in sorted(set(PLANTS) - {"device"}):
            p = ws.root / "a.txt"
            if p.exists() or p.is_symlink():
                p.unlink()
            PLANTS[what](p)
            with deadline():
                ws.write("a.txt", f"{what}\n")
            assert ws.read("a.txt") == f"{what}\n"
            assert stat.S_ISREG(os.lstat(p).st_mode)


def test_workspace_edit_of_a_huge_file_is_refused(tmp_path: Path) -> None:
    with Workspace(["a.txt"]) as ws:
        _huge(ws.root / "a.txt")
        with deadline(), pytest.raises(EditError, match="larger"):
            ws.edit("a.txt", "x", "y")
        assert MAX_FILE_BYTES < (64 << 20)


# ---- code files ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("what", ["fifo", "directory", "symlink"])
def test_planted_code_file_in_a_code_task(what: str) -> None:
    env = gym.make("RSI/Scheduler-v0").unwrapped
    try:
        env.reset(seed=0)
        rel = next(f for f in env.task.editable_files if f.endswith(".py"))
        plant(env, rel, what)
        obs, *_ = timed_step(env, {"kind": 3})
        assert obs["text"]
        obs, *_ = timed_step(env, {"kind": 1, "path": rel, "old": "def", "new": "def"})
        assert "refused" in obs["text"] or "error" in obs["text"]
        _, _, term, *_ = timed_step(env, {"kind": 4})
        assert term
    finally:
        env.close()


# ---- garbage collection -------------------------------------------------------------------------------------
def test_a_workspace_dropped_without_close_is_removed() -> None:
    ws = Workspace(["a.txt"])
    root = ws.root
    assert root.is_dir()
    del ws
    gc.collect()
    assert not root.exists()


@pytest.mark.parametrize("env_id", ["RSI/KVCache-v0", "RSI/Scheduler-v0"])
def test_an_env_dropped_without_close_removes_its_workspace(env_id: str) -> None:
    env = gym.make(env_id)
    env.reset(seed=0)
    root = env.unwrapped.workspace.root
    assert root.is_dir()
    del env
    gc.collect()
    assert not root.exists()


def test_a_workspace_with_unreadable_folders_is_removed() -> None:
    ws = Workspace(["a.txt"])
    locked = ws.root / "locked" / "deeper"
    locked.mkdir(parents=True)
    (locked / "f").write_text("x")
    os.chmod(ws.root / "locked", 0)
    root = ws.root
    ws.close()
    assert not root.exists()


def test_a_link_loop_is_refused(env: Any) -> None:
    root = env.workspace.root
    (root / "serving.yaml").unlink()
    os.symlink("loop-b", root / "serving.yaml")
    os.symlink("serving.yaml", root / "loop-b")
    for action in ({"kind": 1, "path": "serving.yaml", "old": "a", "new": "b"},
                   {"kind": 1, "path": "serving.yaml", "old": "", "new": "max_model_len: 4096\n"},
                   {"kind": 1, "path": "loop-b/x", "old": "", "new": "x"}):
        obs, *_ = timed_step(env, action)
        assert "refused" in obs["text"]
    still_usable(env)


def test_removing_a_workspace_never_changes_the_folder_that_holds_it(tmp_path: Path) -> None:
    """A workspace already gone (a second close) or made unreadable by the agent (``chmod 0 .``) is removed without
    touching the folder above it: on a host that folder is /tmp, and closing it to others breaks every sandbox."""
    holder = tmp_path / "holder"
    holder.mkdir()
    holder.chmod(0o755)
    remove_tree(holder / "gone")
    root = holder / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f").write_text("x")
    root.chmod(0)
    remove_tree(root)
    assert not root.exists() and stat.S_IMODE(holder.stat().st_mode) == 0o755
