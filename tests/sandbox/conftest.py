"""Fixtures for the sandbox tests: one sandbox per backend (the Docker engine fixture is in tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi_env.sandbox import BACKENDS, Limits, Sandbox, make_sandbox

# Small limits so that hostile commands hit them fast.
TEST_LIMITS = Limits(cpu_s=2, memory_bytes=1 << 30, file_bytes=8 << 20, max_procs=64, cpus=1.0)


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("dockerd")
    return str(request.param)


@pytest.fixture
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    ws = Path(tempfile.mkdtemp(prefix="rsi-ws-test-"))
    yield ws
    shutil.rmtree(ws, ignore_errors=True)


@pytest.fixture
def sandbox(backend: str, workspace: Path) -> Iterator[Sandbox]:
    sb = make_sandbox(backend, workspace, limits=TEST_LIMITS)
    yield sb
    sb.close()


def procs_matching(needle: str) -> list[int]:
    """Host PIDs whose command line contains ``needle`` (the container's processes are host processes too)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if needle in cmd:
                out.append(int(d))
    return out
