"""The engine a release names, and a measurement line's engine: one rule for every tier, calibration and store."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsi_env.engine.engines import ENGINES, SGLANG_RELEASE, engine_of, get_engine, row_engine
from rsi_env.errors import RsiEnvError


def test_a_release_names_its_engine():
    assert engine_of(SGLANG_RELEASE) is ENGINES["sglang"] and engine_of("sglang-0.6.0") is ENGINES["sglang"]
    assert engine_of("0.26") is ENGINES["vllm"] and engine_of("0.32.0") is ENGINES["vllm"]


@given(st.text(max_size=20))
def test_every_release_string_has_exactly_the_engine_whose_version_accepts_it(v):
    kind = engine_of(v)
    assert kind.version(v) == v  # the engine it names accepts it as one of its releases
    for other in ENGINES.values():
        if other is not kind and other.version_prefix:
            with pytest.raises(RsiEnvError):
                other.version(v)


def test_a_measurement_line_names_its_engine_and_release():
    assert row_engine({"vllm_version": "0.26.0"}) == (ENGINES["vllm"], "0.26.0")
    assert row_engine({"sglang_version": "0.5.17"}) == (ENGINES["sglang"], "sglang-0.5.17")
    with pytest.raises(KeyError):
        row_engine({})
    with pytest.raises(RsiEnvError, match="one of"):
        get_engine("tensorrt")
