"""The candidate's process: imports ``kernel.py`` and runs it on request; trusts nothing, is trusted for nothing.

``python -I worker.py OP DEVICE``, started by the harness, which sends one JSON request per line on
stdin and reads one JSON reply per line (on a copy of the original stdout; the kernel's own prints
go to stderr). Requests: ``prepare`` (build ``count`` input sets of a shape, outputs poisoned with
NaN), ``run`` (call the kernel on every prepared set, then wait for the device), ``dump`` (save one
set's inputs and outputs, as they are after the call, for the harness to check), ``noop`` (the
round trip the harness subtracts from its timings). Nothing this process says is believed: the
harness times it with its own clock and checks what it dumps against its own reference.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    op, device = argv[1], argv[2]
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the kernel's prints must not mix with the replies

    turn = [0]

    def reply(**kw: Any) -> None:
        replies.write(json.dumps({"turn": turn[0], **kw}) + "\n")

    sys.path.insert(0, str(Path.cwd()))  # -I leaves the folder off the path; ops.py sits there
    import ops
    import torch

    torch.set_num_threads(1)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    try:
        spec = importlib.util.spec_from_file_location("kernel", Path("kernel.py").resolve())
        if spec is None or spec.loader is None:
            raise ImportError("kernel.py is missing")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, op, None)
        if not callable(fn):
            raise AttributeError(f"kernel.py must define a function {op}(...)")
    except BaseException as exc:  # noqa: BLE001  (the kernel's own failure, reported)
        reply(error="importing kernel.py failed:\n" + "".join(traceback.format_exception(exc, limit=-4))[-1500:])
        return 0
    reply(ok=True)
    sets: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for line in sys.stdin:
        req = json.loads(line)
        cmd, turn[0] = req["cmd"], req["turn"]
        try:
            if cmd == "prepare":
                shape = req["shape"]
                sets = [(ops.make_inputs(shape, req["first"] + k, device), ops.make_outputs(shape, device))
                        for k in range(req["count"])]
                sync()
            elif cmd == "run":
                for inp, out in sets:
                    fn(**inp, **out)
                sync()
            elif cmd == "dump":
                inp, out = sets[req["index"]]
                torch.save({"inputs": {k: v.cpu() for k, v in inp.items() if isinstance(v, torch.Tensor)},
                            "outputs": {k: v.cpu() for k, v in out.items()}}, req["path"])
            elif cmd == "quit":
                return 0
        except BaseException as exc:  # noqa: BLE001
            reply(error=f"the kernel raised during {cmd}:\n"
                  + "".join(traceback.format_exception(exc, limit=-4))[-1500:])
            return 0
        reply(ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
