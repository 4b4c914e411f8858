"""An instance's reference solution, as the workspace files that solve it (path -> whole text).

A flag instance's reference is the configuration that reached its frozen ceiling, written as ``serving.yaml``;
a code instance's is its family's hidden solution (``rsi_env/tasks/<family>/reference.py``'s
``reference_files(env)``, which reads the instance the env's reset drew). The reference agent writes these
files with edit actions and submits; the Harbor export writes them as the task's ``solution/``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import yaml

from rsi_env.errors import SuiteError
from rsi_env.suite.instance import Instance
from rsi_env.wrappers.ladders import rsi_env_of

__all__ = ["CODE_FAMILIES", "reference_files", "serving_yaml"]

# The code families and the module under rsi_env.tasks holding each one's hidden reference solution.
CODE_FAMILIES = {"Kernel": "kernel", "DayZero": "dayzero", "BugFix": "bugfix", "Scheduler": "scheduler",
                 "VLLMBugFix": "vllm_bugfix"}


def serving_yaml(config: Mapping[str, Any]) -> str:
    """``serving.yaml`` setting ``config``'s flags (the env applies it as an edit, flag by flag)."""
    return "# the reference configuration\n" + yaml.safe_dump(dict(config), default_flow_style=False, sort_keys=True)


def reference_files(instance: Instance, env: Any) -> dict[str, str]:
    """The files that solve ``instance`` in ``env`` (reset with the instance's seed), by workspace path."""
    ref = instance.reference
    if "config" in ref:
        return {"serving.yaml": serving_yaml(ref["config"])}
    family = ref.get("code")
    if family not in CODE_FAMILIES:
        raise SuiteError(f"instance {instance.id}: no reference solution for {family!r}")
    module = importlib.import_module(f"rsi_env.tasks.{CODE_FAMILIES[family]}.reference")
    return dict(module.reference_files(rsi_env_of(env)))
