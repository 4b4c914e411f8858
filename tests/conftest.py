"""Shared fixtures: catalog objects used across the test suite, and a Docker engine for the Docker sandbox."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from rsi_env.engine import load_hardware, load_model

_STORE_ROOT: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """The session records into its own experience store and calibration directory, never the user's.

    Set before any test module is imported (some read the calibration at import); subprocesses inherit it.
    """
    root = tempfile.mkdtemp(prefix="rsi-test-store-")
    _STORE_ROOT.append(root)
    os.environ["RSI_ENV_STORE"] = f"sqlite:///{root}/experience.sqlite"
    os.environ["RSI_ENV_CALIBRATION_DIR"] = f"{root}/calibration"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` the tests `tests/slow.txt` lists: ``pytest -m "not slow"`` is the fast tier."""
    from tests.slow_tests import load

    slow = load()
    for item in items:
        if item.nodeid.split("::")[0] in slow:
            item.add_marker(pytest.mark.slow)


def pytest_unconfigure(config: pytest.Config) -> None:
    for root in _STORE_ROOT:
        shutil.rmtree(root, ignore_errors=True)


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


@pytest.fixture(scope="session")
def dockerd() -> Iterator[None]:
    """A running Docker engine: the one already there, or one started here (and stopped at the end)."""
    if _docker_answers():
        yield
        return
    exe = shutil.which("dockerd")
    if exe is None:
        pytest.fail("the Docker backend's tests need Docker's engine: apt-get install docker.io")
    fd, log_name = tempfile.mkstemp(prefix="rsi-dockerd-", suffix=".log")
    with os.fdopen(fd, "wb") as log:  # dockerd keeps its own copy of the descriptor
        proc = subprocess.Popen([exe, "--iptables=false", "--ip6tables=false", "--bridge=none"], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while not _docker_answers():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"dockerd did not come up within 60 s; its log: {log_name}")
        time.sleep(0.25)
    yield
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
