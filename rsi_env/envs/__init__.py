"""The environments: one class driven by a task declared as data, one module per task family."""

from __future__ import annotations

from rsi_env.engine.task import Task, list_tasks, load_task
from rsi_env.envs.actions import KIND_NAMES
from rsi_env.envs.core import RsiEnv
from rsi_env.envs.observation import OBS_FIELDS
from rsi_env.envs.registration import register_envs
from rsi_env.envs.state import ValidationResult, validate

__all__ = ["KIND_NAMES", "OBS_FIELDS", "RsiEnv", "Task", "ValidationResult", "list_tasks", "load_task",
           "register_envs", "validate"]
