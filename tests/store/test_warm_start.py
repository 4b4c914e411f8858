"""Warm-start pieces as properties: ladder snapping and the feature distance."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from rsi_env.engine.task import load_task
from rsi_env.store.warm_start import FEATURES, context_features, distance, snap_to_ladders

TASK = load_task("RSI/Batching-v0")


@given(st.integers(1, 1 << 20), st.integers(1, 1 << 20), st.booleans())
def test_snapping_lands_on_a_rung_nearest_on_a_log_scale(seqs, tokens, eager):
    cfg = snap_to_ladders({"max_num_seqs": seqs, "max_num_batched_tokens": tokens, "enforce_eager": eager,
                           "block_size": 16}, TASK)
    assert "block_size" not in cfg  # not this task's flag
    for flag, v in (("max_num_seqs", seqs), ("max_num_batched_tokens", tokens)):
        rungs = [r for r in TASK.ladder(flag) if isinstance(r, int)]
        assert cfg[flag] in rungs
        assert all(abs(math.log(cfg[flag] / v)) <= abs(math.log(r / v)) + 1e-12 for r in rungs)
    assert cfg["enforce_eager"] == eager


_POS = st.floats(0.0, 1e7, allow_nan=False)


@given(st.lists(_POS, min_size=2 * len(FEATURES), max_size=2 * len(FEATURES)))
def test_distance_is_a_metric_on_features(xs):
    a, b = dict(zip(FEATURES, xs[: len(FEATURES)], strict=True)), dict(zip(FEATURES, xs[len(FEATURES):], strict=True))
    assert distance(a, a) == 0.0
    assert distance(a, b) == distance(b, a) >= 0.0


def test_regime_features_put_a_slow_chip_next_to_a_slow_chip():
    wl = {"prompt_mean": 100.0, "output_mean": 300.0, "rate": 0.0, "concurrency": 256.0}
    from rsi_env.engine import load_hardware, load_model
    from rsi_env.store.record import hardware_features

    def f(model: str, hw: str) -> dict[str, float]:
        return context_features(load_model(model).features, hardware_features(load_hardware(hw)), wl)

    ascend = f("llama-3.1-8b", "ascend-910b")
    # An 8B model on the Ascend streams its weights at A100-like speed: nearer Qwen-7B on an A100 than Llama on an H200.
    assert distance(ascend, f("qwen2.5-7b", "a100-80gb")) < distance(ascend, f("llama-3.1-8b", "h200"))
