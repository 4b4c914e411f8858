"""Shared fixtures: catalog objects used across the test suite."""

from __future__ import annotations

import pytest

from rsi_env.engine import load_hardware, load_model


@pytest.fixture(scope="session")
def llama8b():
    return load_model("llama-3.1-8b")


@pytest.fixture(scope="session")
def h200():
    return load_hardware("h200")
