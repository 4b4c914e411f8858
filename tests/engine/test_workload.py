"""Workload: seeded traces, content hashes that catch any change, exact token ids, clear errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rsi_env.engine import Workload, list_workloads, load_workload
from rsi_env.engine.workload import Arrival
from rsi_env.errors import WorkloadError

BASE = {"name": "w", "seed": 5, "requests": 200, "prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.6},
        "output_tokens": {"dist": "uniform", "min": 10, "max": 20}, "arrival": {"process": "poisson", "rate": 50},
        "shared_prefix": {"groups": 4, "tokens": 100}}


def test_trace_is_deterministic_and_matches_the_spec():
    w = Workload.from_dict(BASE)
    a, b = w.trace(), w.trace()
    assert np.array_equal(a.prompt_len, b.prompt_len) and np.array_equal(a.arrival_s, b.arrival_s)
    assert a.output_len.min() >= 10 and a.output_len.max() <= 20
    assert np.all(np.diff(a.arrival_s) >= 0) and a.arrival_s[0] == 0
    assert 35 < 200 / a.arrival_s[-1] < 70  # Poisson at 50 req/s
    assert np.all(a.prompt_len > 100) and set(a.prefix_group.tolist()) == {0, 1, 2, 3}


def test_token_ids_are_exact_and_share_the_group_prefix():
    t = Workload.from_dict(BASE).trace()
    p0, p4, p1 = t.prompt_token_ids(0, 32000), t.prompt_token_ids(4, 32000), t.prompt_token_ids(1, 32000)
    assert len(p0) == t.prompt_len[0] and max(p0) < 32000 and min(p0) >= 10
    assert p0[:100] == p4[:100] and p0[:100] != p1[:100]  # requests 0 and 4 share group 0's prefix
    assert p0 == Workload.from_dict(BASE).trace().prompt_token_ids(0, 32000)


def test_content_hash_detects_any_change():
    w = Workload.from_dict(BASE)
    assert w.content_hash == Workload.from_dict(dict(BASE)).content_hash
    changed = [replace(w, seed=6), replace(w, requests=201), replace(w, arrival=Arrival("burst")),
               replace(w, shared_prefix_tokens=101)]
    assert len({w.content_hash, *(c.content_hash for c in changed)}) == 5


def test_closed_and_gamma_arrivals():
    closed = Workload.from_dict({**BASE, "arrival": {"process": "closed", "concurrency": 8}}).trace()
    assert np.isnan(closed.arrival_s).all() and closed.closed_concurrency == 8
    gamma = Workload.from_dict({**BASE, "arrival": {"process": "gamma", "rate": 10, "cv": 3}}).trace()
    gaps = np.diff(gamma.arrival_s)
    assert gaps.std() / gaps.mean() > 1.5  # burstier than Poisson


@pytest.mark.parametrize("patch, match", [
    ({"requests": 0}, "requests=0"),
    ({"prompt_tokens": {"dist": "zipf"}}, "unknown dist 'zipf'"),
    ({"prompt_tokens": {"dist": "uniform", "min": 5}}, "missing field 'max'"),
    ({"arrival": {"process": "poisson"}}, "poisson needs rate > 0"),
    ({"arrival": {"process": "sometimes"}}, "arrival: expected"),
    ({"color": "red"}, r"unknown workload fields \['color'\]"),
    ({"shared_prefix": {"groups": 2}}, "shared_prefix: expected"),
    ({"slo": {"ttft": 3}}, r"slo: unknown fields \['ttft'\]"),
])
def test_malformed_workloads_name_the_field(patch, match):
    with pytest.raises(WorkloadError, match=match):
        Workload.from_dict({**BASE, **patch})


def test_frozen_workloads_load_by_name_and_round_trip(tmp_path):
    assert set(list_workloads()) >= {"short_long", "long_context", "many_small", "shared_prefix_chat"}
    for name in list_workloads():
        w = load_workload(name)
        assert Workload.from_dict(w.to_dict()) == w
    with pytest.raises(WorkloadError, match="no workload file"):
        load_workload(tmp_path / "missing.yaml")
