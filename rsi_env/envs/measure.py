"""The tiers the envs measure on, composed once per process: `get_tier`.

A sim measurement is a pure function of (tier, vLLM version, calibration, model, hardware, resolved
config, workload content): `rsi_env.sim.SimTier.key` is exactly that, so behind `Cached` a repeated
measurement is free and any change — a different calibration included — measures again. What is
measured (never a cache hit) is written to the experience store by `Recorded`, keyed the same way, so it
is stored once. ``tier="endpoint:URL"`` measures a server already running at URL (its own flags; the env's
``engine_version`` says which vLLM release it runs).
"""

from __future__ import annotations

from functools import cache

from rsi_env.engine.engines import engine_of
from rsi_env.engine.tier import Cached, Tier
from rsi_env.errors import RsiEnvError
from rsi_env.real.endpoint import EndpointTier
from rsi_env.real.tier import RealTier
from rsi_env.sim import SimTier
from rsi_env.store.db import default_store_url
from rsi_env.store.recorded import Recorded

__all__ = ["ENDPOINT", "get_tier", "real_tier", "sim_tier"]

ENDPOINT = "endpoint:"  # tier="endpoint:http://host:port": a running OpenAI-compatible server


def sim_tier(engine_version: str, capacity: int = 20000) -> Cached:
    """A fresh sim tier of a vLLM release, or of SGLang's (``sglang-0.5.17``): the simulator, recorded, behind a
    cache of its measurements."""
    if engine_of(engine_version).name == "sglang":  # SGLang's simulator loads only where it is asked for
        from rsi_env.sim.sglang import SGLANG_SIM_VERSION, SglangSimTier

        if engine_version != SGLANG_SIM_VERSION:
            raise RsiEnvError(f"the SGLang sim models {SGLANG_SIM_VERSION} only, not {engine_version!r}")
        sglang = SglangSimTier()
        return Cached(Recorded(sglang), sglang.key, capacity=capacity,  # type: ignore[arg-type]
                      scope=default_store_url)  # SglangConfig where the seam's types name EngineConfig
    sim = SimTier(engine_version)
    return Cached(Recorded(sim), sim.key, capacity=capacity, scope=default_store_url)


@cache
def real_tier(engine: str = "vllm") -> RealTier:
    """The process's shared real engine: the installed vLLM, or SGLang (unrecorded: `get_tier` records it)."""
    return RealTier(engine=engine)


@cache
def get_tier(tier: str, engine_version: str) -> Tier:
    """The process's shared tier for ``tier``: the cached simulator of a vLLM release, the installed vLLM, or
    a running server (``endpoint:URL``); every measurement recorded in the experience store. An
    ``engine_version`` of ``sglang-<release>`` asks for SGLang's simulator or the installed SGLang instead."""
    if tier == "sim":
        return sim_tier(engine_version)
    if tier == "real":
        return Recorded(real_tier(engine_of(engine_version).name))
    if tier.startswith(ENDPOINT) and len(tier) > len(ENDPOINT):
        return Recorded(EndpointTier(tier.removeprefix(ENDPOINT), engine_version=engine_version))
    raise RsiEnvError(f"unknown tier {tier!r}: use 'sim', 'real' or 'endpoint:URL' (a running server)")
