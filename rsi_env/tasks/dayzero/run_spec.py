"""Run inside a sandbox (by `rsi_env.sandbox.agent_runner`): ``spec.py``'s loader and cost functions.

Standard library only (copied into a fresh sandbox). The input is ``{"configs": {name: config},
"contexts": [int]}``; the answer ``{name: {"fields": {...}, "param_count": n, "flops_per_token": [n per
context], "kv_bytes": [n per context]}}``. The env validates every value that comes back.
"""

from __future__ import annotations

import copy
from typing import Any

FUNCTIONS = {name: name for name in ("spec_fields", "param_count", "flops_per_token", "kv_bytes")}


def answer(mod: Any, spec: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, cfg in spec["configs"].items():
        out[name] = {
            "fields": mod.spec_fields(copy.deepcopy(cfg)),
            "param_count": mod.param_count(copy.deepcopy(cfg)),
            "flops_per_token": [mod.flops_per_token(copy.deepcopy(cfg), c) for c in spec["contexts"]],
            "kv_bytes": [mod.kv_bytes(copy.deepcopy(cfg), c) for c in spec["contexts"]],
        }
    return out
