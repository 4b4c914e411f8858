"""The sandbox's promises, attacked from inside each containing backend (bubblewrap, Docker).

Each test is an attack a hostile agent made or would make, with one command; each asserts that the
sandbox holds and that the command came back (no hang, no exception).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import rsi_env
from rsi_env.sandbox import Limits, Sandbox, make_sandbox
from rsi_env.sandbox.profile import Profile

STRONG = ("bubblewrap", "docker")
LIMITS = Limits(cpu_s=20, memory_bytes=1 << 30, file_bytes=8 << 20, max_procs=64, disk_bytes=64 << 20)


@pytest.fixture(params=STRONG)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("dockerd")
    return str(request.param)


@pytest.fixture
def workspace() -> Iterator[Path]:
    ws = Path(tempfile.mkdtemp(prefix="rsi-ws-sec-"))
    yield ws
    shutil.rmtree(ws, ignore_errors=True)


@pytest.fixture
def sandbox(backend: str, workspace: Path) -> Iterator[Sandbox]:
    sb = make_sandbox(backend, workspace, limits=LIMITS, profile=Profile(packages=("numpy",)))
    yield sb
    sb.close()


def test_the_command_is_nobody_and_host_root_files_stay_closed(sandbox: Sandbox):
    res = sandbox.run("id -u; id -g; cat /etc/shadow 2>&1; echo end", timeout_s=10)  # one stream: ordered
    lines = res.output.splitlines()
    assert lines[:2] == ["65534", "65534"], res.output
    assert "root:" not in res.output and lines[-1] == "end"


def test_no_home_no_run_no_host_socket(sandbox: Sandbox):
    path = Path("/run") / f"rsi-sec-{uuid.uuid4().hex[:8]}.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    server.settimeout(0.5)
    try:
        probe = textwrap.dedent(f"""
            import os, socket
            for target in ({str(path)!r}, "/run/docker.sock", "/var/run/docker.sock"):
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(target)
                    print("CONNECTED", target)
                except OSError as exc:
                    print("refused", target, type(exc).__name__)
            print("run" in os.listdir("/"), "home" in os.listdir("/"), os.path.exists("/root/.bashrc"))
        """)
        (sandbox.workspace / "probe.py").write_text(probe)
        res = sandbox.run("python3 probe.py", timeout_s=20)
        assert "CONNECTED" not in res.output, res.output
        assert res.output.strip().splitlines()[-1] == "False False False", res.output
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()
        path.unlink(missing_ok=True)


def test_the_project_checkout_and_its_git_are_not_there(sandbox: Sandbox):
    checkout = Path(rsi_env.__file__).resolve().parents[1]
    res = sandbox.run(f"ls {checkout} 2>&1; ls {checkout}/.git 2>&1; python3 -c 'import rsi_env' 2>&1 | tail -1",
                      timeout_s=20)
    assert "No such file" in res.output and "ModuleNotFoundError" in res.output, res.output
    assert "rsi_env" not in res.output.replace("No module named 'rsi_env'", "")


def test_only_the_named_packages_can_be_imported(sandbox: Sandbox):
    res = sandbox.run("python3 -c 'import numpy; print(\"numpy ok\")'; python3 -c 'import yaml' 2>&1 | tail -1; "
                      "python3 -c 'import gymnasium' 2>&1 | tail -1", timeout_s=30)
    assert "numpy ok" in res.output
    assert res.output.count("ModuleNotFoundError") == 2, res.output


def test_the_workspace_cannot_grow_past_its_cap(sandbox: Sandbox, workspace: Path):
    res = sandbox.run("i=0; while :; do head -c 4194304 /dev/zero > f$i || exit 3; i=$((i+1)); done", timeout_s=60)
    used = sum(p.stat().st_size for p in workspace.iterdir())
    assert not res.ok and "cap" in (res.error or ""), res.summary()
    # The cap is polled: what a command writes between two polls (0.1 s) is the overshoot.
    assert used < LIMITS.disk_bytes + (256 << 20), used
    assert sandbox.run("rm -f f*; echo cleaned", timeout_s=20).output.strip() == "cleaned"


def test_the_private_tmp_is_capped(sandbox: Sandbox):
    res = sandbox.run(f"head -c {LIMITS.tmp_bytes + (8 << 20)} /dev/zero > /tmp/big; echo rc=$?; "
                      "du -m /tmp/big | cut -f1", timeout_s=30)
    lines = res.output.strip().splitlines()
    assert "rc=0" not in res.output, res.output
    assert int(lines[-1]) <= LIMITS.tmp_bytes >> 20, res.output


def test_memory_is_capped_across_processes(sandbox: Sandbox):
    grab = "python3 -c 'b = bytearray(450 << 20); import time; time.sleep(2); print(\"held\")'"
    res = sandbox.run(f"{grab} & {grab} & {grab} & wait; echo done", timeout_s=60)
    assert res.output.count("held") < 3, res.summary()  # 3 x 450 MiB cannot all live in 1 GiB


def _venv(path: Path) -> Path:
    """A venv at ``path`` over this interpreter's base (``--system-site-packages``, no pip); its Python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
                   check=True, capture_output=True, timeout=120)
    return path / "bin" / "python"


def _run_in(py: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by ``py`` from the project's root (rsi_env importable from its source)."""
    return subprocess.run([str(py), "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=120,
                          cwd=str(Path(rsi_env.__file__).resolve().parents[1]))


def _fake_dist(folder: Path, module: str, name: str) -> None:
    """An installed distribution ``name`` of one empty module in ``folder``: the module and its dist-info."""
    (folder / module).mkdir(parents=True)
    (folder / module / "__init__.py").write_text("")
    info = folder / f"{module}-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0\n")
    (info / "RECORD").write_text(f"{module}/__init__.py,,\n")


def test_a_venv_under_tmp_runs_commands(tmp_path_factory: pytest.TempPathFactory):
    venv = Path(tempfile.mkdtemp(prefix="rsi-venv-")) / "v"
    try:
        out = _run_in(_venv(venv), """
            import tempfile
            from rsi_env.sandbox import make_sandbox
            from rsi_env.sandbox.profile import Profile
            with make_sandbox("bubblewrap", tempfile.mkdtemp(), profile=Profile(packages=("numpy",))) as sb:
                r = sb.run("{python} -c 'import sys, numpy; print(sys.prefix)'".replace("{python}", sb.python))
                print(r.summary())
        """)
        assert f"$ exit 0\n{venv}" in out.stdout, out.stdout + out.stderr
    finally:
        shutil.rmtree(venv.parent, ignore_errors=True)


def test_packages_a_pth_file_adds_are_bound_as_the_profile_names_them():
    """A venv whose packages live where a ``.pth`` file of its site directory points (the Harbor image's venv, laid
    out by its test, or any site that extends ``sys.path`` so): the package the profile names is importable in the
    sandbox, and another from the same folder is not (the allowlist holds there too)."""
    root = Path(tempfile.mkdtemp(prefix="rsi-venv-"))
    try:
        py, extra = _venv(root / "v"), root / "extra"
        for module in ("rsi_fake_allowed", "rsi_fake_other"):
            _fake_dist(extra, module, module.replace("_", "-"))
        purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True, timeout=60).stdout.strip()
        # this interpreter's packages (rsi-env's requirements), as test_harbor's image venv reaches them; and extra
        (Path(purelib) / "rsi_here.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        (Path(purelib) / "rsi_extra.pth").write_text(f"# a comment\n{extra}\n")
        out = _run_in(py, """
            import tempfile
            from rsi_env.sandbox import make_sandbox
            from rsi_env.sandbox.profile import Profile
            with make_sandbox("bubblewrap", tempfile.mkdtemp(), profile=Profile(packages=("rsi-fake-allowed",))) as sb:
                for module in ("rsi_fake_allowed", "rsi_fake_other"):
                    r = sb.run(f"{sb.python} -c 'import {module}; print(\\"imported\\", \\"{module}\\")'")
                    print(r.output.strip().splitlines()[-1])
        """)
        lines = out.stdout.splitlines()
        assert len(lines) == 2, out.stdout + out.stderr
        assert lines[0] == "imported rsi_fake_allowed", out.stdout + out.stderr
        assert "No module named 'rsi_fake_other'" in lines[1], out.stdout + out.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_local_must_be_asked_for_and_says_it_contains_nothing(workspace: Path):
    with pytest.warns(RuntimeWarning, match="contains nothing"):
        sb = make_sandbox("local", workspace)
    assert not sb.contains
    sb.close()


def test_no_process_or_root_of_the_host_is_visible(sandbox: Sandbox):
    res = sandbox.run("ls /proc | grep -c '^[0-9]'; ls /", timeout_s=10)
    count, *root = res.output.split()
    assert int(count) <= 5, res.output  # its own shell and ls, not the host's processes
    allowed = {"bin", "dev", "etc", "lib", "lib32", "lib64", "proc", "root", "sbin", "tmp", "usr",
               os.path.realpath(sys.prefix).split("/")[1]}
    if sandbox.backend == "docker":
        allowed.add("sys")  # Docker's own read-only /sys, its firmware and kernel parts masked by the runtime
    assert set(root) <= allowed, root


def test_shared_memory_works_for_the_sandboxs_own_processes(sandbox: Sandbox):
    code = ("from multiprocessing import shared_memory as s; m = s.SharedMemory(create=True, size=1 << 20); "
            "print('shm', m.size >= 1 << 20); m.close(); m.unlink()")
    (sandbox.workspace / "shm.py").write_text(code)
    assert "shm True" in sandbox.run("python3 shm.py", timeout_s=20).output


def test_packages_are_found_where_the_sandboxs_interpreter_finds_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from rsi_env.sandbox import profile

    vendored = tmp_path / "thirdparty_files"  # as Ray puts its own psutil first on sys.path once imported
    _fake_dist(vendored, "numpy", "numpy")
    monkeypatch.syspath_prepend(str(vendored))
    profile.distribution_dirs.cache_clear()
    try:
        dirs = profile.distribution_dirs(("numpy",))
    finally:
        profile.distribution_dirs.cache_clear()
    assert dirs and not any(d.startswith(str(tmp_path)) for d in dirs), sorted(dirs)
