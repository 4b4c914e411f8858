"""An integration's package, or the test's end: skipped on a machine without it, failed where CI requires it.

`.ci/run` sets ``RSI_REQUIRE_INTEGRATIONS=1``, so an integration test there never passes by skipping: a package that
is missing (or an interpreter `.ci/run` should have made that does not work) fails the test with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

__all__ = ["REQUIRED", "interpreter_with", "skip_or_fail"]

REQUIRED = os.environ.get("RSI_REQUIRE_INTEGRATIONS") == "1"


def skip_or_fail(reason: str) -> None:
    """Skip the test with ``reason``, or fail it where integrations are required."""
    if REQUIRED:
        pytest.fail(f"RSI_REQUIRE_INTEGRATIONS=1 and {reason}", pytrace=False)
    pytest.skip(reason)


def interpreter_with(module: str, env_var: str, install: str) -> str:
    """A Python that can import ``module``: this one, else the one ``env_var`` names (checked), else skip or fail."""
    if importlib.util.find_spec(module) is not None:
        return sys.executable
    python = os.environ.get(env_var)
    if not python:
        skip_or_fail(f"{module} is not importable here and {env_var} names no interpreter that has it ({install})")
        raise AssertionError("unreachable")
    probe = subprocess.run([python, "-c", f"import {module}; print('importable')"], capture_output=True, text=True,
                           timeout=120)
    if probe.returncode != 0 or probe.stdout.strip() != "importable":
        pytest.fail(f"{env_var}={python} cannot import {module}: {probe.stderr.strip()[-800:]}", pytrace=False)
    return python
