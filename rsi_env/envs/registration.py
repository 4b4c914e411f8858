"""Register every task of the catalog as a Gymnasium id (``RSI/<Family>-v<N>``), by string entry point."""

from __future__ import annotations

import warnings

import gymnasium as gym

from rsi_env.engine.task import list_tasks

__all__ = ["register_envs"]


def register_envs() -> list[str]:
    """Register the catalog's tasks; an id registered already (e.g. by a re-import) is left as it is."""
    ids = []
    for t in list_tasks():
        if t.id in gym.registry:
            existing = gym.registry[t.id]
            if existing.entry_point != t.entry_point:
                warnings.warn(f"{t.id} is registered to {existing.entry_point}; not overriding", stacklevel=2)
            ids.append(t.id)
            continue
        gym.register(id=t.id, entry_point=t.entry_point, max_episode_steps=None)
        ids.append(t.id)
    return ids
