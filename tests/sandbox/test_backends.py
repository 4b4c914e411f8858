"""Choosing a backend: the strongest available, never local unless named; `run_shell` stays."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsi_env.errors import RsiEnvError
from rsi_env.sandbox import BACKENDS, available_backends, default_backend, default_sandbox, make_sandbox, run_shell


def test_the_default_is_the_strongest_available(dockerd: None, workspace: Path):
    avail = available_backends()
    assert list(avail) == ["docker", "bubblewrap", "local"]
    assert avail["docker"] is None and avail["bubblewrap"] is None  # this machine has both
    assert default_backend() == "docker"
    with default_sandbox(workspace) as sb:
        assert sb.backend == "docker" and sb.run("echo hi").output == "hi\n"


def test_local_is_never_chosen_by_auto(monkeypatch: pytest.MonkeyPatch, workspace: Path):
    monkeypatch.setattr(BACKENDS["docker"], "unavailable", classmethod(lambda cls: "no engine"))
    assert default_backend() == "bubblewrap"
    monkeypatch.setattr(BACKENDS["bubblewrap"], "unavailable", classmethod(lambda cls: "no bwrap"))
    with pytest.raises(RsiEnvError, match="no containing sandbox backend works here.*sandbox='local' by name"):
        default_backend()
    with pytest.warns(RuntimeWarning, match="contains nothing"):  # asked for by name: it runs, and says so loudly
        sb = make_sandbox("local", workspace)
    assert not sb.contains and sb.run("echo hi").output == "hi\n"
    sb.close()


def test_unknown_or_unavailable_backends_are_refused_by_name(workspace: Path, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(RsiEnvError, match="unknown sandbox backend 'chroot'; known: auto, docker, bubblewrap, local"):
        make_sandbox("chroot", workspace)
    monkeypatch.setattr(BACKENDS["docker"], "unavailable", classmethod(lambda cls: "the engine is down"))
    with pytest.raises(RsiEnvError, match="'docker' is not available: the engine is down"):
        make_sandbox("docker", workspace)


def test_run_shell_keeps_its_signature_and_runs_under_bubblewrap(workspace: Path):
    res = run_shell("echo hi > f.txt; cat f.txt", workspace, timeout_s=5.0)
    assert res.ok and res.output == "hi\n" and res.backend == "bubblewrap"
    assert run_shell("sleep 5", workspace, timeout_s=0.5).timed_out
    assert "empty command" in (run_shell("", workspace).error or "")


def test_docker_sandbox_is_removed_on_close(dockerd: None, workspace: Path):
    import docker

    sb = make_sandbox("docker", workspace)
    cid = sb.container_id  # type: ignore[attr-defined]
    client = docker.from_env()
    assert client.containers.get(cid).status == "running"
    sb.close()
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(cid)
    client.close()


def test_local_runs_a_python_nobody_can_reach_even_through_a_venv_link(workspace: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    """A venv in an open folder whose ``python3`` links into a closed home is not nobody's to run."""
    import os
    import shutil
    import sys
    import tempfile

    from rsi_env.sandbox import local

    top = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        top.chmod(0o755)
        closed, venv = top / "home", top / "venv" / "bin"
        closed.mkdir(mode=0o700)
        venv.mkdir(parents=True, mode=0o755)
        (top / "venv").chmod(0o755)
        real = closed / "python3"
        real.write_bytes(b"#!/bin/sh\n")
        real.chmod(0o755)
        (venv / "python3").symlink_to(real)
        (venv / "open").write_bytes(b"#!/bin/sh\n")
        (venv / "open").chmod(0o755)
        assert local._others_can_run(venv / "open")
        assert not local._others_can_run(venv / "python3")
        if os.geteuid() == 0:
            monkeypatch.setattr(sys, "executable", str(venv / "python3"))
            with pytest.warns(RuntimeWarning, match="contains nothing"):
                sb = make_sandbox("local", workspace)
            assert sb.python != str(venv / "python3")
            sb.close()
    finally:
        shutil.rmtree(top)
