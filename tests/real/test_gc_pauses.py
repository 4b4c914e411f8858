"""The driver's garbage-collector pauses (`rsi_env.real.gc_pauses`) in this process's real collector."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from rsi_env.real.gc_pauses import LISTED_S, GcPauses, freeze_heap


@pytest.fixture
def no_automatic_collections() -> Iterator[None]:
    """Only the collections a test asks for run (an automatic one would take the fake clock's readings)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _cycles(n: int) -> None:
    for _ in range(n):
        a: list[object] = []
        a.append(a)


def test_every_collection_inside_is_recorded_with_its_generation_and_length(no_automatic_collections):
    ticks = iter([10.0, 10.002, 20.0, 20.3])  # a 2 ms collection of generation 0, then a 300 ms full one
    with GcPauses(clock=lambda: next(ticks)) as pauses:
        _cycles(100)
        gc.collect(0)
        _cycles(100)
        gc.collect()
    gc.collect()  # outside: not recorded
    assert [(g, round(s, 6)) for g, _, s in pauses.pauses] == [(0, 0.002), (2, 0.3)]
    got = pauses.summary(t0=9.0)
    assert got["generations"] == {"0": {"collections": 1, "total_s": 0.002, "max_s": 0.002},
                                  "2": {"collections": 1, "total_s": 0.3, "max_s": 0.3}}
    assert got["listed"] == [[2, 11.0, 0.3]] and LISTED_S > 0.002  # only the long one, at its start from t0
    assert got["total_s"] == pytest.approx(0.302)


def test_the_callback_is_gone_after_the_block_even_when_it_raises():
    before = list(gc.callbacks)
    with pytest.raises(RuntimeError), GcPauses():
        raise RuntimeError("the workload failed")
    assert gc.callbacks == before


def test_a_frozen_heap_is_left_out_of_every_later_collection(no_automatic_collections):
    try:
        frozen = freeze_heap()
        assert frozen == gc.get_freeze_count() > 1000  # this process's modules, pytest's included
        with GcPauses() as pauses:
            gc.collect()
        assert pauses.summary(0.0)["frozen_objects"] == frozen and len(pauses.pauses) == 1
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
