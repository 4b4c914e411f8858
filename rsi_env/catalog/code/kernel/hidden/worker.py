"""The candidate's process: imports ``kernel.py`` and runs it on request; trusts nothing, is trusted for nothing.

``python -I worker.py OP DEVICE FD SIZE``, started by the harness, which sends one JSON request per line on
stdin and reads one JSON reply per line (on a copy of the original stdout; the kernel's own prints
go to stderr). Every tensor the kernel sees lives in memory the harness allocated and reads itself: on
the CPU the shared file ``FD`` (``SIZE`` bytes, mapped here once), on CUDA a device buffer whose IPC
handle a ``map`` request brings. Requests: ``map`` (view that memory as ``count`` call sets of a shape,
in `ops.block_layout`'s layout), ``run`` (call the kernel on every set, then wait for the device),
``noop`` (the round trip the harness subtracts from its timings). The harness writes the inputs and
reads the outputs itself, while this process is stopped, so nothing this process says or does after
a call is believed.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import mmap
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _import_kernel(op: str) -> Callable[..., Any]:
    spec = importlib.util.spec_from_file_location("kernel", Path("kernel.py").resolve())
    if spec is None or spec.loader is None:
        raise ImportError("kernel.py is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, op, None)
    if not callable(fn):
        raise AttributeError(f"kernel.py must define a function {op}(...)")
    return fn


def _cpu_buffer(fd: int, size: int) -> Any:
    import torch

    return torch.frombuffer(mmap.mmap(fd, size), dtype=torch.uint8)


def _cuda_buffer(handle: str) -> Any:
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    return rebuild_cuda_tensor(*pickle.loads(base64.b64decode(handle)))  # noqa: S301  (sent by the harness)


def main(argv: list[str]) -> int:
    op, device, fd, size = argv[1], argv[2], int(argv[3]), int(argv[4])
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
    buf = _cpu_buffer(fd, size) if device == "cpu" else None
    try:
        fn = _import_kernel(op)
    except BaseException as exc:  # noqa: BLE001  (the kernel's own failure, reported)
        reply(error="importing kernel.py failed:\n" + "".join(traceback.format_exception(exc, limit=-4))[-1500:])
        return 0
    reply(ok=True)
    sets: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for line in sys.stdin:
        req = json.loads(line)
        cmd, turn[0] = req["cmd"], req["turn"]
        try:
            if cmd == "map":
                if "handle" in req:
                    buf = _cuda_buffer(req["handle"])
                sets = ops.block_views(buf, req["shape"], req["count"])
            elif cmd == "run":
                for inp, out in sets:
                    fn(**inp, **out)
                sync()
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
