"""Run inside a sandbox: evaluate ``spec.py``'s loader and cost functions on the given configs.

``python -I run_spec.py CONFIGS.json OUT.json``; standard library only (copied into a fresh sandbox).
CONFIGS is ``{"configs": {name: config}, "contexts": [int]}``; OUT is ``{name: {"fields": {...},
"param_count": n, "flops_per_token": [n per context], "kv_bytes": [n per context]}}`` or ``{"error":
text}``. The env validates every value that comes back.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
import traceback
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    src, dst = Path(argv[1]), Path(argv[2])
    spec = json.loads(src.read_text())
    src.unlink()
    try:
        mod_spec = importlib.util.spec_from_file_location("spec", Path("spec.py").resolve())
        if mod_spec is None or mod_spec.loader is None:
            raise ImportError("spec.py not found in the workspace")
        mod = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(mod)
        for name in ("spec_fields", "param_count", "flops_per_token", "kv_bytes"):
            if not callable(getattr(mod, name, None)):
                raise AttributeError(f"spec.py must define a function {name}")
        out: dict[str, Any] = {}
        for name, cfg in spec["configs"].items():
            out[name] = {
                "fields": mod.spec_fields(copy.deepcopy(cfg)),
                "param_count": mod.param_count(copy.deepcopy(cfg)),
                "flops_per_token": [mod.flops_per_token(copy.deepcopy(cfg), c) for c in spec["contexts"]],
                "kv_bytes": [mod.kv_bytes(copy.deepcopy(cfg), c) for c in spec["contexts"]],
            }
        text = json.dumps(out)
    except Exception as exc:  # the loader's own failure, reported to the agent
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
        text = json.dumps({"error": "".join(tb)[-1500:]})
    dst.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
