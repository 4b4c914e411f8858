"""Run inside a sandbox: load ``policy.py`` from the working folder and write its keys for every request.

``python -I run_policy.py REQUESTS.json KEYS.json``. Standard library only (it is copied into a fresh
sandbox, away from the rsi_env package). The input is ``{workload: [request, ...]}`` (see
`rsi_env.sim.policy_hook`); the output ``{workload: {"waiting": [...], "victim": [...]}}``, or
``{"error": "..."}`` with the policy's exception. The env validates whatever comes back: nothing here
is trusted.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def _keys(policy: Any, requests: list[dict[str, Any]]) -> dict[str, list[float]]:
    waiting, victim = [], []
    for r in requests:  # in arrival order, one request at a time
        req = SimpleNamespace(**r)
        waiting.append(float(policy.waiting_key(req)))
        victim.append(float(policy.victim_key(req)))
    return {"waiting": waiting, "victim": victim}


def main(argv: list[str]) -> int:
    src, dst = Path(argv[1]), Path(argv[2])
    tables = json.loads(src.read_text())
    src.unlink()
    try:
        spec = importlib.util.spec_from_file_location("policy", Path("policy.py").resolve())
        if spec is None or spec.loader is None:
            raise ImportError("policy.py not found in the workspace")
        policy = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(policy)
        for name in ("waiting_key", "victim_key"):
            if not callable(getattr(policy, name, None)):
                raise AttributeError(f"policy.py must define a function {name}(request) -> float")
        out: dict[str, Any] = {name: _keys(policy, reqs) for name, reqs in tables.items()}
    except Exception as exc:  # the policy's own failure, reported to the agent
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
        out = {"error": "".join(tb)[-1500:]}
    dst.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
