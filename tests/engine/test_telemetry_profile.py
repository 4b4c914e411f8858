"""`Profile`: the seven parts of a measurement's time, their shares and the dominant one, and how telemetry carries it."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsi_env.engine import PARTS, EngineConfig, Profile, Telemetry, load_hardware, load_model, load_workload
from rsi_env.engine.profile import PART_LABELS
from rsi_env.engine.task import load_task
from rsi_env.sim import SimTier, simulate
from rsi_env.store import ExperienceStore, record_measurements
from rsi_env.store.queries import best_configs

seconds = st.floats(0, 1e4, allow_nan=False, allow_infinity=False)
profiles = st.builds(lambda xs: Profile.from_seconds(xs), st.lists(seconds, min_size=len(PARTS), max_size=len(PARTS)))


def test_the_parts_are_declared_once_in_the_profile_s_own_order():
    assert PARTS == ("weights", "attention", "kv_read", "comm", "engine_cpu", "launch", "idle")
    assert tuple(Profile().to_dict()) == PARTS and set(PART_LABELS) == set(PARTS)
    assert Profile.from_seconds(range(7)).seconds() == (0, 1, 2, 3, 4, 5, 6)


@given(profiles)
def test_shares_sum_to_one_and_the_dict_round_trips(p: Profile):
    assert Profile.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    fr = p.fractions()
    assert tuple(fr) == PARTS and all(0.0 <= v <= 1.0 for v in fr.values())
    if p.total_s > 0:
        assert math.isclose(sum(fr.values()), 1.0, rel_tol=1e-9)
        assert math.isclose(p.busy_s + p.idle, p.total_s, rel_tol=1e-12, abs_tol=1e-12)
    else:
        assert p.empty and sum(fr.values()) == 0.0 and p.summary() == "" and p.bound() is None


@given(profiles)
def test_the_dominant_part_is_named_with_its_share(p: Profile):
    b = p.bound()
    if p.total_s <= 0:
        return
    assert b is not None
    part, share = b
    if p.idle >= 0.5 * p.total_s:
        assert part == "idle" and share == pytest.approx(p.idle / p.total_s)
        assert p.summary() == f"idle: {share * 100:.0f} % of the run waiting for arrivals"
    else:
        assert part != "idle" and all(getattr(p, part) >= getattr(p, q) for q in PARTS[:-1])
        assert share == pytest.approx(getattr(p, part) / p.busy_s)
        assert p.summary() == f"{PART_LABELS[part]}: {share * 100:.0f} % of step time"


def test_the_summary_reads_as_the_issue_asks():
    p = Profile(weights=0.3, kv_read=0.2, engine_cpu=0.08, launch=0.41, idle=0.01)
    assert p.summary() == "launch-bound: 41 % of step time"
    assert Profile(weights=1.0, idle=3.0).summary() == "idle: 75 % of the run waiting for arrivals"


def test_totals_add_part_by_part():
    a, b = Profile(weights=1.0, idle=2.0), Profile(weights=0.5, comm=0.25)
    assert Profile.total_of([a, b]) == Profile(weights=1.5, comm=0.25, idle=2.0)
    assert Profile.total_of([]) == Profile()


@pytest.mark.parametrize("raw", [{"weights": -1.0}, {"weights": float("nan")}, {"idle": float("inf")},
                                 {"launch": True}, {"launch": "1"}, {"gemm": 1.0}, [1.0] * 7, "weights"])
def test_a_malformed_profile_is_refused_by_name(raw):
    with pytest.raises(ValueError, match="profile"):
        Profile.from_dict(raw)


def test_telemetry_carries_the_profile_through_json():
    tel = simulate({}, "llama-3.2-1b", "h200", "short_long")
    assert tel.ok and not tel.profile.empty
    raw = json.loads(tel.to_json())
    assert set(raw["profile"]) == set(PARTS)
    assert Telemetry.from_dict(raw) == tel


def test_telemetry_stored_before_profiles_loads_with_an_empty_one():
    raw = simulate({}, "llama-3.2-1b", "h200", "short_long").to_dict()
    old = {k: v for k, v in raw.items() if k != "profile"}
    tel = Telemetry.from_dict(old)
    assert tel.profile == Profile() and tel.profile.empty
    assert tel.out_tok_per_s == raw["out_tok_per_s"] and tel.ttft_p99 == raw["ttft_p99"]
    assert Telemetry.from_dict({**old, "profile": None}).profile == Profile()


def test_a_failed_measurement_has_an_empty_profile():
    tel = simulate({"gpu_memory_utilization": 0.01}, "llama-3.1-70b", "h200", "short_long")  # does not fit: oom
    assert not tel.ok and tel.profile.empty and tel.profile.summary() == ""
    assert Telemetry.failed("oom").profile == Profile()


def test_the_store_reads_rows_written_before_profiles(tmp_path):
    """A real SQLite store: one row's telemetry loses its profile (as rows stored before it have none); every
    query that turns rows into telemetry still reads it, and the other rows keep theirs."""
    store = ExperienceStore(f"sqlite:///{tmp_path / 'exp.sqlite'}")
    tier, cfg = SimTier(), EngineConfig()
    m, hw = load_model("llama-3.2-1b"), load_hardware("h200")
    wls = [load_workload("short_long"), load_workload("many_small")]
    tels = tier.measure_all(cfg, m, hw, wls)
    record_measurements("sim", tier.engine_version, cfg, m, hw, wls, tels, store=store)
    rows = store.measurements()
    assert len(rows) == 2 and all(Telemetry.from_dict(r["telemetry"]).profile == t.profile
                                  for r, t in zip(rows, tels, strict=True))
    old = {k: v for k, v in rows[0]["telemetry"].items() if k != "profile"}
    with sqlite3.connect(tmp_path / "exp.sqlite") as conn:
        conn.execute("UPDATE measurements SET telemetry = ? WHERE id = ?", (json.dumps(old), rows[0]["id"]))
    again = {r["id"]: Telemetry.from_dict(r["telemetry"]) for r in store.measurements()}
    assert again[rows[0]["id"]].profile.empty and not again[rows[1]["id"]].profile.empty
    assert again[rows[0]["id"]].out_tok_per_s == tels[0].out_tok_per_s
    ranked = best_configs(store, "llama-3.2-1b", "h200", task=load_task("RSI/Batching-v0"))
    assert len(ranked) == 1 and ranked[0]["measurements"] == 2  # both rows read, the old one too


@given(profiles)
def test_the_plain_data_is_dataclasses_own(p: Profile):
    """`Profile.seconds` and `Telemetry.to_dict` read field by field (an env step calls them often); the data equals
    `dataclasses`' recursive conversion, key order included."""
    from dataclasses import asdict, astuple

    assert p.seconds() == astuple(p)
    for tel in (Telemetry(out_tok_per_s=1.5, num_preemptions=3, profile=p, calibration="c"),
                Telemetry.failed("invalid_config: no")):
        got = tel.to_dict()
        assert got == asdict(tel) and list(got) == list(asdict(tel)) and list(got["profile"]) == list(PARTS)
        assert Telemetry.from_dict(json.loads(json.dumps(got))) == tel
