"""Recording into the experience store, automatically and cheaply: rows built from what a tier measured.

`rsi_env.store.recorded.Recorded` calls :func:`record_measurements` after the tier it wraps measures
(behind a cache, only for what was really measured, never for a cache hit); environments call
:func:`record_episode` when an episode ends. Both write to :func:`default_store` — one per process,
opened on the first write — and never fail a measurement: a store that cannot be written is reported once, as a warning.
:func:`recording` says who asked (``source``) and which episode a measurement belongs to.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import sqlite3
import sys
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.plain import plain
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.errors import StoreError
from rsi_env.store.db import ExperienceStore, default_store_url, now, parse_store_url

__all__ = ["REAL_EXTRAS", "config_key", "current_source", "default_store", "hardware_features", "measurement_rows",
           "record_episode", "record_measurements", "recording", "warn_once", "workload_stats"]

# What a real measurement keeps beside its telemetry (the ``extra`` column): its engine's start-up, its own wall
# time, the engine's counters, the usage context, the machine it ran on (`rsi_env.real.host`) and the driver's
# garbage-collector mode (`rsi_env.real.gc_pauses`; rows from before it have none: live).
REAL_EXTRAS = ("startup_s", "wall_s", "counters", "usage_context", "host", "gc")

_SOURCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("rsi_env_store_source", default=None)
_EPISODE: contextvars.ContextVar[str | None] = contextvars.ContextVar("rsi_env_store_episode", default=None)
_STORES: dict[str, ExperienceStore] = {}
_WARNED: set[str] = set()


def default_store() -> ExperienceStore | None:
    """This process's store at ``RSI_ENV_STORE`` (or the cache directory's); ``None`` when it is ``off``."""
    url = default_store_url()
    if parse_store_url(url) is None:
        return None
    st = _STORES.get(url)
    if st is None:
        st = _STORES[url] = ExperienceStore(url)
    return st


@contextmanager
def recording(source: str | None = None, episode: str | None = None) -> Iterator[None]:
    """Label what is measured inside: ``source`` nests (``search:optuna_tpe/env:RSI/Batching-v0``)."""
    outer = _SOURCE.get()
    tok_s = _SOURCE.set(source if outer is None or source is None else f"{outer}/{source}") if source else None
    tok_e = _EPISODE.set(episode) if episode is not None else None
    try:
        yield
    finally:
        if tok_e is not None:
            _EPISODE.reset(tok_e)
        if tok_s is not None:
            _SOURCE.reset(tok_s)


def current_source() -> str:
    """Who is asking: the innermost :func:`recording` label, else ``RSI_ENV_SOURCE``, else the program's name."""
    return _SOURCE.get() or os.environ.get("RSI_ENV_SOURCE") or Path(sys.argv[0] or "python").name or "python"


def config_key(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def workload_stats(w: Workload) -> dict[str, float | str]:
    """What a workload asks of the engine, in numbers: lengths (prefix included), rate or concurrency, count."""
    a = w.arrival
    return {"requests": float(w.requests), "prompt_mean": float(w.prompt_tokens.mean) + w.shared_prefix_tokens,
            "output_mean": float(w.output_tokens.mean), "shared_prefix_tokens": float(w.shared_prefix_tokens),
            "arrival": a.process, "rate": float(a.rate),
            "concurrency": float(a.concurrency if a.process == "closed" else (w.requests if a.process == "burst" else 0))}


def hardware_features(hw: HardwareSpec) -> dict[str, float]:
    return {**hw.features, "price_per_hour": hw.price_per_hour}


def measurement_rows(tier: str, engine_version: str, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                     workloads: Sequence[Workload], tels: Sequence[Telemetry], *,
                     sim_keys: Sequence[str | None] | None = None, resolved: Sequence[Any] | None = None,
                     extras: Sequence[Mapping[str, Any] | None] | None = None,
                     gpu_seconds: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """One store row per workload measured together (one trial). ``gpu_seconds`` defaults to duration x GPUs."""
    config = cfg.to_dict(only_set=True)
    key = config_key(config)
    mf, hf = model.features, hardware_features(hw)
    n = cfg.num_gpus
    trial = uuid.uuid4().hex
    t = now()
    src, ep = current_source(), _EPISODE.get()
    rows = []
    for i, (w, tel) in enumerate(zip(workloads, tels, strict=True)):
        gs = float(gpu_seconds[i]) if gpu_seconds is not None else (tel.duration_s * n if tel.ok else 0.0)
        rows.append({
            "uid": uuid.uuid4().hex, "created": t, "tier": tier, "engine_version": str(engine_version),
            "calibration": tel.calibration, "model": model.name, "model_features": mf, "hardware": hw.name,
            "hardware_features": hf, "num_gpus": n, "workload": w.name, "workload_hash": w.content_hash,
            "workload_spec": w.to_dict(), "workload_stats": workload_stats(w), "config": config, "config_key": key,
            "resolved": resolved[i] if resolved is not None else None, "telemetry": tel.to_dict(), "ok": int(tel.ok),
            "gpu_seconds": gs, "cost_usd": gs * hw.price_per_hour / 3600.0, "source": src, "episode": ep,
            "trial": trial, "sim_key": sim_keys[i] if sim_keys is not None else None,
            "extra": extras[i] if extras is not None else None})
    return rows


def warn_once(what: str, exc: BaseException) -> None:
    """Warn, once per process and ``what`` (e.g. "record an episode"), that the store could not be written."""
    if what not in _WARNED:
        _WARNED.add(what)
        warnings.warn(f"rsi-env: the experience store could not {what} ({exc}); measurements go on unrecorded. "
                      "Set RSI_ENV_STORE=off to silence this, or point it at a writable file.", stacklevel=3)


def record_measurements(tier: str, engine_version: str, cfg: EngineConfig, model: ModelSpec, hw: HardwareSpec,
                        workloads: Sequence[Workload], tels: Sequence[Telemetry], *,
                        store: ExperienceStore | None = None, **kw: Any) -> int:
    """Write one trial's rows to ``store`` (the default store if None); returns rows written (0 when off, or on
    a store error)."""
    if not workloads:
        return 0
    try:
        st = store if store is not None else default_store()
        if st is None:
            return 0
        return st.add_measurements(measurement_rows(tier, engine_version, cfg, model, hw, workloads, tels, **kw))
    except (StoreError, sqlite3.Error, OSError) as exc:
        warn_once("record measurements", exc)
        return 0


def record_episode(state: Mapping[str, Any], *, episode_id: str, best_score: float | None, steps: int,
                   measurements: int, extra: Mapping[str, Any] | None = None) -> bool:
    """Write (or update) one episode: the env's `state()` plus its best score and counts."""

    try:
        st = default_store()
        if st is None:
            return False
        st.add_episode({"id": episode_id, "created": now(), "task": state["task"], "kwargs": plain(state["kwargs"]),
                        "seed": state.get("seed"), "actions": plain(state["actions"]),
                        "rewards": plain(state["rewards"]), "final_config": plain(state["final_config"]),
                        "best_score": best_score, "passed": None if state.get("passed") is None else int(state["passed"]),
                        "steps": steps, "measurements": measurements, "source": current_source(),
                        "extra": plain(dict(extra or {}))})
        return True
    except (StoreError, sqlite3.Error, OSError) as exc:
        warn_once("record an episode", exc)
        return False
