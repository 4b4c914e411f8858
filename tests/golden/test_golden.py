"""The golden outputs (`tests.golden.outputs`) are reproduced exactly: a move of the code changed no behaviour."""

from __future__ import annotations

import json
import os

import pytest

from tests.golden import outputs


@pytest.mark.parametrize("kind", sorted(outputs.KINDS))
def test_the_output_is_the_recorded_one(kind: str) -> None:
    want = json.loads(outputs.path(kind).read_text())
    store = os.environ.get("RSI_ENV_STORE")
    got = json.loads(json.dumps(outputs.compute(kind)))
    assert os.environ.get("RSI_ENV_STORE") == store, "computing the outputs left the session's store switched"
    if isinstance(want, dict):
        differ = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        assert not differ, f"{kind}: {len(differ)} entries differ, e.g. {differ[:3]}"
    assert got == want
