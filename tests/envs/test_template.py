"""The template's bench and submit: what counts as measured, and a measurement that raises."""

from __future__ import annotations

import warnings

import gymnasium as gym

import rsi_env  # noqa: F401
from rsi_env.errors import RsiEnvError


class _RaisesFor:
    """A tier that measures as the env's own, except that it raises for one value of ``max_num_seqs``."""

    def __init__(self, inner, seqs: int) -> None:
        self.inner, self.seqs = inner, seqs
        self.name, self.engine_version = inner.name, inner.engine_version

    def measure_all(self, cfg, model, hw, workloads):
        if cfg.max_num_seqs == self.seqs:
            raise RsiEnvError("the engine went away")
        return self.inner.measure_all(cfg, model, hw, workloads)


def test_a_measurement_that_raised_leaves_the_configuration_unmeasured():
    # The attack: bench a good configuration, switch to one whose measurement raises, then submit it. Were the
    # raising bench counted as a measurement of it, submit would judge it on the good configuration's telemetry.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make("RSI/Batching-v0", auto_bench=False, sandbox="bubblewrap").unwrapped
    env.reset(seed=0)
    env.step(env.flag_action("max_num_seqs", 512))
    _, _, _, _, info = env.step({"kind": 3})
    good = info["telemetry"]
    env.tier = _RaisesFor(env.tier, 64)
    env.step(env.flag_action("max_num_seqs", 64))
    obs, _, _, _, _ = env.step({"kind": 3})
    assert "error: the engine went away" in obs["text"]
    obs, _, term, _, info = env.step({"kind": 4})
    assert not term and info["verdict"] is None and "error: the engine went away" in obs["text"]
    assert info["telemetry"] == good  # nothing measured since: and nothing judged on it
    env.close()
