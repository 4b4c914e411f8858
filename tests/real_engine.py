"""The marks of a test module that starts vLLM: its place in the real-engine group, and what it needs.

`tests/conftest.py` puts every module marked ``real_engine`` in one pytest-xdist group (one vLLM engine runs at a
time). On a machine without vLLM (the ``real-cpu`` extra) or bubblewrap the module is skipped; where
``RSI_REQUIRE_INTEGRATIONS=1`` (`.ci/run`, which installs both) its collection fails instead, so that a broken
install cannot pass CI by skipping the real tier.
"""

from __future__ import annotations

import pytest

from rsi_env.real.tier import installed_vllm_version
from rsi_env.sandbox.bubblewrap import BubblewrapSandbox
from tests.integrations.required import REQUIRED

__all__ = ["real_engine_marks"]


def real_engine_marks(*, bubblewrap: bool = False) -> list[pytest.MarkDecorator]:
    """``pytestmark`` for a module that starts vLLM (and runs it in bubblewrap where ``bubblewrap``)."""
    missing = []
    if installed_vllm_version() is None:
        missing.append("vLLM is not installed (pip install '.[real-cpu]')")
    if bubblewrap and BubblewrapSandbox.unavailable() is not None:
        missing.append(f"bubblewrap is not usable: {BubblewrapSandbox.unavailable()}")
    if missing and REQUIRED:
        pytest.fail(f"RSI_REQUIRE_INTEGRATIONS=1 and {'; '.join(missing)}", pytrace=False)
    return [pytest.mark.real_engine, pytest.mark.skipif(bool(missing), reason="; ".join(missing) or "runs")]
