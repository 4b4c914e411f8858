"""Record which top-level modules every Python process imports, and from where: SGLang's import closure.

Copied as ``sitecustomize.py`` into a folder put first on ``PYTHONPATH``, with ``RSI_IMPORT_LOG`` naming an output
folder: each process (SGLang's scheduler and detokenizer are spawned interpreters) rewrites
``<pid>.json`` every second with ``{module: file}`` for each top-level module it has loaded. The union over the
processes of a running engine is what the carried pieces must hold; a carried wheel that no process loaded can be
left out. A debugging aid of the GPU recipe (tools/gpu/prepare_sglang.sh), not part of any measurement.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading

__all__: list[str] = []


def _dump(path: str) -> None:
    mods = {}
    for name, mod in list(sys.modules.items()):
        if "." not in name:
            mods[name] = getattr(mod, "__file__", None) or "(built-in)"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"argv": sys.argv, "modules": mods}, f)
    os.replace(tmp, path)


def _loop(path: str) -> None:
    while True:
        with contextlib.suppress(Exception):  # a record must never disturb the process it watches
            _dump(path)
        threading.Event().wait(1.0)


_folder = os.environ.get("RSI_IMPORT_LOG")
if _folder:
    os.makedirs(_folder, exist_ok=True)
    threading.Thread(target=_loop, args=(os.path.join(_folder, f"{os.getpid()}.json"),), daemon=True).start()
