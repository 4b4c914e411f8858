"""Shared fixtures: catalog objects used across the test suite, and a Docker engine for the Docker sandbox."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi_env.engine import load_hardware, load_model

_STORE_ROOT: list[str] = []
REAL_ENGINE = "real-engine"  # the xdist group of the modules that start vLLM
_SHARED_ENV = "RSI_TEST_SHARED"  # a directory of the session's controller, seen by its workers
_DOCKERD_PID = "dockerd.pid"


def pytest_configure(config: pytest.Config) -> None:
    """The session records into its own experience store and calibration directory, never the user's.

    Set before any test module is imported (some read the calibration at import); subprocesses inherit it.
    """
    root = tempfile.mkdtemp(prefix="rsi-test-store-")
    _STORE_ROOT.append(root)
    os.environ["RSI_ENV_STORE"] = f"sqlite:///{root}/experience.sqlite"
    os.environ["RSI_ENV_CALIBRATION_DIR"] = f"{root}/calibration"
    if not _is_worker(config):
        os.environ[_SHARED_ENV] = tempfile.mkdtemp(prefix="rsi-test-shared-")


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")  # pytest-xdist's workers have it; the controller, or a plain run, not


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups and pytest deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` the tests `tests/slow.txt` lists: ``pytest -m "not slow"`` is the fast tier.

    And share them out across pytest-xdist's workers (``--dist loadgroup``, set in pyproject.toml): each file
    is one group, because a module's tests share what its fixtures start; the modules marked ``real_engine``
    are one group together, so that one vLLM engine runs at a time (two would split the cores and each take
    twice as long). The longest groups go first (the seconds `tests/slow.txt` records), so that no worker
    is left starting a long one when the others are done.
    """
    from tests.slow_tests import load

    slow = load()
    group_of = {item: REAL_ENGINE if item.get_closest_marker("real_engine") else item.nodeid.split("::")[0]
                for item in items}
    files_of: dict[str, set[str]] = defaultdict(set)
    for item, group in group_of.items():
        path = item.nodeid.split("::")[0]
        if path in slow:
            item.add_marker(pytest.mark.slow)
        item.add_marker(pytest.mark.xdist_group(group))
        files_of[group].add(path)
    seconds = {group: sum(slow.get(f, 0.0) for f in files) for group, files in files_of.items()}
    items.sort(key=lambda it: -seconds[group_of[it]])  # stable: a file's tests keep their order


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent with -p no:xdist
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """Refuse to run ungrouped: pytest-xdist names each test's group in its node id, and a pytest that drops
    the name would spread a file, and the vLLM modules, across workers without a word (the controller's hook)."""
    config = getattr(node, "config", None)
    if config is None or config.getvalue("dist") != "loadgroup":
        return
    lost = [i for i in ids if "@" not in i]
    if lost:
        pytest.exit(f"pytest-xdist's groups are not in the node ids ({lost[0]}, ...): this pytest "
                    f"({pytest.__version__}) and pytest-xdist do not work together; install the versions "
                    "pyproject.toml's dev extra pins", returncode=4)


def pytest_unconfigure(config: pytest.Config) -> None:
    for root in _STORE_ROOT:
        shutil.rmtree(root, ignore_errors=True)
    if not _is_worker(config) and _SHARED_ENV in os.environ:
        _stop_dockerd(_shared() / _DOCKERD_PID)
        shutil.rmtree(_shared(), ignore_errors=True)


@pytest.fixture(scope="session")
def llama8b():
    return load_model("llama-3.1-8b")


@pytest.fixture(scope="session")
def h200():
    return load_hardware("h200")


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=2)
        client.ping()
        client.close()
        return True
    except Exception:
        return False


def _shared() -> Path:
    """A directory every process of the session sees: the controller's, which pytest-xdist's workers inherit."""
    return Path(os.environ[_SHARED_ENV])


@pytest.fixture(scope="session")
def dockerd() -> Iterator[None]:
    """A running Docker engine with the sandbox's image: the engine already there, or one started here.

    Whichever worker asks first starts it, under a lock the others wait on; the session's controller stops it
    when every worker is done (`pytest_unconfigure`), since no one worker knows that the others are.
    """
    exe = shutil.which("dockerd")
    with open(_shared() / "dockerd.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _docker_answers():
            if exe is None:
                pytest.fail("the Docker backend's tests need Docker's engine: apt-get install docker.io")
            fd, log_name = tempfile.mkstemp(prefix="rsi-dockerd-", suffix=".log")
            with os.fdopen(fd, "wb") as log:  # dockerd keeps its own copy of the descriptor
                proc = subprocess.Popen([exe, "--iptables=false", "--ip6tables=false", "--bridge=none"], stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            (_shared() / _DOCKERD_PID).write_text(str(proc.pid))
            deadline = time.monotonic() + 60
            while not _docker_answers():
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail(f"dockerd did not come up within 60 s; its log: {log_name}")
                time.sleep(0.25)
        import docker

        from rsi_env.sandbox.docker_image import ensure_image

        client = docker.from_env()
        ensure_image(client)  # built once, not by two workers at once
        client.close()
    yield


def _stop_dockerd(pid_file: Path) -> None:
    """Stop the engine a worker started for the session, if one did."""
    if not pid_file.is_file():
        return
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.2)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
