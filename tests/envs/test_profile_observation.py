"""The observation carries the last measurement's profile (each part's share) and its text names the dominant part."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.engine import PARTS, Telemetry
from rsi_env.envs.observation import OBS_FIELDS, PROFILE_FIELDS
from rsi_env.wrappers import FlatObservation


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("RSI_ENV_STORE", "off")
    e = gym.make("RSI/Batching-v0")
    yield e
    e.close()


def _profile_obs(obs: dict) -> dict[str, float]:
    tel = obs["telemetry"]
    return {p: float(tel[OBS_FIELDS.index(f)]) for p, f in zip(PARTS, PROFILE_FIELDS, strict=True)}


def _expected(rsi) -> dict[str, float]:
    """The mean over the measured workloads of each part's share."""
    return {p: float(np.mean([t.profile.fractions()[p] for t in rsi.last_tels])) for p in PARTS}


def test_the_telemetry_ends_with_the_profile_s_shares(env):
    rsi = env.unwrapped
    obs, info = env.reset(seed=3)
    assert OBS_FIELDS[-len(PARTS):] == PROFILE_FIELDS == tuple(f"profile_{p}" for p in PARTS)
    assert obs["telemetry"].shape == (len(OBS_FIELDS),) and env.observation_space.contains(obs)
    got = _profile_obs(obs)
    assert got == pytest.approx(_expected(rsi), abs=1e-6) and sum(got.values()) == pytest.approx(1.0, abs=1e-5)
    assert all(set(t["profile"]) == set(PARTS) for t in info["telemetry"])  # info keeps the seconds


def test_an_eager_engine_shows_more_of_its_time_in_launches_and_says_what_bounds_it(env):
    rsi = env.unwrapped
    base, _ = env.reset(seed=3)
    assert "% of step time" in base["text"] or "of the run waiting for arrivals" in base["text"]
    env.step(rsi.flag_action("enforce_eager", True))
    obs, *_ = env.step({"kind": 3})
    assert _profile_obs(obs) == pytest.approx(_expected(rsi), abs=1e-6)
    assert _profile_obs(obs)["launch"] > _profile_obs(base)["launch"]
    for w, t in zip(rsi.workloads, rsi.last_tels, strict=True):
        assert f"{w.name}: " in obs["text"] and t.profile.summary() in obs["text"]


def test_a_failed_measurement_shows_no_profile(env):
    rsi = env.unwrapped
    env.reset(seed=3)
    rsi.last_tels = [Telemetry.failed("oom: out of memory", tier="sim")] + rsi.last_tels[1:]
    rsi.text = rsi._tel_text(rsi.last_tels)
    obs = rsi._obs()
    assert all(v == 0.0 for v in _profile_obs(obs).values()) and "ERROR oom" in obs["text"]


def test_the_flat_vector_carries_the_shares_too(env):
    flat = FlatObservation(env, action_mask=False)
    vec, _ = flat.reset(seed=3)
    n_flags = len(env.unwrapped.flag_names)
    assert vec.shape == (len(OBS_FIELDS) + n_flags + 2,)
    shares = vec[len(OBS_FIELDS) - len(PARTS):len(OBS_FIELDS)]
    assert shares.sum() == pytest.approx(1.0, abs=1e-5) and flat.observation_space.contains(vec)
