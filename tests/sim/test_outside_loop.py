"""What a simulation remembers outside its engine loop (issue 30, docs/sim-speed.md), and the shortcuts beside it.

Each cache is a pure function of frozen inputs: these tests say that a caller cannot change what it holds, that
every input it depends on is part of its key, and that a caller's own types (a configuration with a resolution of
its own, another engine) are never served from it. Each shortcut gives what it replaced, bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import rsi_env.sim as sim
from rsi_env.engine.config import EngineConfig, ResolvedConfig
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.telemetry import _pct, percentiles
from rsi_env.engine.workload import load_workload
from rsi_env.envs.observation import CHARSET, TEXT_MAX, _mean, clean
from rsi_env.errors import InvalidConfigError
from rsi_env.sim.calibration import load_calibration, user_calibration_dir
from rsi_env.sim.engine import EngineSim
from rsi_env.sim.memory import plan_memory

MODEL, GPU = load_model("llama-3.1-8b"), load_hardware("h200")


def _bits(xs: list[float]) -> bytes:
    return np.array(xs, dtype=np.float64).tobytes()


# ---- the trace, drawn once per workload --------------------------------------------------------------------------
def test_a_remembered_trace_cannot_be_changed_by_a_caller():
    t = sim._frozen_trace(load_workload("short_long")).trace
    for a in (t.arrival_s, t.prompt_len, t.output_len, t.prefix_group, t.prefix_len):
        with pytest.raises(ValueError):
            a[0] = 1
        with pytest.raises(ValueError):
            a.setflags(write=True)  # a view of a read-only copy: never writeable again


def test_a_remembered_trace_is_the_workloads_own_and_each_seed_and_workload_has_its_own():
    wl = load_workload("short_long")
    seen = []
    for w in (wl, replace(wl, seed=wl.seed + 1), load_workload("many_small")):
        got, fresh = sim._frozen_trace(w).trace, w.trace()
        for f in ("arrival_s", "prompt_len", "output_len", "prefix_group", "prefix_len"):
            assert np.array_equal(getattr(got, f), getattr(fresh, f), equal_nan=True)
            assert getattr(got, f).dtype == getattr(fresh, f).dtype
        assert (got.closed_concurrency, got.seed) == (fresh.closed_concurrency, fresh.seed)
        seen.append(got.prompt_len.tobytes() + got.output_len.tobytes() + got.arrival_s.tobytes())
    assert len(set(seen)) == 3
    assert wl.trace().output_len.flags.writeable  # the public method still draws fresh, writeable arrays


def test_a_simulation_leaves_the_remembered_trace_as_it_was():
    wl = load_workload("short_long")
    before = sim._frozen_trace(wl).trace.output_len.copy()
    capped = {"max_model_len": 512}  # caps some outputs (short_long's prompt + output reach 757)
    assert sim._frozen_trace(wl).max_total > 512
    tel, cfg, _, res = sim.simulate_detailed(capped, MODEL, GPU, wl)
    assert tel.ok and cfg is not None
    assert np.array_equal(sim._frozen_trace(wl).trace.output_len, before)
    assert int((res[0].output_len + res[0].prompt_len).max()) <= 512


def test_a_callers_engine_gets_writeable_arrays_of_its_own():
    seen: list[Any] = []

    def make(*args: Any, **kwargs: Any) -> EngineSim:
        seen.append(args[2])  # the trace
        return EngineSim(*args, **kwargs)

    wl = load_workload("short_long")
    tel = sim.simulate_detailed(None, MODEL, GPU, wl, engine_cls=make)[0]
    assert tel.ok and seen[0].prompt_len.flags.writeable and seen[0].output_len.flags.writeable
    assert seen[0].prompt_len is not sim._frozen_trace(wl).trace.prompt_len
    assert tel == sim.simulate_detailed(None, MODEL, GPU, wl)[0]


# ---- the configuration's resolution and memory plan ----------------------------------------------------------------
@pytest.mark.parametrize("flag, values", [("gpu_memory_utilization", (0.9, 0.7, 0.9)), ("block_size", (16, 32, 16)),
                                          ("max_num_batched_tokens", (8192, 2048, 8192)),
                                          ("kv_cache_dtype", ("auto", "fp8", "auto"))])
def test_a_changed_flag_is_never_served_a_stale_plan(flag, values):
    wl = load_workload("short_long")
    cal = load_calibration(GPU.name, "0.26")
    blocks = []
    for v in values:
        cfg_in = EngineConfig.from_dict({flag: v})
        tel, cfg, plan, _ = sim.simulate_detailed(cfg_in, MODEL, GPU, wl)
        fresh = cfg_in.resolve(MODEL, GPU, "0.26", "server")
        assert cfg == fresh and getattr(cfg, flag) == fresh.__getattribute__(flag)
        assert plan == plan_memory(MODEL, GPU, fresh, cal)
        assert tel.num_gpu_blocks == plan.num_gpu_blocks
        blocks.append(plan.num_gpu_blocks)
    assert blocks[0] == blocks[2] != blocks[1]


def test_a_refusal_is_remembered_as_its_text_and_given_each_time():
    bad = EngineConfig.from_dict({"tensor_parallel_size": 3})  # 32 heads are not divisible by 3
    with pytest.raises(InvalidConfigError) as exc:
        bad.resolve(MODEL, GPU)
    for _ in range(2):
        tel = sim.simulate_detailed(bad, MODEL, GPU, "short_long")[0]
        assert tel.error == f"invalid_config: {exc.value}"


def test_a_configuration_with_its_own_resolution_is_asked_every_time():
    asked = []
    base = EngineConfig().resolve(MODEL, GPU)

    class Own(EngineConfig):
        def resolve(self, *args: Any, **kwargs: Any) -> ResolvedConfig:
            asked.append(1)
            return dataclasses.replace(base, max_num_seqs=8 * len(asked))

    own = Own()
    cfgs = [sim.simulate_detailed(own, MODEL, GPU, "short_long")[1] for _ in range(2)]
    assert len(asked) == 2 and [c.max_num_seqs for c in cfgs if c is not None] == [8, 16]


def test_the_measurement_key_holds_every_input():
    tier, wl = sim.SimTier(), load_workload("short_long")
    k = tier.key(EngineConfig(), MODEL, GPU, wl)
    assert k == tier.key(EngineConfig(), MODEL, GPU, wl)
    assert k != tier.key(EngineConfig(max_num_seqs=64), MODEL, GPU, wl)
    assert k != tier.key(EngineConfig(), MODEL, load_hardware("h100-sxm"), wl)
    assert k != tier.key(EngineConfig(), load_model("qwen2.5-7b"), GPU, wl)
    assert k != tier.key(EngineConfig(), MODEL, GPU, replace(wl, seed=wl.seed + 1))
    other = replace(load_calibration(GPU.name, "0.26"), id="another-fit")
    assert k != sim.SimTier(calibration=other).key(EngineConfig(), MODEL, GPU, wl)
    assert k != sim.SimTier("0.25").key(EngineConfig(), MODEL, GPU, wl)


def test_the_user_calibration_folder_follows_its_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("RSI_ENV_CALIBRATION_DIR", str(tmp_path / "a"))
    assert user_calibration_dir() == tmp_path / "a"
    monkeypatch.setenv("RSI_ENV_CALIBRATION_DIR", str(tmp_path / "b"))
    assert user_calibration_dir() == tmp_path / "b"
    monkeypatch.delenv("RSI_ENV_CALIBRATION_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    assert user_calibration_dir() == tmp_path / "c" / "rsi-env" / "calibration"


# ---- the shortcuts: what they replaced, bit for bit ----------------------------------------------------------------
def test_percentiles_are_numpys_bit_for_bit():
    rng = np.random.default_rng(7)
    qs = (50, 90, 99)
    arrays = [rng.exponential(size=n) * 10.0 ** rng.integers(-6, 4) for n in range(1, 60)]
    arrays += [np.round(rng.random(500), 2), rng.random(10_001), np.array([3.0, np.nan, 1.0]),
               np.array([-np.inf, 1.0, np.inf]), np.array([0.0, -0.0, 0.0]), np.arange(7, dtype=np.int64),
               np.array([], dtype=np.float64)]
    with np.errstate(invalid="ignore"):
        for x in arrays:
            assert _bits(percentiles(x, qs)) == _bits([_pct(x, q) for q in qs]), x


@pytest.mark.parametrize("n", range(1, 11))
def test_the_observations_mean_is_numpys_bit_for_bit(n):
    rng = np.random.default_rng(n)
    for _ in range(300):
        vals = [float(v) for v in rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)]
        if n > 1:
            vals[0] = -0.0 if n % 2 else vals[0]
        got, want = _mean(vals), float(np.mean(vals))
        assert got == want and math.copysign(1, got) == math.copysign(1, want)


def test_clean_replaces_each_character_outside_the_charset():
    rng = np.random.default_rng(3)
    for _ in range(500):
        text = "".join(chr(int(c)) for c in rng.integers(0, 0x3000, int(rng.integers(0, 80))))
        want = "".join(c if c in CHARSET else "?" for c in text)
        assert clean(text) == want
    assert clean("x" * (TEXT_MAX + 5)).endswith("\n...[truncated]") and len(clean("x" * (TEXT_MAX + 5))) == TEXT_MAX


def test_the_envs_check_remembers_what_vllm_accepts_and_refuses_afresh_each_time():
    from rsi_env.engine.engines import get_engine

    check = get_engine("vllm").check
    check(EngineConfig(max_num_seqs=64), MODEL, GPU, "0.26")
    check(EngineConfig(max_num_seqs=64), MODEL, GPU, "0.26")
    for _ in range(2):
        with pytest.raises(InvalidConfigError, match="divisible"):
            check(EngineConfig(tensor_parallel_size=3), MODEL, GPU, "0.26")
    with pytest.raises(InvalidConfigError):  # accepted by one release is not accepted by another
        check(EngineConfig(max_num_seqs=64), MODEL, GPU, "0.1")


def test_a_chip_without_a_fit_gets_the_default_named_for_it_each_time():
    from rsi_env.sim.calibration import _load

    for hw, ver in (("l4", "0.26"), ("l40s", "0.26"), ("l4", "0.25")):
        cal = load_calibration(hw, ver)
        assert cal == replace(_load("default.yaml"), hardware=hw, engine_version=ver)
        assert load_calibration(hw, ver) == cal and cal.hardware == hw and cal.engine_version == ver
    with pytest.raises(dataclasses.FrozenInstanceError):
        cal.hardware = "h200"  # type: ignore[misc]  (shared between calls: frozen)
